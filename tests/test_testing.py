"""switchboard.testing, the helpers shipped for provider authors: they import without pytest, nothing
else in switchboard imports them, stand-ins of any kind answer as told, and a `switchboard serve`
environment built from settings reaches a stand-in over TLS."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import switchboard
import switchboard.testing
from switchboard.testing import (
    FakeProvider,
    FakeProviders,
    Recorded,
    ServeProcesses,
    guarded_client,
    serve_env,
)

PACKAGE = Path(switchboard.__file__).parent
SECRET = "gh-testing-secret-" + "Lq4Wm8"


def test_the_helpers_import_without_pytest() -> None:
    # A None entry in sys.modules makes `import pytest` fail, as if it were not installed.
    code = "import sys; sys.modules['pytest'] = None; import switchboard.testing as t; print(len(t.__all__))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)  # noqa: S603 (our interpreter)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(switchboard.testing.__all__)


def test_every_exported_name_exists() -> None:
    assert sorted(switchboard.testing.__all__) == sorted(set(switchboard.testing.__all__))
    for name in switchboard.testing.__all__:
        assert hasattr(switchboard.testing, name), name


def test_no_module_outside_the_package_imports_it() -> None:
    testing = PACKAGE / "testing"
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if testing in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            if any(n == "switchboard.testing" or n.startswith("switchboard.testing.") for n in names):
                offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []


def test_serve_env_names_settings_and_drops_the_callers_switchboard_variables() -> None:
    base = {"PATH": "/bin", "SWITCHBOARD_LOG_LEVEL": "DEBUG", "SWITCHBOARD_TEST_DATABASE_URL": "x"}
    env = serve_env({"port": 8081, "outbound_allow_http": True, "secret_encryption_key": None}, base)
    assert env == {"PATH": "/bin", "SWITCHBOARD_PORT": "8081", "SWITCHBOARD_OUTBOUND_ALLOW_HTTP": "true"}


async def test_a_stand_in_of_a_new_kind_answers_as_told_and_404_otherwise(
    fake_providers: FakeProviders,
) -> None:
    def answer(rec: Recorded) -> tuple[int, object]:
        return (200, {"data": {"ok": True}}) if rec.path == "/graphql" else (404, {"errors": ["no"]})

    linear = await fake_providers.start("linear", answer=answer)
    silent = await fake_providers.start("plain")
    client = guarded_client(allow_http=False)
    try:
        for fake, path, status in ((linear, "/graphql", 200), (linear, "/x", 404), (silent, "/graphql", 404)):
            resp = await client.request(
                "POST", f"{fake.base_url}{path}", json_body={"query": "{ viewer { id } }"}
            )
            assert resp.status == status
        assert [r.json for r in silent.requests] == [{"query": "{ viewer { id } }"}]
    finally:
        await client.close()


async def test_a_serve_environment_trusts_the_stand_ins_test_ca(
    switchboard_serve: ServeProcesses, fake_github: FakeProvider
) -> None:
    # Plain HTTP refused: the only way to the stand-in is TLS, verified against the test CA.
    sb = switchboard_serve.new({"github_api_url": fake_github.base_url, "outbound_allow_http": False})
    await sb.cli("human", "add", "ada")
    made = await sb.cli(
        "connection", "add", "--owner", "ada", "--kind", "github", "--name", "gh",
        "--account-key", "github.com", stdin=SECRET,
    )  # fmt: skip
    tested = await sb.cli("connection", "test", made["connection"]["id"])
    assert tested["test"]["ok"] is True
    assert [(r.method, r.path, r.auth) for r in fake_github.requests] == [
        ("GET", "/user", f"Bearer {SECRET}")
    ]
    # Without the CA the same call fails the TLS handshake and records nothing.
    del sb.env["SSL_CERT_FILE"]
    untrusted = await sb.run("connection", "test", made["connection"]["id"], "--json")
    assert untrusted.returncode == 1 and json.loads(untrusted.stdout)["test"]["ok"] is False
    assert len(fake_github.requests) == 1
