"""What the loader checks about a registered kind, and the guards the core calls a kind through.

At load (``problem_of``): the kind's name, its secret origin, that each callable is callable and that
only ``post`` and ``test`` are ``async def`` (an ``async def verify`` would hand the core a coroutine,
which is neither a verdict nor a refusal), its settings and its secret-scan rules. Each problem is one
line that says what to change.

At call time (``guarded_source``, ``guarded_connection``): a plain function can still return an
awaitable, or a value of the wrong type, or of the right class with contents the core cannot use
(a ``Verdict`` whose delivery key is a number); a connection callable can raise what the core does
not handle for it, and ``post`` or ``test`` can never answer. The kind the core keeps has its
callables wrapped so that each of these is a ``ProviderFault`` (a ``TypeError``), handled exactly
as if the callable had raised (a verifier's fault is a 503, never a verdict), and logged once per
callable with the fix.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, ParamSpec, TypeVar, cast, get_args

import orjson

from switchboard import sanitize
from switchboard.provider import (
    Actors,
    Address,
    CheckResult,
    ConnectionKind,
    EchoClues,
    ErrorClass,
    PostResult,
    Setting,
    SourceKind,
    TrustSpec,
    Verdict,
)
from switchboard.secretscan import RULES, Rule
from switchboard.settings import ENV_PREFIX, Settings
from switchboard.trust import MATCH_MODES

log = logging.getLogger("switchboard.plugins")

KIND_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
SETTING_TAIL_RE = re.compile(r"[A-Z0-9][A-Z0-9_]{0,60}")
SECRET_ORIGINS = ("minted", "provider", "none")

P = ParamSpec("P")
R = TypeVar("R")


class ProviderFault(TypeError):
    """A provider's callable answered with something the core cannot use. It is the provider's bug,
    so the core treats it as a raise (a verifier's fault is a 503, never a verdict)."""


def role_of(kind: SourceKind | ConnectionKind) -> str:
    return "source" if isinstance(kind, SourceKind) else "connection"


# ---------------------------------------------------------------------------------------------
# At load

# Which callables answer a value at once (never async) and which may be ``async def``.
VALUE_CALLABLES = {
    "source": ("verify", "derive_address", "echo_clues", "actors"),
    "connection": ("normalize_account_key", "account_matches", "target_of", "instance_of"),
}
ASYNC_CALLABLES = {"source": (), "connection": ("test", "post")}


def is_async(fn: object) -> bool:
    """``async def`` (or an async generator), also behind ``functools.partial`` or as ``__call__``."""
    targets = [fn, getattr(fn, "__call__", None)]  # noqa: B004 - the method itself is inspected
    return any(inspect.iscoroutinefunction(t) or inspect.isasyncgenfunction(t) for t in targets if t)


def problem_of(
    kind: object, taken_settings: Iterable[str] = (), taken_rules: Iterable[str] = ()
) -> str | None:
    """Why this registered object cannot be used, as one line with the fix; None when it can."""
    if not isinstance(kind, SourceKind | ConnectionKind):
        got = type(kind).__name__
        return f"register() takes a SourceKind or a ConnectionKind from switchboard.sdk, not {got}"
    role = role_of(kind)
    # Read as the plugin made them: a dataclass checks no types, so anything may be there.
    given: dict[str, Any] = vars(kind)
    label = f"{'SourceKind' if role == 'source' else 'ConnectionKind'} {given['name']!r}"
    if not isinstance(given["name"], str) or not KIND_NAME_RE.fullmatch(given["name"]):
        return (
            f"{label}: a kind's name is 1-40 lower-case letters, digits and _, starting with a letter "
            "(it names the SWITCHBOARD_<KIND>_ settings)"
        )
    for attr in VALUE_CALLABLES[role]:
        fn = given[attr]
        if fn is None and attr in ("instance_of", "actors"):
            continue
        if not callable(fn):
            return f"{label}: {attr} must be a function, not {type(fn).__name__}"
        if is_async(fn):
            return (
                f"{label}: {attr} is async def; make it a plain def that returns its value "
                "(only a ConnectionKind's post and test may be async)"
            )
    for attr in ASYNC_CALLABLES[role]:
        if not callable(given[attr]):
            return f"{label}: {attr} must be a function (async def or def)"
    if not isinstance(given["description"], str):
        return f"{label}: description must be a string"
    if isinstance(kind, SourceKind):
        if kind.secret not in SECRET_ORIGINS:
            return f"{label}: secret must be one of {', '.join(SECRET_ORIGINS)}, not {kind.secret!r}"
        if not isinstance(given["payload_is_body"], bool):
            return f"{label}: payload_is_body must be True or False"
        problem = _trust_problem(label, given)
        if problem:
            return problem
    else:
        limit = given["text_limit"]
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            return f"{label}: text_limit must be a positive integer"
        if not isinstance(given["account_key_hint"], str):
            return f"{label}: account_key_hint must be a string"
        if not isinstance(given["settings"], tuple):
            return f"{label}: settings must be a tuple of Setting"
        problem = _settings_problem(label, kind, set(taken_settings))
        if problem:
            return problem
    return _rules_problem(label, kind.secret_rules, set(taken_rules))


TRUST_FIELD_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")


def _trust_problem(label: str, given: dict[str, Any]) -> str | None:
    """``actors`` and ``trust`` come together, on a signed kind, with a usable ``TrustSpec``
    (docs/plugins.md, "Trusted actors")."""
    spec = given["trust"]
    if (given["actors"] is None) != (spec is None):
        return f"{label}: set actors and trust together (or neither)"
    if spec is None:
        return None
    if not isinstance(spec, TrustSpec):
        return f"{label}: trust takes a TrustSpec from switchboard.sdk"
    if given["secret"] == "none":
        return f'{label}: actors and trust need a signed kind (secret "minted" or "provider")'
    fields: dict[str, Any] = vars(spec)
    field, matches = fields["field"], fields["matches"]
    if not isinstance(field, str) or not TRUST_FIELD_RE.fullmatch(field) or field in ("allow_all", "match"):
        return f"{label}: trust.field must be 1-40 lower-case letters, digits and _ (not allow_all or match)"
    if not isinstance(fields["label"], str) or not fields["label"].strip():
        return f"{label}: trust.label must say what one entry is, e.g. 'GitHub login'"
    if not isinstance(fields["case_insensitive"], bool):
        return f"{label}: trust.case_insensitive must be True or False"
    if (
        not isinstance(matches, tuple)
        or not matches
        or len(set(matches)) != len(matches)
        or any(mode not in MATCH_MODES for mode in matches)
    ):
        return f"{label}: trust.matches must be a tuple of distinct modes from {', '.join(MATCH_MODES)}"
    return None


def _settings_problem(label: str, kind: ConnectionKind, taken: set[str]) -> str | None:
    prefix = f"{ENV_PREFIX}{kind.name.upper()}_"
    core = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    declared: tuple[Any, ...] = vars(kind)["settings"]
    for setting in declared:
        if not isinstance(setting, Setting):
            return f"{label}: settings takes Setting objects from switchboard.sdk"
        given: dict[str, Any] = vars(setting)
        name = given["name"]
        if not isinstance(name, str) or not name.startswith(prefix):
            return f"{label}: setting {name!r} must be named {prefix}…"
        if not SETTING_TAIL_RE.fullmatch(name.removeprefix(prefix)):
            return f"{label}: setting {name!r} must be upper-case letters, digits and _"
        if name in core:
            return f"{label}: setting {name} is a core setting; choose another name"
        if name in taken:
            return f"{label}: setting {name} is declared twice"
        if not callable(given["check"]) or is_async(given["check"]):
            return f"{label}: setting {name}'s check must be a plain function"
        if given["default"] is not None and not isinstance(given["default"], str):
            return f"{label}: setting {name}'s default must be a string or None"
        taken.add(name)
    return None


def _rules_problem(label: str, rules: object, taken: set[str]) -> str | None:
    if not isinstance(rules, tuple):
        return f"{label}: secret_rules must be a tuple of Rule"
    core = {rule.id for rule in RULES}
    for rule in rules:
        if not isinstance(rule, Rule):
            return f"{label}: secret_rules takes Rule objects (switchboard.sdk.secret_rule)"
        rule_id: Any = vars(rule)["id"]
        if not isinstance(rule_id, str) or not rule_id or rule_id in core or rule_id in taken:
            return f"{label}: secret rule id {rule.id!r} is empty or already used; give it a unique id"
        taken.add(rule_id)
    return None


# ---------------------------------------------------------------------------------------------
# At call time


# What the contents of an answer must be (the SDK's values are dataclasses, which check no types).
# Each check says what is wrong, in a few words, or None; a few isinstance checks per call.
POST_STATES = ("sent", "failed", "unknown")
ERROR_CLASSES: tuple[str, ...] = get_args(ErrorClass)
# How long ``post`` or ``test`` may take: far past what their requests through ``http`` may take
# (each bounded by the outbound client's total timeout), so only an await that never ends meets it.
CALL_TIMEOUT = 60.0
_OPTIONAL_STR = (str, type(None))
# Field values that are JSON whatever they hold (a float may be NaN; a container may hold anything).
_PLAIN_FIELD_TYPES = frozenset({str, int, bool, type(None)})


def _json_problem(value: object, allow_nan: bool) -> str | None:
    """Why ``value`` is no JSON value (a set, bytes, an object; NaN unless ``allow_nan``), or None."""
    if allow_nan:
        # The usual case answered at once (orjson writes NaN as null: a payload may hold it, and is
        # stored as text then). What orjson refuses but JSON carries (integers past 64 bits, keys
        # that are numbers, lone surrogates) is the standard library's to judge.
        try:
            orjson.dumps(value, option=sanitize.ORJSON_REFUSES)
            return None
        except orjson.JSONEncodeError:
            pass
    try:
        json.dumps(value, allow_nan=allow_nan)
    except RecursionError:
        return None  # too deep to be a structure: stored as text, as a body nested so deep is
    except (TypeError, ValueError) as exc:
        return " ".join(str(exc).split())[:80]
    return None


def verdict_problem(verdict: Verdict, delivery: object = None) -> str | None:
    # What the core cannot take as it is; a detail or a title of another type is written as text.
    given: dict[str, Any] = vars(verdict)
    for name in ("delivery_key", "secondary_key"):
        if not isinstance(given[name], _OPTIONAL_STR):
            return f"{name} is {type(given[name]).__name__}, not a string or None"
    respond = given["respond"]
    if respond is not None:
        if not isinstance(respond, dict):
            return f"respond is {type(respond).__name__}, not a JSON object"
        problem = _json_problem(respond, allow_nan=False)
        if problem:
            return f"respond is no JSON object ({problem})"
    payload = given["payload"]
    # What ``json_object`` has just read from the body is JSON already (every bundled kind's
    # payload): only a payload the kind built is looked at.
    body = getattr(delivery, "body", None)
    if payload is not None and not (isinstance(body, bytes) and sanitize.read_from(payload, body)):
        problem = _json_problem(payload, allow_nan=True)
        if problem:
            return f"payload is no JSON value ({problem})"
    return None


def address_problem(address: Address, *_: object) -> str | None:
    given: dict[str, Any] = vars(address)
    for name in ("kind", "provider", "display"):
        if not isinstance(given[name], str):
            return f"{name} is {type(given[name]).__name__}, not a string"
    fields = given["fields"]
    if not isinstance(fields, Mapping):
        return f"fields is {type(fields).__name__}, not a mapping"
    plain = True
    for key, value in fields.items():
        if not isinstance(key, str) or key in ("kind", "provider", "display"):
            return f"fields has the key {key!r} (keys are strings other than kind, provider, display)"
        plain = plain and type(value) in _PLAIN_FIELD_TYPES
    if plain:
        # Every bundled kind's fields are text and whole numbers: JSON as they are, without writing
        # them twice on each delivery (6-7 µs of the event loop's, issue 12).
        return None
    problem = _json_problem(dict(fields), allow_nan=False)
    return f"fields are no JSON values ({problem})" if problem else None


def post_result_problem(result: PostResult) -> str | None:
    given: dict[str, Any] = vars(result)
    if given["state"] not in POST_STATES:
        return f"state is {given['state']!r}, not one of {', '.join(POST_STATES)}"
    for name in ("object_id", "permalink", "error_code"):
        if not isinstance(given[name], _OPTIONAL_STR):
            return f"{name} is {type(given[name]).__name__}, not a string or None"
    # The reply row records the class (the agent acts on it): one it does not know, or longer than
    # the column (PostgreSQL refused it), failed the record of a dial and left the row pending.
    if given["error_class"] is not None and given["error_class"] not in ERROR_CLASSES:
        return f"error_class is {given['error_class']!r:.40}, not one of {', '.join(ERROR_CLASSES)}"
    wait = given["retry_after"]
    # NaN compares false with every bound: the retry loop slept on it and the reply hung (an
    # infinite wait is bounded by the core, as for a Retry-After header).
    if wait is not None and (not isinstance(wait, int | float) or isinstance(wait, bool) or math.isnan(wait)):
        return "retry_after is not None or a number of seconds"
    return None


def check_result_problem(result: CheckResult) -> str | None:
    # The detail and the facts' values are written as text whatever they are.
    given: dict[str, Any] = vars(result)
    if not isinstance(given["ok"], bool):
        return "ok is not True or False"
    if not isinstance(given["facts"], Mapping):
        return f"facts is {type(given['facts']).__name__}, not a mapping"
    return None


def _discard(value: object) -> None:
    """Close a coroutine nobody will await, so it is not reported as never awaited."""
    close = getattr(value, "close", None)
    if inspect.iscoroutine(value) and callable(close):
        close()


class _Where:
    """One guarded callable's name for messages, and whether its fault was logged yet."""

    def __init__(self, plugin: str, kind: SourceKind | ConnectionKind, attr: str) -> None:
        self.text = f"plugin {plugin!r}: {role_of(kind)} kind {kind.name!r}: {attr}"
        self.logged = False

    def fault(self, problem: str) -> ProviderFault:
        message = f"{self.text} {problem}"
        if not self.logged:
            self.logged = True
            log.error("%s", message)
        return ProviderFault(message)


def _value_guard(
    fn: Callable[P, R],
    where: _Where,
    expected: tuple[type, ...],
    truth: bool = False,
    contents: Callable[..., str | None] | None = None,
    handled: tuple[type[Exception], ...] = (Exception,),
) -> Callable[P, R]:
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            result: Any = fn(*args, **kwargs)
        except handled:
            raise
        except Exception as exc:
            # What the core does not handle for this callable (an AttributeError where it takes a
            # KeyError as no match) escaped as an internal error: it is a fault like a wrong type.
            raise where.fault(f"raised {type(exc).__name__}") from exc
        # The usual answer first: a value of the expected type (the SDK's frozen values, str,
        # bool, None) is never awaitable, and ``isawaitable``'s ABC check cost a percent of
        # ingest's CPU (issue 12).
        if type(result) in expected:
            # The SDK's values are dataclasses that check no types: a Verdict whose delivery key
            # is a number, or an Address without a display, reached the core and failed there
            # (a 500 to the sender). Their contents are the provider's answer too.
            problem = contents(result, *args) if contents is not None and result is not None else None
            if problem is not None:
                name = type(result).__name__
                raise where.fault(f"returned {'an' if name[0] in 'AEIOU' else 'a'} {name} whose {problem}")
            return cast(R, result)
        if inspect.isawaitable(result):
            _discard(result)
            raise where.fault("returned an awaitable where a value is due; make it a plain def")
        if truth:
            return cast(R, bool(result))
        if not isinstance(result, expected):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in expected)
            raise where.fault(f"returned {type(result).__name__}, not {names}")
        return cast(R, result)

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


