"""Trusted actors: checking a webhook's trust setting and judging a verified delivery's actors by it.

Pure functions, no I/O, no knowledge of any provider: a source kind declares what it accepts
(``TrustSpec``) and who a delivery names (``Actors``), and this module only compares. The rules and
shapes are public (docs/plugins.md, "Trusted actors"; each kind's page under docs/sources/):

* the setting is ``{"allow_all": true}`` or ``{<spec.field>: [entry, …], "match": mode}``, where
  ``match`` exists only for kinds that offer more than one mode (default: the first offered);
* ``sender``: the sender is listed; ``author``: any of the delivery's authors is listed; ``both``:
  the sender is listed **and** at least one author is listed (the same person may be both, as when a
  trusted login comments: the comment's author is the sender);
* a missing or unreadable setting trusts nobody: the core quarantines (it fails closed).

``judge`` never raises, whatever the stored setting or the actors hold: its answer is stored on the
held todo and shown, so it is a plain JSON-safe dict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypedDict

from switchboard.errors import SwitchboardError
from switchboard.provider import Actors, TrustSpec

ACTOR_LIMIT = 100
ENTRIES_LIMIT = 200
# A verdict names at most this many authors (a forge names two: the object's and the thread's).
AUTHORS_LIMIT = 10
MATCH_MODES = ("sender", "author", "both")
NOT_CONFIGURED = "no trusted actors configured"
UNREADABLE = "no trusted actors configured (the stored setting is unreadable)"

Matched = Literal["sender", "author", "both", "allow_all"]


class ActorVerdict(TypedDict):
    """What the trust step decided, kept on a held todo (``hold_detail.actor``) and in the routing
    trace. ``matched``: which rule let the delivery in (None when it was not trusted)."""

    trusted: bool
    sender: str | None
    authors: list[str]
    matched: Matched | None
    why: str


class TrustError(SwitchboardError):
    """A trust setting that cannot be used. Codes: ``invalid_trust`` (its shape or an entry),
    ``trust_not_supported`` (the kind names no actors, or its deliveries are not signed),
    ``trust_required`` (a kind with actors needs an explicit choice)."""


# ---------------------------------------------------------------------------------------------
# Values


def actor_value(value: object) -> str | None:
    """``value`` stripped when it is a usable actor id or login, else None: a string of 1 to
    ``ACTOR_LIMIT`` printable characters. Anything else is no actor rather than a shortened or
    cleaned-up one (that would be someone else's name), and NUL or a lone surrogate could not be
    stored as JSON on PostgreSQL anyway."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not 0 < len(text) <= ACTOR_LIMIT or not text.isprintable():
        return None
    return text


def _key(spec: TrustSpec, value: str) -> str:
    return value.lower() if spec.case_insensitive else value


def _short(value: object) -> str:
    """A caller's value in an error message: a string's start, else only its type (the repr of a
    deeply nested list could itself fail)."""
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    return "null" if value is None else f"a {type(value).__name__}"


def clean_authors(given: object) -> list[str]:
    """Authors as a verdict names them: each checked with ``actor_value``, unusable ones left out,
    duplicates dropped in order, at most ``AUTHORS_LIMIT``."""
    authors: list[str] = []
    if isinstance(given, list | tuple):
        for author in given[: AUTHORS_LIMIT * 4]:
            value = actor_value(author)
            if value is not None and value not in authors:
                authors.append(value)
    return authors[:AUTHORS_LIMIT]


def trust_needed(spec: TrustSpec | None, *, signed: bool) -> bool:
    """Must a webhook of this kind carry a trust setting? (A kind with actors whose body is signed.)"""
    return spec is not None and signed


# ---------------------------------------------------------------------------------------------
# Checking a setting


def check_trust(spec: TrustSpec | None, value: object, *, signed: bool) -> dict[str, Any]:
    """The normalised trust setting for a webhook of a kind with ``spec``, or ``TrustError``.

    Normalised: ``{"allow_all": True}``, or the entries stripped, de-duplicated (without regard to
    case when the kind compares so, keeping the first spelling) and sorted, plus ``match`` for kinds
    offering several modes. ``value`` None is ``trust_required``.
    """
    if spec is None or not signed:
        why = "names no actors" if spec is None else "has unsigned deliveries, whose actors prove nothing"
        raise TrustError("trust_not_supported", f"trusted actors are not available: this kind {why}")
    field = spec.field
    shape = f'{{"allow_all": true}} or {{"{field}": [...]}}'
    if value is None:
        raise TrustError("trust_required", f"choose the trusted actors ({spec.label}s) or allow_all: {shape}")
    if not isinstance(value, Mapping):
        raise TrustError("invalid_trust", f"trust must be a JSON object: {shape}")
    unknown = [key for key in value if key not in ("allow_all", field, "match")]
    if unknown:
        raise TrustError("invalid_trust", f"unknown trust key {_short(unknown[0])}: {shape}")
    if "allow_all" in value:
        if value["allow_all"] is not True:
            raise TrustError("invalid_trust", "allow_all must be true (or left out)")
        if len(value) > 1:
            raise TrustError("invalid_trust", f"allow_all cannot be combined with {field} or match")
        return {"allow_all": True}
    if field not in value:
        raise TrustError("invalid_trust", f"give {field} (a list of {spec.label}s) or allow_all")
    entries = _entries(spec, value[field])
    normalised: dict[str, Any] = {field: entries}
    mode = _match(spec, value)
    if len(spec.matches) > 1:
        normalised["match"] = mode
    return normalised


def _entries(spec: TrustSpec, given: object) -> list[str]:
    if not isinstance(given, list | tuple):
        raise TrustError("invalid_trust", f"{spec.field} must be a list of {spec.label}s")
    if not given:
        raise TrustError("invalid_trust", f"{spec.field} is empty: it would trust nobody (use allow_all?)")
    if len(given) > ENTRIES_LIMIT:
        raise TrustError("invalid_trust", f"{spec.field} holds more than {ENTRIES_LIMIT} entries")
    kept: dict[str, str] = {}
    for index, entry in enumerate(given):
        value = actor_value(entry)
        if value is None:
            raise TrustError(
                "invalid_trust",
                f"{spec.field}[{index}] must be a {spec.label}: a string of 1-{ACTOR_LIMIT} "
                f"printable characters, not {_short(entry)}",
            )
        kept.setdefault(_key(spec, value), value)
    return [kept[key] for key in sorted(kept)]


def _match(spec: TrustSpec, value: Mapping[Any, Any]) -> str:
    mode = value.get("match", spec.matches[0])
    if not isinstance(mode, str) or mode not in spec.matches:
        offered = " | ".join(spec.matches)
        raise TrustError("invalid_trust", f"match must be {offered}, not {_short(mode)}")
    return mode


def _readable(spec: TrustSpec, config: object) -> dict[str, Any] | None:
    """A stored setting as ``check_trust`` would have saved it, or None when it is not one."""
    try:
        return check_trust(spec, config, signed=True)
    except TrustError:
        return None


def _allow_all(config: object) -> bool:
    return isinstance(config, Mapping) and len(config) == 1 and config.get("allow_all") is True


# ---------------------------------------------------------------------------------------------
# Judging a delivery


def _actors(actors: object) -> tuple[str | None, list[str]]:
    """The sender and authors, each checked again: a third-party kind may answer anything."""
    if not isinstance(actors, Actors):
        return None, []
    return actor_value(actors.sender), clean_authors(actors.authors)


def judge(spec: TrustSpec | None, config: object, actors: Actors | None) -> ActorVerdict:
    """Is the delivery naming ``actors`` trusted by the webhook's setting ``config``? Never raises."""
    sender, authors = _actors(actors)

    def verdict(trusted: bool, matched: Matched | None, why: str) -> ActorVerdict:
        return {"trusted": trusted, "sender": sender, "authors": authors, "matched": matched, "why": why}

    if config is None:
        return verdict(False, None, NOT_CONFIGURED)
    if _allow_all(config):
        return verdict(True, "allow_all", "all actors are allowed")
    if spec is None:
        return verdict(False, None, "this kind names no actors to trust")
    setting = _readable(spec, config)
    if setting is None or "allow_all" in setting:
        return verdict(False, None, UNREADABLE)
    listed = {_key(spec, entry) for entry in setting[spec.field]}
    label = spec.label
    mode = setting.get("match", spec.matches[0])
    sender_ok = sender is not None and _key(spec, sender) in listed
    author = next((a for a in authors if _key(spec, a) in listed), None)
    if mode == "author":
        if author is not None:
            return verdict(True, "author", f"author {author} is a trusted {label}")
        return verdict(False, None, _no_author(authors, label))
    if not sender_ok:
        return verdict(False, None, _no_sender(sender, label))
    if mode == "both":
        if author is None:
            return verdict(False, None, f"sender {sender} is trusted, but {_no_author(authors, label)}")
        return verdict(True, "both", f"sender {sender} and author {author} are trusted {label}s")
    return verdict(True, "sender", f"sender {sender} is a trusted {label}")


def _no_sender(sender: str | None, label: str) -> str:
    return "the delivery names no sender" if sender is None else f"sender {sender} is not a trusted {label}"


def _no_author(authors: list[str], label: str) -> str:
    if not authors:
        return "the delivery names no author"
    return f"no author ({', '.join(authors)}) is a trusted {label}"


def actors_to_add(spec: TrustSpec | None, config: object, verdict: Mapping[str, Any]) -> list[str]:
    """Whom "trust this actor and release" adds so that a delivery judged ``verdict`` would be
    trusted: the sender (``sender`` mode), the first author (``author``), or whichever of the two is
    not yet listed (``both``). Empty when nothing can be added (no actor, allow_all, no trust)."""
    if spec is None or _allow_all(config):
        return []
    setting = _readable(spec, config) or {}
    listed = {_key(spec, entry) for entry in setting.get(spec.field, [])}
    sender = actor_value(verdict.get("sender"))
    given = verdict.get("authors")
    first = actor_value(given[0]) if isinstance(given, list) and given else None
    mode = setting.get("match", spec.matches[0])
    wanted = {"sender": [sender], "author": [first], "both": [sender, first]}.get(mode, [sender])
    out: list[str] = []
    for actor in wanted:
        if actor is not None and _key(spec, actor) not in listed and actor not in out:
            out.append(actor)
    return out


# ---------------------------------------------------------------------------------------------
# Changing and showing a setting


def add_actors(spec: TrustSpec | None, config: object, actors: Iterable[str]) -> dict[str, Any]:
    """``config`` with ``actors`` trusted too, normalised (``TrustError`` on a bad actor or past
    ``ENTRIES_LIMIT``). ``allow_all`` stays as it is; a missing or unreadable setting is replaced by
    one that trusts these actors alone (in the kind's default mode)."""
    if spec is None:
        raise TrustError("trust_not_supported", "trusted actors are not available: this kind names no actors")
    new = list(actors)
    if not new:
        raise TrustError("invalid_trust", f"name a {spec.label} to trust")
    setting = _readable(spec, config)
    if setting is not None and "allow_all" in setting:
        return setting
    value: dict[str, Any] = {spec.field: [*(setting or {}).get(spec.field, []), *new]}
    if setting is not None and "match" in setting:
        value["match"] = setting["match"]
    return check_trust(spec, value, signed=True)


def add_actor(spec: TrustSpec | None, config: object, actor: str) -> dict[str, Any]:
    """``add_actors`` with one actor."""
    return add_actors(spec, config, [actor])


def describe(spec: TrustSpec | None, config: object) -> str:
    """One line for people (CLI, web UI): what the setting trusts."""
    if _allow_all(config):
        return "all actors allowed"
    if spec is None:
        return "not available for this kind"
    if config is None:
        return f"{NOT_CONFIGURED}: every delivery is quarantined"
    setting = _readable(spec, config)
    if setting is None or "allow_all" in setting:
        return f"{UNREADABLE}: every delivery is quarantined"
    entries: list[str] = setting[spec.field]
    shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
    noun = spec.label if len(entries) == 1 else f"{spec.label}s"
    text = f"trusted {noun}: {shown}"
    return f"{text} (match: {setting['match']})" if "match" in setting else text
