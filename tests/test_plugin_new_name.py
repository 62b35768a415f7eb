"""``switchboard plugin new NAME`` writes a package that installs with ``pip install -e`` (docs/cli.md).
A NAME ending in ``_`` became a distribution name ending in ``-`` (``switchboard-acme-``), which is no
valid project name: the command said "wrote …" and exited 0, then ``pip install -e`` failed with
"`project.name` must be pep508-identifier". Such a NAME is refused up front, one line, nothing
written. (The install itself is ``tests/test_plugin_template.py``'s; here the name alone.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from switchboard.cli import main
from switchboard.cli.plugin_new import Names

# PEP 508's name (packaging's and setuptools' check of `project.name`).
PEP508_NAME = re.compile(r"[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9]", re.IGNORECASE)


@pytest.mark.parametrize("name", ["acme_", "acme__", "a_"])
def test_a_name_ending_in_an_underscore_is_refused_and_writes_nothing(tmp_path: Path, name: str) -> None:
    assert not PEP508_NAME.fullmatch(Names(name).package)  # what pip would have refused
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["plugin", "new", name, "--dir", str(out)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: invalid_argument: "), result.stderr
    assert not out.exists()


@pytest.mark.parametrize("name", ["a", "acme", "acme_chat", "a__b", "x9"])
def test_every_name_it_writes_is_a_valid_project_name(tmp_path: Path, name: str) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["plugin", "new", name, "--dir", str(out), "--json"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    pyproject = (out / "pyproject.toml").read_text(encoding="utf-8")
    project = re.search(r'^name = "([^"]*)"$', pyproject, re.MULTILINE)
    assert project is not None and PEP508_NAME.fullmatch(project.group(1)), project