# What the core handles itself when ``account_matches``, ``target_of`` or ``instance_of`` raises it
# (no match, ``""``, no instance): any other exception is a fault (a TypeError), handled the same.
MATCH_ERRORS: tuple[type[Exception], ...] = (KeyError, TypeError, ValueError)


def _account_key_guard(fn: Callable[[str], str], where: _Where, kind: str) -> Callable[[str], str]:
    """``normalize_account_key``: a ValueError is the owner's refusal, with its message; any other
    failure was an internal error on ``connection add``. It is a refusal too, naming the fault."""
    guarded = _value_guard(fn, where, (str,), handled=(ValueError,))

    def call(value: str) -> str:
        try:
            return guarded(value)
        except ProviderFault:
            raise ValueError(
                f"the {kind} provider could not read it (a fault in its plugin, logged on the server)"
            ) from None

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


def _async_guard(
    fn: Callable[[Any], Awaitable[R]], where: _Where, expected: type, contents: Callable[[Any], str | None]
) -> Callable[[Any], Awaitable[R]]:
    # Awaited if it is awaitable, taken as it is if not (datasette's await_me_maybe).
    async def call(arg: Any) -> R:
        result: Any = fn(arg)
        if inspect.isawaitable(result):
            # Bounded: an await that never ends (not through ``http``, whose requests are bounded)
            # hung the agent's reply and the owner's connection test for ever, holding one of the
            # owner's outbound slots and leaving the reply row pending.
            bound = asyncio.timeout(CALL_TIMEOUT)
            try:
                async with bound:
                    result = await result
            except TimeoutError:
                if not bound.expired():
                    raise  # the provider's own TimeoutError: a raise like any other
                raise where.fault(f"did not answer within {CALL_TIMEOUT:g} s") from None
        if not isinstance(result, expected):
            raise where.fault(f"answered {type(result).__name__}, not {expected.__name__}")
        # As ``_value_guard``: a PostResult with a NaN wait or an unknown state, recorded as it
        # was, hung the reply or left its row pending; facts that are no mapping failed the test.
        problem = contents(result)
        if problem is not None:
            raise where.fault(f"answered a {expected.__name__} whose {problem}")
        return cast(R, result)

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


