"""The plugin platform: discovery through entry points, listing, choosing what loads, a broken plugin
kept apart, and dispatch by kind (each kind's callables see only that kind's traffic)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fixtures import memo_plugin

from switchboard import plugins
from switchboard.provider import Address, Delivery, EchoClues, ReplyPost, Verdict
from switchboard.settings import Settings
from switchboard.testing import ServeProcesses, hexmac

FIXTURES = Path(__file__).parent / "fixtures"
BUNDLED = {"github", "gitea", "slack", "cairn"}


def installed_site(tmp_path: Path, **modules: str) -> Path:
    """A site directory holding each plugin as an installed distribution would: ``name=source``
    becomes module ``switchboard_<name>`` with entry point ``<name>`` in ``switchboard-<name> 0.2.5``."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    for name, source in modules.items():
        (site / f"switchboard_{name}.py").write_text(source)
        dist = site / f"switchboard_{name}-0.2.5.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: switchboard-{name}\nVersion: 0.2.5\n")
        (dist / "entry_points.txt").write_text(f"[switchboard]\n{name} = switchboard_{name}\n")
    return site


def memo_source() -> str:
    return (FIXTURES / "memo_plugin.py").read_text()


BROKEN = 'raise ImportError("needs libfrob 2, which is not installed")\n'


