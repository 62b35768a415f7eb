"""Loading providers: the built-in ones and every package in the ``switchboard`` entry-point group.

``Providers`` wraps the pluggy manager and the kinds the providers registered, so the rest of the
core asks it questions ("which connection kind serves this address?") instead of touching pluggy.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

import pluggy

from switchboard import hookspecs
from switchboard.provider import ConnectionKind, SourceKind

BUILTINS = {"generic": "switchboard.providers.generic", "stripe": "switchboard.providers.stripe"}
ENTRY_POINT_GROUP = "switchboard"


class UnknownKind(LookupError):
    pass


@dataclass
class Providers:
    pm: pluggy.PluginManager
    sources: dict[str, SourceKind] = field(default_factory=dict)
    connections: dict[str, ConnectionKind] = field(default_factory=dict)
    # Which plugin registered which kind, for `switchboard plugins`.
    owners: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def hook(self) -> pluggy.HookRelay:
        return self.pm.hook

    def source(self, name: str) -> SourceKind:
        try:
            return self.sources[name]
        except KeyError:
            raise UnknownKind(f"unknown source kind {name!r}") from None

    def connection(self, name: str) -> ConnectionKind:
        try:
            return self.connections[name]
        except KeyError:
            raise UnknownKind(f"unknown connection kind {name!r}") from None

    def describe(self) -> list[dict[str, Any]]:
        """Every provider: package, version, kinds and implemented hooks (``switchboard plugins``)."""
        rows = []
        for name, plugin in sorted(self.pm.list_name_plugin(), key=lambda item: item[0]):
            if plugin is None:
                continue
            hooks = sorted(
                h.name for h in self.pm.get_hookcallers(plugin) or () if h.name != "register_kinds"
            )
            dist = _distribution_of(name)
            rows.append(
                {
                    "name": name,
                    "package": dist[0] if dist else "switchboard",
                    "version": dist[1] if dist else _own_version(),
                    "builtin": name in BUILTINS,
                    "source_kinds": sorted(
                        k for (t, k), p in self.owners.items() if p == name and t == "source"
                    ),
                    "connection_kinds": sorted(
                        k for (t, k), p in self.owners.items() if p == name and t == "connection"
                    ),
                    "hooks": hooks,
                }
            )
        return rows


def load(*, entrypoints: bool = True, extra: Iterable[ModuleType | object] = ()) -> Providers:
    """A plugin manager with the built-ins, the installed entry points and any ``extra`` plugins
    (tests pass their own providers here, and ``entrypoints=False`` to load nothing installed)."""
    import importlib

    pm = pluggy.PluginManager("switchboard")
    pm.add_hookspecs(hookspecs)
    for name, module_name in BUILTINS.items():
        pm.register(importlib.import_module(module_name), name=name)
    if entrypoints:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for plugin in extra:
        pm.register(plugin, name=getattr(plugin, "__name__", None) or type(plugin).__name__)
    providers = Providers(pm)

    for plugin_name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        # Call each plugin's registration on its own so a kind is credited to the right package.
        others = [p for _, p in pm.list_name_plugin() if p is not plugin and p is not None]
        caller = pm.subset_hook_caller("register_kinds", remove_plugins=others)
        caller(register=lambda kind, _name=plugin_name: _register(providers, kind, _name))
    return providers


def _register(providers: Providers, kind: object, plugin_name: str) -> None:
    if isinstance(kind, SourceKind):
        _claim(providers, providers.sources, "source", kind, plugin_name)
    elif isinstance(kind, ConnectionKind):
        _claim(providers, providers.connections, "connection", kind, plugin_name)
    else:
        raise TypeError(f"{plugin_name}: register() takes a SourceKind or ConnectionKind, not {kind!r}")


# A source kind and a connection kind may share a name ("github" is both); each has its own table.
_Kind = TypeVar("_Kind", SourceKind, ConnectionKind)


def _claim(providers: Providers, table: dict[str, _Kind], role: str, kind: _Kind, plugin_name: str) -> None:
    key = (role, kind.name)
    if kind.name in table:
        raise ValueError(
            f"{plugin_name}: kind {kind.name!r} is already registered by {providers.owners[key]}"
        )
    table[kind.name] = kind
    providers.owners[key] = plugin_name


def _distribution_of(name: str) -> tuple[str, str] | None:
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group == ENTRY_POINT_GROUP and ep.name == name:
                return dist.metadata["Name"], dist.version
    return None


def _own_version() -> str:
    try:
        return importlib.metadata.version("switchboard")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