def guarded_source(kind: SourceKind, plugin: str) -> SourceKind:
    """The kind as the core keeps it: the same object with its callables behind the call-time checks."""
    return dataclasses.replace(
        kind,
        verify=_value_guard(
            kind.verify, _Where(plugin, kind, "verify"), (Verdict,), contents=verdict_problem
        ),
        derive_address=_value_guard(
            kind.derive_address,
            _Where(plugin, kind, "derive_address"),
            (Address, type(None)),
            contents=address_problem,
        ),
        echo_clues=_value_guard(kind.echo_clues, _Where(plugin, kind, "echo_clues"), (EchoClues, type(None))),
        actors=None
        if kind.actors is None
        else _value_guard(kind.actors, _Where(plugin, kind, "actors"), (Actors, type(None))),
    )


def guarded_connection(kind: ConnectionKind, plugin: str) -> ConnectionKind:
    """As ``guarded_source``."""
    instance_of = kind.instance_of
    return dataclasses.replace(
        kind,
        normalize_account_key=_account_key_guard(
            kind.normalize_account_key, _Where(plugin, kind, "normalize_account_key"), kind.name
        ),
        account_matches=_value_guard(
            kind.account_matches,
            _Where(plugin, kind, "account_matches"),
            (bool,),
            truth=True,
            handled=MATCH_ERRORS,
        ),
        target_of=_value_guard(
            kind.target_of, _Where(plugin, kind, "target_of"), (str,), handled=MATCH_ERRORS
        ),
        instance_of=None
        if instance_of is None
        else _value_guard(
            instance_of, _Where(plugin, kind, "instance_of"), (str, type(None)), handled=MATCH_ERRORS
        ),
        test=_async_guard(kind.test, _Where(plugin, kind, "test"), CheckResult, check_result_problem),
        post=_async_guard(kind.post, _Where(plugin, kind, "post"), PostResult, post_result_problem),
    )


def original(fn: Callable[..., object]) -> Callable[..., object]:
    """The provider's own function behind a guard."""
    return cast(Callable[..., object], getattr(fn, "__wrapped__", fn))