def switchboard(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    return subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-m", "switchboard", *args],
        env={**clean, "PYTHONPATH": str(site), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def plugin_rows(site: Path, **env: str) -> dict[str, dict[str, Any]]:
    out = switchboard(site, "plugins", "--json", **env)
    assert out.returncode == 0, out.stderr
    return {row["name"]: row for row in json.loads(out.stdout)["plugins"]}


# ---------------------------------------------------------------------------------------------
# Discovery, listing, choosing


def test_plugins_json_lists_every_provider_with_version_kinds_descriptions_and_settings(
    tmp_path: Path,
) -> None:
    site = installed_site(tmp_path, memo=memo_source())
    rows = plugin_rows(
        site, SWITCHBOARD_MEMO_API_URL="http://127.0.0.1:9/memo/", SWITCHBOARD_MEMO_TOKEN="t0p"
    )
    assert {"generic", "stripe", "memo"} | BUNDLED <= set(rows)
    memo = rows["memo"]
    assert (memo["package"], memo["version"], memo["status"], memo["error"]) == (
        "switchboard-memo",
        "0.2.5",
        "loaded",
        None,
    )
    assert memo["source_kinds"] == ["memo"] and memo["connection_kinds"] == ["memo"]
    assert memo["hooks"] == ["register_kinds"]
    kinds = {(k["role"], k["name"]): k for k in memo["kinds"]}
    assert kinds[("source", "memo")]["description"] == "Memo rooms (a throwaway test provider)."
    connection = kinds[("connection", "memo")]
    assert connection["account_key_hint"] == "the memo workspace name"
    assert connection["secret_rules"] == ["memo-api-key"]
    settings = {s["name"]: s for s in connection["settings"]}
    # The value as checked (no trailing slash), where it came from; a secret one is never shown.
    assert settings["SWITCHBOARD_MEMO_API_URL"]["value"] == "http://127.0.0.1:9/memo"
    assert settings["SWITCHBOARD_MEMO_API_URL"]["from"] == "environment"
    assert settings["SWITCHBOARD_MEMO_TOKEN"]["value"] is None
    assert settings["SWITCHBOARD_MEMO_TOKEN"]["from"] == "environment"
    assert "t0p" not in json.dumps(rows)
    # The bundled kinds describe themselves and keep their API settings' names.
    github = {(k["role"], k["name"]): k for k in rows["github"]["kinds"]}
    assert github[("connection", "github")]["settings"][0]["name"] == "SWITCHBOARD_GITHUB_API_URL"
    assert github[("connection", "github")]["settings"][0]["value"] == "https://api.github.com"
    assert github[("connection", "github")]["settings"][0]["from"] == "default"
    assert rows["generic"]["builtin"] and rows["generic"]["source_kinds"] == ["generic"]
    assert rows["github"]["package"] == "switchboard-github"

    text = switchboard(site, "plugins")
    assert text.returncode == 0
    assert "memo (switchboard-memo 0.2.5): loaded" in text.stdout
    assert "  source memo: Memo rooms (a throwaway test provider)." in text.stdout
    assert "    SWITCHBOARD_MEMO_API_URL = https://memo.invalid/api (default)" in text.stdout
    assert "    SWITCHBOARD_MEMO_TOKEN = (secret, unset)" in text.stdout


def test_a_plugin_that_fails_to_import_is_listed_with_its_error_and_the_rest_load(tmp_path: Path) -> None:
    site = installed_site(tmp_path, memo=memo_source(), broken=BROKEN)
    out = switchboard(site, "plugins", "--json")
    assert out.returncode == 0, out.stderr
    rows = {row["name"]: row for row in json.loads(out.stdout)["plugins"]}
    broken = rows["broken"]
    assert broken["status"] == "failed" and broken["kinds"] == [] and broken["hooks"] == []
    assert broken["error"] == (
        "failed to import: ImportError: needs libfrob 2, which is not installed; "
        "fix or disable it (SWITCHBOARD_DISABLE_PLUGINS=broken)"
    )
    assert rows["memo"]["status"] == "loaded" and all(rows[name]["status"] == "loaded" for name in BUNDLED)
    # Logged once, on one line.
    assert out.stderr.count("needs libfrob 2") == 1, out.stderr
    assert "Traceback" not in out.stderr
    text = switchboard(site, "plugins")
    assert "broken (switchboard-broken 0.2.5): failed: failed to import: ImportError" in text.stdout
    # Disabled, it is not even imported.
    quiet = switchboard(site, "plugins", "--json", SWITCHBOARD_DISABLE_PLUGINS="broken")
    assert "libfrob" not in quiet.stderr
    assert {r["name"]: r for r in json.loads(quiet.stdout)["plugins"]}["broken"]["status"] == "disabled"


def test_the_allowlist_and_the_denylist_choose_what_loads(tmp_path: Path) -> None:
    site = installed_site(tmp_path, memo=memo_source(), broken=BROKEN)
    # The allowlist names installed plugins by entry point or package; built-ins always load.
    rows = plugin_rows(site, SWITCHBOARD_PLUGINS="memo, switchboard-GitHub")
    assert {n for n, r in rows.items() if r["status"] == "loaded"} == {"generic", "stripe", "memo", "github"}
    # (Any other plugin installed here is disabled too.)
    assert {"gitea", "slack", "cairn", "broken"} <= {n for n, r in rows.items() if r["status"] == "disabled"}
    # Empty: no installed plugin at all.
    rows = plugin_rows(site, SWITCHBOARD_PLUGINS="")
    assert {n for n, r in rows.items() if r["status"] == "loaded"} == {"generic", "stripe"}
    # The denylist wins, and takes built-ins too; a name in the allowlist that is not installed says so.
    rows = plugin_rows(site, SWITCHBOARD_PLUGINS="memo,nosuch", SWITCHBOARD_DISABLE_PLUGINS="memo,stripe")
    assert {n for n, r in rows.items() if r["status"] == "loaded"} == {"generic"}
    assert rows["nosuch"]["status"] == "missing" and "not installed" in rows["nosuch"]["error"]
    # A name that cannot be a plugin stops the command like any bad setting.
    bad = switchboard(site, "plugins", SWITCHBOARD_DISABLE_PLUGINS="memo,rm -rf")
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: SWITCHBOARD_DISABLE_PLUGINS: 'rm -rf' is not a plugin name")


async def test_serve_runs_beside_a_broken_plugin_and_a_disabled_kind_is_not_served(
    tmp_path: Path, switchboard_serve: ServeProcesses
) -> None:
    site = installed_site(tmp_path, memo=memo_source(), broken=BROKEN)
    server = switchboard_serve.new({"disable_plugins": "stripe"})
    server.env["PYTHONPATH"] = str(site)
    await server.start()
    listed = {row["name"]: row for row in (await server.cli("plugins"))["plugins"]}
    assert listed["broken"]["status"] == "failed" and listed["memo"]["status"] == "loaded"
    assert listed["stripe"]["status"] == "disabled"
    await server.cli("human", "add", "ada")
    await server.cli("endpoint", "vend", "--name", "Ada bot", "--owner", "ada")
    created = await server.cli("webhook", "create", "--endpoint", "ada-bot", "--source", "memo")
    body = b'{"room": "acme.ops", "text": "hello"}'
    headers = {
        "Memo-Signature": "sha256=" + hexmac(created["secret"], body),
        "Memo-Delivery": "d-1",
        "Content-Type": "application/json",
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(created["ingest_url"], data=body, headers=headers) as resp,
    ):
        answer = await resp.json()
    assert resp.status == 202 and answer["created"] == 1, answer
    refused = await server.run("webhook", "create", "--endpoint", "ada-bot", "--source", "stripe", "--json")
    assert refused.returncode != 0 and "unknown source kind 'stripe'" in refused.stderr
    await server.stop()
    log = server.log()
    assert log.count("needs libfrob 2") == 1, log
    assert "Traceback" not in log


# ---------------------------------------------------------------------------------------------
# Dispatch by kind


def delivery(source: str, body: bytes, headers: dict[str, str], secret: str | None) -> Delivery:
    return Delivery(source=source, headers=headers, body=body, received_at=datetime.now(UTC), secret=secret)


def test_each_call_reaches_only_the_kind_that_owns_the_delivery() -> None:
    providers = plugins.load(extra=[memo_plugin])
    memo_plugin.CALLS.clear()
    body = b'{"room": "acme.ops", "text": "hi", "message_id": "m_1"}'
    memo = delivery("memo", body, {"Memo-Signature": "sha256=" + hexmac("s", body)}, "s")
    kind = providers.source("memo")
    verdict = kind.verify(memo)
    assert verdict.ok and verdict.detail == "memo signature ok"
    assert kind.derive_address(memo, verdict) == Address(
        "memo_room", "memo", "memo acme.ops", {"room": "acme.ops"}
    )
    assert kind.echo_clues(memo, verdict) == EchoClues(object_ids=("m_1",))
    assert memo_plugin.CALLS == [("verify", "memo"), ("derive_address", "memo"), ("echo_clues", "memo")]

    # Every other kind's deliveries go to their own kinds; memo's callables never see them.
    memo_plugin.CALLS.clear()
    stripe = providers.source("stripe").verify(delivery("stripe", b"{}", {}, "whsec_x"))
    assert isinstance(stripe, Verdict) and not stripe.ok and "missing" in stripe.detail
    github = providers.source("github").verify(delivery("github", body, {}, "s"))
    assert not github.ok and github.detail == "X-Hub-Signature-256 missing"
    generic = providers.source("generic").verify(delivery("generic", b'{"title":"hi"}', {}, None))
    assert generic.detail.startswith("not verified")
    assert providers.source("generic").derive_address(delivery("generic", b"{}", {}, None), generic) is None
    assert memo_plugin.CALLS == []
    with pytest.raises(plugins.UnknownKind):
        providers.source("nobody")


async def test_post_goes_to_the_connection_kind_of_the_address_only() -> None:
    providers = plugins.load(extra=[memo_plugin])
    memo_plugin.CALLS.clear()
    address = Address("memo_room", "memo", "memo acme.ops", {"room": "../x"})
    post = ReplyPost(
        http=None, kind="memo", account_key="acme", secret="k", address=address, text="hi", reply_id="rp_1"
    )  # type: ignore[arg-type]
    result = await providers.connection("memo").post(post)
    # The room fails the kind's strict check, so nothing is dialled (http is None here).
    assert (result.state, result.error_code) == ("failed", "bad_address")
    assert memo_plugin.CALLS == [("post", "memo")]
    assert providers.connection("memo").account_matches(
        "acme", Address("memo_room", "memo", "", {"room": "acme.x"})
    )
    with pytest.raises(plugins.UnknownKind):
        providers.connection("nobody")


def test_tests_can_load_no_installed_plugins() -> None:
    providers = plugins.load(entrypoints=False)
    assert set(providers.sources) == {"generic", "stripe"} and providers.connections == {}
    assert providers.failed == []


def test_the_settings_allowlist_applies_in_process_too() -> None:
    providers = plugins.load(Settings(plugins="github", disable_plugins="generic"))
    assert set(providers.sources) == {"stripe", "github"}
    disabled = {p.name for p in providers.plugins.values() if p.status == "disabled"}
    assert (BUNDLED - {"github"}) | {"generic"} <= disabled and "github" not in disabled


def test_the_secret_rules_of_every_loaded_kind_are_collected() -> None:
    providers = plugins.load(entrypoints=False, extra=[memo_plugin], strict=True)
    assert [rule.id for rule in providers.secret_rules] == ["memo-api-key"]


def test_kinds_describe_themselves_for_the_api_and_the_ui() -> None:
    kinds = plugins.load(extra=[memo_plugin]).kinds()
    sources = {k["name"]: k for k in kinds["sources"]}
    connections = {k["name"]: k for k in kinds["connections"]}
    assert sources["memo"] == {
        "name": "memo",
        "description": "Memo rooms (a throwaway test provider).",
        "secret": "minted",
        "plugin": "fixtures.memo_plugin",
        "trust": None,
    }
    assert connections["github"]["account_key_hint"] == "the forge host (github.com when empty)"
    assert connections["github"]["default_account_key"] == "github.com"
    assert all(k["description"] for k in [*kinds["sources"], *kinds["connections"]])
    assert all(k["account_key_hint"] for k in kinds["connections"])


def test_the_bundled_plugins_import_only_the_sdk() -> None:
    root = Path(__file__).parents[1]
    sources = [*root.glob("plugins/*/switchboard_*/*.py"), *root.glob("switchboard/providers/*.py")]
    assert len(sources) >= 7
    for path in sources:
        for line in path.read_text().splitlines():
            if line.startswith(("from switchboard", "import switchboard")):
                assert line.startswith("from switchboard.sdk import"), (path, line)
