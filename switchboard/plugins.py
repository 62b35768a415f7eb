"""Loading providers: the built-in ones and every package in the ``switchboard`` entry-point group.

``load`` tries each plugin on its own, as datasette and llm do: one that fails to import, implements
a hook that does not exist (a misspelling, or a hook of the 0.1 contract), raises in
``register_kinds`` or registers a kind it cannot have (``plugin_checks.problem_of``; a kind another
plugin already has) is skipped whole, logged once and listed by ``switchboard plugins`` with its
error; the others load. ``SWITCHBOARD_PLUGINS`` (an allowlist of installed plugins) and
``SWITCHBOARD_DISABLE_PLUGINS`` choose which are tried.

``Providers`` holds the kinds that loaded, behind the call-time guards of ``plugin_checks``, so the
rest of the core asks it by kind (``providers.source("github").verify(delivery)``) and never touches
pluggy.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.metadata
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import pluggy

from switchboard import hookspecs
from switchboard.plugin_checks import guarded_connection, guarded_source, problem_of, role_of
from switchboard.provider import ConnectionKind, Setting, SourceKind
from switchboard.secretscan import Rule
from switchboard.settings import ConfigError, Settings, plugin_key

log = logging.getLogger("switchboard.plugins")

BUILTINS = {"generic": "switchboard.providers.generic", "stripe": "switchboard.providers.stripe"}
ENTRY_POINT_GROUP = "switchboard"
HOOKS = ("register_kinds",)
# The 0.1 contract's dispatch hooks: a plugin that still has them gets told what replaced them.
OLD_HOOKS = {
    "verify": "SourceKind(verify=…)",
    "derive_address": "SourceKind(derive_address=…)",
    "is_echo": "SourceKind(echo_clues=…)",
    "post_reply": "ConnectionKind(post=…)",
}
ERROR_LIMIT = 300

Status = Literal["loaded", "failed", "disabled", "missing"]


class UnknownKind(LookupError):
    pass


class PluginError(Exception):
    """A plugin was refused (``load(strict=True)``); the message is the one line."""


@dataclass
class Plugin:
    """One plugin as ``switchboard plugins`` lists it, whether it loaded or not."""

    name: str
    package: str
    version: str
    builtin: bool
    status: Status = "loaded"
    error: str | None = None
    kinds: list[SourceKind | ConnectionKind] = field(default_factory=list)


@dataclass
class Providers:
    pm: pluggy.PluginManager
    sources: dict[str, SourceKind] = field(default_factory=dict)
    connections: dict[str, ConnectionKind] = field(default_factory=dict)
    # Which plugin registered which kind, by (role, kind name).
    owners: dict[tuple[str, str], str] = field(default_factory=dict)
    # Every plugin tried or passed over, by name, in load order.
    plugins: dict[str, Plugin] = field(default_factory=dict)

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

    @property
    def secret_rules(self) -> tuple[Rule, ...]:
        """Every loaded kind's secret-scan rules (the reply check adds them to the core's)."""
        kinds: list[SourceKind | ConnectionKind] = [*self.sources.values(), *self.connections.values()]
        return tuple(rule for kind in kinds for rule in kind.secret_rules)

    @property
    def failed(self) -> list[Plugin]:
        return [p for p in self.plugins.values() if p.status in ("failed", "missing")]

    # -----------------------------------------------------------------------------------------
    # Settings of the connection kinds

    def settings_of(self, kind: str, settings: Settings | None) -> dict[str, str]:
        """A connection kind's settings as its ``post`` and ``test`` get them: each checked value (or
        its default) by variable name. Raises ConfigError naming a bad variable."""
        known = self.connections.get(kind)
        values: dict[str, str] = {}
        for setting in known.settings if known is not None else ():
            value = _setting_value(setting, settings)[0]
            if value is not None:
                values[setting.name] = value
        return values

    def check_settings(self, settings: Settings) -> None:
        """Every loaded kind's settings, checked as start-up checks the core's: the first bad one is
        a ConfigError (``SWITCHBOARD_<NAME>: <reason>``)."""
        for kind in self.connections:
            self.settings_of(kind, settings)

    # -----------------------------------------------------------------------------------------
    # Descriptions (``switchboard plugins``, ``GET /api/v1/kinds``, the web UI)

    def kinds(self) -> dict[str, list[dict[str, Any]]]:
        """Every loaded kind with its description: what people choosing a kind need."""
        return {
            "sources": [
                {
                    "name": k.name,
                    "description": k.description,
                    "secret": k.secret,
                    "plugin": self.owners[("source", k.name)],
                    "trust": _trust_spec(k),
                }
                for k in sorted(self.sources.values(), key=lambda k: k.name)
            ],
            "connections": [
                {
                    "name": k.name,
                    "description": k.description,
                    "account_key_hint": k.account_key_hint,
                    "default_account_key": k.default_account_key,
                    "text_limit": k.text_limit,
                    "plugin": self.owners[("connection", k.name)],
                }
                for k in sorted(self.connections.values(), key=lambda k: k.name)
            ],
        }

    def describe(self, settings: Settings | None = None) -> list[dict[str, Any]]:
        """Every plugin: package, version, status (and the error of one that did not load), its
        kinds with their descriptions and settings (values only where they are not secret)."""
        rows = []
        for plugin in sorted(self.plugins.values(), key=lambda p: p.name):
            kinds = [_describe_kind(kind, settings) for kind in plugin.kinds]
            rows.append(
                {
                    "name": plugin.name,
                    "package": plugin.package,
                    "version": plugin.version,
                    "builtin": plugin.builtin,
                    "status": plugin.status,
                    "error": plugin.error,
                    "source_kinds": sorted(k["name"] for k in kinds if k["role"] == "source"),
                    "connection_kinds": sorted(k["name"] for k in kinds if k["role"] == "connection"),
                    "hooks": list(HOOKS) if plugin.status == "loaded" else [],
                    "kinds": kinds,
                }
            )
        return rows


def _setting_value(setting: Setting, settings: Settings | None) -> tuple[str | None, str]:
    """(checked value or None, where it came from: ``environment``, ``default`` or ``unset``)."""
    given = settings.plugin_value(setting.name) if settings is not None else None
    if given is None or not given.strip():
        return setting.default, "default" if setting.default is not None else "unset"
    try:
        value = setting.check(given)
    except ValueError as exc:
        reason = " ".join(str(exc).split())[:200]
        if setting.secret and _quotes(reason, given):
            # A secret never appears in an error (``switchboard plugins``, serve's one line).
            reason = "refused by its check (its message quoted the value, so it is not shown)"
        raise ConfigError(f"{setting.name}: {reason}") from None
    except Exception as exc:
        raise ConfigError(f"{setting.name}: its check failed ({type(exc).__name__})") from None
    if not isinstance(value, str):
        raise ConfigError(f"{setting.name}: its check answered {type(value).__name__}, not a string")
    return value, "environment"


def _quotes(message: str, value: str) -> bool:
    """Whether ``message`` carries ``value``, or any 8 characters of it in a row."""
    value = value.strip()
    if len(value) <= 8:
        return value in message
    return any(value[i : i + 8] in message for i in range(len(value) - 7))


def _trust_spec(kind: SourceKind) -> dict[str, Any] | None:
    """The trusted-actors setting a webhook of ``kind`` takes, for the API and UI to ask for it; None
    when it takes none: the kind names no actors, or its deliveries are not signed (its body proves
    nothing), as ``trust.trust_needed`` decides (docs/routing.md, "Trusted actors")."""
    spec = kind.trust
    if spec is None or kind.secret == "none":
        return None
    return {
        "field": spec.field,
        "label": spec.label,
        "case_insensitive": spec.case_insensitive,
        "matches": list(spec.matches),
    }


def _describe_kind(kind: SourceKind | ConnectionKind, settings: Settings | None) -> dict[str, Any]:
    row: dict[str, Any] = {"role": role_of(kind), "name": kind.name, "description": kind.description}
    if isinstance(kind, SourceKind):
        row["secret"] = kind.secret
    else:
        row["account_key_hint"] = kind.account_key_hint
        row["settings"] = [_describe_setting(s, settings) for s in kind.settings]
    row["secret_rules"] = [rule.id for rule in kind.secret_rules]
    return row


def _describe_setting(setting: Setting, settings: Settings | None) -> dict[str, Any]:
    try:
        value, origin = _setting_value(setting, settings)
        error = None
    except ConfigError as exc:
        value, origin, error = None, "environment", str(exc)
    if setting.secret:
        value = None
    return {
        "name": setting.name,
        "description": setting.description,
        "value": value,
        "from": origin,
        "secret": setting.secret,
        "error": error,
    }


# ---------------------------------------------------------------------------------------------
# Loading


@dataclass
class _Candidate:
    plugin: Plugin
    load: Callable[[], object]
    installed: bool


def load(
    settings: Settings | None = None,
    *,
    entrypoints: bool = True,
    extra: Iterable[object] = (),
    strict: bool = False,
) -> Providers:
    """The built-ins, the installed entry points (``SWITCHBOARD_PLUGINS`` / ``_DISABLE_PLUGINS`` of
    ``settings`` choose among them) and any ``extra`` plugin objects (tests pass their own providers
    here, and ``entrypoints=False`` to load nothing installed). ``strict``: raise ``PluginError`` for
    the first plugin refused instead of skipping it."""
    allow = settings.plugin_allowlist if settings is not None else None
    deny = settings.plugin_denylist if settings is not None else frozenset()
    pm = pluggy.PluginManager("switchboard")
    pm.add_hookspecs(hookspecs)
    providers = Providers(pm)
    candidates = list(_candidates(entrypoints, extra))
    matched: set[str] = set()
    for candidate in candidates:
        plugin = candidate.plugin
        names = {plugin_key(plugin.name), plugin_key(plugin.package)}
        if allow is not None and candidate.installed:
            matched |= names & allow
        if names & deny or (allow is not None and candidate.installed and not names & allow):
            plugin.status = "disabled"
            providers.plugins.setdefault(plugin.name, plugin)
            continue
        if plugin.name in providers.plugins:
            # Two packages with one entry-point name: the second is listed under its package too.
            providers.plugins[f"{plugin.name} ({plugin.package})"] = plugin
            _refuse(plugin, f"a plugin named {plugin.name!r} is already loaded; uninstall one of them")
        else:
            providers.plugins[plugin.name] = plugin
            _load_one(providers, candidate)
        if strict and plugin.status == "failed":
            raise PluginError(f"plugin {plugin.name!r}: {plugin.error}")
    for name in sorted((allow or frozenset()) - matched):
        error = "named in SWITCHBOARD_PLUGINS but not installed; install it or remove the name"
        providers.plugins.setdefault(name, Plugin(name, "-", "-", False, status="missing", error=error))
        log.warning("plugin %r: %s", name, error)
    # Every plugin with a hook that has no spec was refused above, so nothing can be pending.
    pm.check_pending()
    return providers


def _candidates(entrypoints: bool, extra: Iterable[object]) -> Iterable[_Candidate]:
    own = _own_version()
    for name, module_name in BUILTINS.items():
        plugin = Plugin(name, "switchboard", own, builtin=True)
        yield _Candidate(plugin, functools.partial(importlib.import_module, module_name), installed=False)
    if entrypoints:
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        for ep in sorted(found, key=lambda ep: (ep.name, ep.value)):
            dist = ep.dist
            package = dist.metadata["Name"] if dist is not None else ep.value.split(":")[0]
            version = dist.version if dist is not None else "0+unknown"
            yield _Candidate(Plugin(ep.name, package, version, builtin=False), ep.load, installed=True)
    for obj in extra:
        name = getattr(obj, "__name__", None) or type(obj).__name__
        yield _Candidate(Plugin(name, "(extra)", own, builtin=False), _given(obj), installed=False)


def _given(obj: object) -> Callable[[], object]:
    return lambda: obj


def _refuse(plugin: Plugin, error: str) -> None:
    """Mark the plugin failed with its one line, and log that line (once: each load tries once)."""
    line = " ".join(error.split())
    plugin.status = "failed"
    plugin.error = line if len(line) <= ERROR_LIMIT else line[: ERROR_LIMIT - 1] + "…"
    plugin.kinds = []
    log.error("plugin %r (%s %s) not loaded: %s", plugin.name, plugin.package, plugin.version, plugin.error)


def _load_one(providers: Providers, candidate: _Candidate) -> None:
    plugin, pm = candidate.plugin, providers.pm
    disable = f"SWITCHBOARD_DISABLE_PLUGINS={plugin.name}"
    try:
        obj = candidate.load()
    # SystemExit too: a module that calls sys.exit() when imported (a version guard) ended serve
    # and `switchboard plugins` with its message alone, naming no plugin.
    except (Exception, SystemExit) as exc:
        detail = " ".join(str(exc).split())[:160]
        _refuse(plugin, f"failed to import: {type(exc).__name__}: {detail}; fix or disable it ({disable})")
        return
    try:
        pm.register(obj, name=plugin.name)
    except (ValueError, pluggy.PluginValidationError) as exc:
        _refuse(plugin, f"cannot be registered: {' '.join(str(exc).split())[:200]}")
        return
    problem = _hook_problem(pm, obj) or _register_kinds(providers, plugin, obj)
    if problem is not None:
        pm.unregister(obj)
        _refuse(plugin, problem)
        return
    for kind in plugin.kinds:
        if isinstance(kind, SourceKind):
            providers.sources[kind.name] = guarded_source(kind, plugin.name)
        else:
            providers.connections[kind.name] = guarded_connection(kind, plugin.name)
        providers.owners[(role_of(kind), kind.name)] = plugin.name


def _hook_problem(pm: pluggy.PluginManager, obj: object) -> str | None:
    """A ``@hookimpl`` that is no switchboard hook: a misspelling, or a hook of the 0.1 contract."""
    for caller in pm.get_hookcallers(obj) or ():
        if caller.has_spec():
            continue
        if caller.name in OLD_HOOKS:
            return (
                f"implements {caller.name}, a hook of the 0.1 contract; register it on the kind "
                f"instead ({OLD_HOOKS[caller.name]}) and depend on switchboard>=0.2"
            )
        guess = difflib.get_close_matches(caller.name, HOOKS, n=1)
        hint = f"; did you mean {guess[0]}?" if guess else f"; the only hook is {HOOKS[0]}"
        return f"implements {caller.name!r}, which is not a switchboard hook{hint}"
    return None


def _register_kinds(providers: Providers, plugin: Plugin, obj: object) -> str | None:
    """Call the plugin's own ``register_kinds`` and check what it registered, all or nothing."""
    pm = providers.pm
    collected: list[object] = []
    others = [p for _, p in pm.list_name_plugin() if p is not obj and p is not None]
    caller = pm.subset_hook_caller("register_kinds", remove_plugins=others)
    try:
        caller(register=collected.append)
    except (Exception, SystemExit) as exc:  # as at import (``_load_one``)
        return f"register_kinds raised {type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    if not collected:
        return (
            "registered no kinds; decorate register_kinds with @hookimpl (from switchboard.sdk) "
            "and call register(...) with each kind"
        )
    settings_taken = {s.name for k in providers.connections.values() for s in k.settings}
    rules_taken = {rule.id for rule in providers.secret_rules}
    seen: set[tuple[str, str]] = set()
    for kind in collected:
        problem = problem_of(kind, settings_taken, rules_taken)
        if problem is not None:
            return problem
        assert isinstance(kind, SourceKind | ConnectionKind)
        key = (role_of(kind), kind.name)
        if key in seen:
            return f"registers {key[0]} kind {kind.name!r} twice; register each kind once"
        if key in providers.owners:
            return (
                f"{key[0]} kind {kind.name!r} is already registered by plugin {providers.owners[key]!r}; "
                f"uninstall one of them or disable one with SWITCHBOARD_DISABLE_PLUGINS"
            )
        seen.add(key)
        if isinstance(kind, ConnectionKind):
            settings_taken |= {s.name for s in kind.settings}
        rules_taken |= {rule.id for rule in kind.secret_rules}
    plugin.kinds = [k for k in collected if isinstance(k, SourceKind | ConnectionKind)]
    return None


def _own_version() -> str:
    try:
        return importlib.metadata.version("switchboard")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
