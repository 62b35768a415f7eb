"""``switchboard plugin new NAME``: a provider package to start from, written from the templates
shipped in the wheel (``switchboard/templates/plugin``).

The package it writes is a whole provider for a made-up service (signed webhooks in, thread replies
out), built only on ``switchboard.sdk``, with tests on ``switchboard.testing``: it installs
(``pip install -e``), ``switchboard plugins`` lists it, and its tests pass as generated, so an author
changes a working provider instead of filling in a skeleton (docs/plugins.md).
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template

import click

from switchboard.cli.group import main
from switchboard.cli.output import emit, fail, json_option
from switchboard.plugin_checks import KIND_NAME_RE
from switchboard.plugins import load as load_providers

TEMPLATES = ("templates", "plugin")
SUFFIX = ".tmpl"


@dataclass(frozen=True)
class Names:
    """What a kind's name becomes in its package."""

    kind: str

    @property
    def package(self) -> str:
        return "switchboard-" + self.kind.replace("_", "-")

    @property
    def module(self) -> str:
        return "switchboard_" + self.kind

    def values(self) -> dict[str, str]:
        words = self.kind.split("_")
        return {
            "kind": self.kind,
            "KIND": self.kind.upper(),
            "title": " ".join(w.capitalize() for w in words),
            # The signature header's middle part: X-Acme-Chat-Signature.
            "header": "-".join(w.capitalize() for w in words),
            "package": self.package,
            "module": self.module,
            "rule_id": self.kind.replace("_", "-") + "-api-token",
        }


def _templates() -> Traversable:
    folder = importlib.resources.files("switchboard")
    for part in TEMPLATES:
        folder = folder / part
    return folder


def _files(folder: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    """Every template under ``folder`` as (relative path, file), sorted."""
    found: list[tuple[str, Traversable]] = []
    for entry in folder.iterdir():
        if entry.is_dir() and entry.name != "__pycache__":
            found += _files(entry, f"{prefix}{entry.name}/")
        elif entry.is_file() and entry.name.endswith(SUFFIX):
            found.append((prefix + entry.name, entry))
    return sorted(found, key=lambda item: item[0])


def _target(relative: str, names: Names) -> str:
    """Where a template goes in the package: ``module/`` is the import package, the test module
    is named after the kind (test basenames must differ between packages tested together)."""
    path = relative.removesuffix(SUFFIX)
    if path.startswith("module/"):
        path = names.module + path.removeprefix("module")
    if path == "tests/test_provider.py":
        path = f"tests/test_{names.kind}_provider.py"
    return path


def render(names: Names) -> dict[str, str]:
    """The package's files by relative path. A placeholder the templates name but ``Names`` does not
    give is a KeyError: a broken template, caught by the tests."""
    values = names.values()
    return {
        _target(rel, names): Template(f.read_text(encoding="utf-8")).substitute(values)
        for rel, f in _files(_templates())
    }


def write(names: Names, folder: Path) -> list[Path]:
    """Write the package into ``folder`` (which must not exist, or be empty)."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise FileExistsError(f"{folder} exists and is not an empty folder")
    written = []
    for relative, text in render(names).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


@main.group("plugin")
def plugin_group() -> None:
    """Writing provider plugins."""


@plugin_group.command("new")
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write it (default: ./switchboard-NAME).",
)
@json_option
def plugin_new(name: str, directory: Path | None, as_json: bool) -> None:
    """Write a provider package for kind NAME (lower-case letters, digits and _) to start from: it
    installs, is listed by `switchboard plugins`, and its tests pass as generated."""
    # A kind may end in `_`, but its package name (switchboard-NAME, `_` as `-`) would then end in
    # `-`, which is no valid project name: `pip install -e` refuses the package.
    if not KIND_NAME_RE.fullmatch(name) or name.endswith("_"):
        fail(
            "invalid_argument: NAME (the kind) must be 1-40 lower-case letters, digits and _,"
            " starting with a letter and not ending with _"
        )
    taken = load_providers()
    if name in taken.sources or name in taken.connections:
        owner = taken.owners.get(("source", name)) or taken.owners.get(("connection", name))
        fail(f"conflict: kind {name!r} is already provided by plugin {owner!r}; choose another name")
    names = Names(name)
    folder = directory if directory is not None else Path(names.package)
    try:
        written = write(names, folder)
    except (FileExistsError, OSError) as exc:
        fail(f"invalid_argument: {exc}")
    files = [str(p.relative_to(folder)) for p in written]
    data = {
        "kind": name,
        "package": names.package,
        "module": names.module,
        "path": str(folder),
        "files": files,
    }
    emit(
        as_json,
        data,
        lambda: "\n".join(
            [
                f"wrote {names.package} in {folder}:",
                *(f"  {f}" for f in files),
                "next:",
                f"  pip install -e {folder}",
                "  switchboard plugins",
                f"  cd {folder} && pytest -q tests",
            ]
        ),
    )
