"""``switchboard plugin new NAME``: the package it writes installs with ``pip install -e``, is listed
as loaded by ``switchboard plugins``, and its own generated tests pass.

The install goes into a throwaway virtual environment layered over this one (a ``.pth`` file adds
this environment's site-packages), so switchboard, pytest and setuptools are shared and nothing is
downloaded, while the shared environment itself never sees the generated package. One
``pip install --no-deps --no-build-isolation``: the slow part, a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from click.testing import CliRunner

from switchboard.cli import main
from switchboard.cli.plugin_new import Names, render
from switchboard.settings import ENV_PREFIX
from switchboard.testing import TEST_DATABASE_ENV

KIND = "acme_demo"


def _env() -> dict[str, str]:
    """This process's environment without SWITCHBOARD_* (the test database URL is kept, so the
    generated tests run on this run's engine), never reaching a package index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX) or k == TEST_DATABASE_ENV}
    env.update({"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def _run(
    *args: str | Path, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(  # noqa: S603 - our interpreters, our arguments
        [str(a) for a in args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done


def _layered_venv(folder: Path) -> Path:
    """A virtual environment whose site-packages also holds this one's (with its .pth files, so the
    editable switchboard and its bundled plugins import); its python."""
    venv.EnvBuilder(with_pip=False).create(folder)
    python = folder / "bin" / "python"
    purelib = subprocess.run(  # noqa: S603 - the venv's own interpreter
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "_switchboard_parent.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return python


def test_the_generated_package_installs_is_listed_and_passes_its_tests(tmp_path: Path) -> None:
    package = tmp_path / "switchboard-acme-demo"
    made = _run(sys.executable, "-m", "switchboard", "plugin", "new", KIND, "--dir", package, "--json")
    answer = json.loads(made.stdout)
    assert (answer["package"], answer["module"]) == ("switchboard-acme-demo", "switchboard_acme_demo")
    assert set(answer["files"]) == {
        "README.md",
        "pyproject.toml",
        "switchboard_acme_demo/__init__.py",
        "tests/test_acme_demo_provider.py",
    }

    python = _layered_venv(tmp_path / "venv")
    _run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", package)

    listed = json.loads(_run(python, "-m", "switchboard", "plugins", "--json").stdout)
    rows = {row["name"]: row for row in listed["plugins"]}
    row = rows[KIND]
    assert (row["status"], row["package"], row["version"]) == ("loaded", "switchboard-acme-demo", "0.1.0"), (
        row
    )
    assert row["source_kinds"] == [KIND] and row["connection_kinds"] == [KIND]
    settings = [s["name"] for kind in row["kinds"] for s in kind.get("settings", [])]
    assert settings == ["SWITCHBOARD_ACME_DEMO_API_URL"]
    # The bundled plugins still load beside it.
    assert {"github", "slack", "linear", "plain"} <= {n for n, r in rows.items() if r["status"] == "loaded"}

    tested = _run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=package, timeout=600)
    assert " passed" in tested.stdout and "failed" not in tested.stdout, tested.stdout

    # The shared environment never had it.
    shared = json.loads(_run(sys.executable, "-m", "switchboard", "plugins", "--json").stdout)
    assert KIND not in {row["name"] for row in shared["plugins"]}


def test_every_placeholder_is_filled() -> None:
    files = render(Names("acme_chat"))
    assert set(files) == {
        "README.md",
        "pyproject.toml",
        "switchboard_acme_chat/__init__.py",
        "tests/test_acme_chat_provider.py",
    }
    for path, text in files.items():
        assert "${" not in text and "acme_chat" in text, path
    module = files["switchboard_acme_chat/__init__.py"]
    assert (
        'SIGNATURE_HEADER = "X-Acme-Chat-Signature"' in module and "SWITCHBOARD_ACME_CHAT_API_URL" in module
    )
    assert 'acme_chat = "switchboard_acme_chat"' in files["pyproject.toml"]
    compile(module, "switchboard_acme_chat/__init__.py", "exec")
    compile(files["tests/test_acme_chat_provider.py"], "test_acme_chat_provider.py", "exec")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Acme", "lower-case letters"),
        ("acme-chat", "lower-case letters"),
        ("9acme", "lower-case letters"),
        ("generic", "already provided by plugin 'generic'"),
    ],
)
def test_names_that_cannot_be_a_new_kind_are_refused(tmp_path: Path, name: str, message: str) -> None:
    result = CliRunner().invoke(main, ["plugin", "new", name, "--dir", str(tmp_path / "out")])
    assert result.exit_code == 1 and message in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_is_never_written_into(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("mine")
    result = CliRunner().invoke(main, ["plugin", "new", "acme", "--dir", str(tmp_path)])
    assert result.exit_code == 1 and "not an empty folder" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]
