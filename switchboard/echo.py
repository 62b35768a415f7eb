"""Echo suppression: is this delivery Switchboard's own reply coming back as a webhook, and for whom?

A provider's ``is_echo`` hook reads the clues out of the delivery; this module matches them against
what was recorded. The answer is per owner scope: a delivery fanned out to several scopes is an
echo only for the scopes that made the reply, and the others get their todo as usual.

A match is keyed by the delivery's origin, never by a value alone: the provider kind, the instance
and the thread (the display of the address derived from the delivery, e.g. ``gitea
git.example.com/gitea-b/acme/api#5``, which names all three) and then the object id, the marker or
the bot. A Gitea comment whose id happens to equal a GitHub reply's id, or a comment in another
thread or on another instance, is somebody's message, not ours. A delivery with no derived address
has no thread, so it is never an echo.

The marker check is what catches the race where the provider fires its webhook before our POST has
returned: the reply row exists (pending) before the dial, so its id is already known.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, select

from switchboard.db import Database, is_unavailable
from switchboard.direct import Combiner, Outcome, Steps
from switchboard.models import Connection, Reply
from switchboard.plugins import Providers, UnknownKind
from switchboard.provider import Address, ConnectionKind, Delivery, EchoClues, Verdict
from switchboard.services import Services

log = logging.getLogger("switchboard.echo")

# The echo reads run on the driver directly (``Database.read_steps``): ingest runs one for every
# delivery that carries a comment id, and through a session that read cost more than the rest of
# the delivery's storing (issue 12). The deliveries that check at the same time are checked
# together (``Combiner``): one read of each kind for all of them, each answer then matched to
# its delivery here, with the same tests the statements used to make one delivery at a time. A
# direct statement is compiled once, so its lists of values are placeholders of fixed length:
# each list is padded (repeating its last value, which matches nothing new) to the next power of
# two, so a handful of statements serve every length.
_REPLIES = Reply.__table__.c
_CONNECTIONS = Connection.__table__.c


def _padded(name: str, values: Sequence[str]) -> dict[str, str]:
    size = 1 << max(len(values) - 1, 0).bit_length()
    padded = [*values, *[values[-1]] * (size - len(values))]
    return {f"{name}_{i}": value for i, value in enumerate(padded)}


def _one_of(column: ColumnElement[Any], name: str, count: int) -> ColumnElement[bool]:
    return column.in_([bindparam(f"{name}_{i}") for i in range(count)])


_REPLY_COLUMNS = (_REPLIES.id, _REPLIES.owner_scope, _REPLIES.thread_key, _REPLIES.provider)


@functools.cache
def _by_object(scopes: int, object_ids: int) -> Select[Any]:
    """The replies of the wanted scopes with one of the deliveries' object ids."""
    return select(*_REPLY_COLUMNS, _REPLIES.provider_object_id).where(
        _one_of(_REPLIES.provider_object_id, "object_id", object_ids),
        _one_of(_REPLIES.owner_scope, "scope", scopes),
    )


@functools.cache
def _by_marker(scopes: int, markers: int) -> Select[Any]:
    """The replies of the wanted scopes that the deliveries' markers name."""
    return select(*_REPLY_COLUMNS).where(
        _one_of(_REPLIES.id, "marker", markers), _one_of(_REPLIES.owner_scope, "scope", scopes)
    )


@functools.cache
def _bots(scopes: int) -> Select[Any]:
    """The connections of the wanted scopes, with their last test's facts."""
    c = _CONNECTIONS
    return select(c.kind, c.owner_human_id, c.owner_team_id, c.account_key, c.last_test).where(
        _one_of(c.owner_human_id, "scope", scopes) | _one_of(c.owner_team_id, "scope", scopes)
    )


@dataclass(frozen=True)
class Origin:
    """Where a verified delivery came from, as echo matching keys it.

    ``provider``: the provider kind of its address. ``thread``: the address's display (instance and
    thread). ``clues``: what the provider's ``is_echo`` found. ``serves``: does a connection with
    this account key serve the address (the kind's ``account_matches``)? It keys a bot id by
    account; None when the kind is not installed, and then no bot id matches.
    """

    provider: str
    thread: str
    clues: EchoClues
    serves: Callable[[str], bool] | None = None

    @classmethod
    def of(cls, address: Address, clues: EchoClues, kind: ConnectionKind | None = None) -> Origin:
        serves = None
        if kind is not None and kind.name == address.provider:

            def serves(account_key: str) -> bool:
                try:
                    return bool(kind.account_matches(account_key, address))
                except (KeyError, TypeError, ValueError):
                    return False

        return cls(provider=address.provider, thread=address.display, clues=clues, serves=serves)


def has_clues(clues: EchoClues | None) -> bool:
    return clues is not None and bool(clues.object_ids or clues.marker or clues.bot_id)


@dataclass(frozen=True)
class Check:
    """One delivery's question: for which of ``scopes`` (distinct, in order) is it their own reply?"""

    scopes: tuple[str, ...]
    origin: Origin


def echo_steps(checks: Sequence[Check]) -> Steps[list[frozenset[str]]]:
    """For each check, the scopes among its own for which its delivery is their own reply coming
    back (the reads, as ``direct.Steps``, for all the checks at once; ``echo_scopes`` runs them).

    A scope matches when one of its replies to the same provider and thread has the delivery's
    object id, or is the reply the delivery's marker names, or when the delivery's bot is the bot a
    connection of that scope, of that provider and serving that address, recorded in its test.
    """
    found = [set[str]() for _ in checks]
    scopes = _padded("scope", list(dict.fromkeys(s for check in checks for s in check.scopes)))
    object_ids = list(dict.fromkeys(i for check in checks for i in check.origin.clues.object_ids))
    if object_ids:
        ids = _padded("object_id", object_ids)
        rows = yield _by_object(len(scopes), len(ids)), {**scopes, **ids}
        for check, into in zip(checks, found, strict=True):
            wanted = set(check.origin.clues.object_ids)
            into.update(
                r.owner_scope for r in rows if r.provider_object_id in wanted and _same_origin(r, check)
            )
    markers = list(dict.fromkeys(check.origin.clues.marker for check in checks if check.origin.clues.marker))
    if markers:
        named = _padded("marker", markers)
        rows = yield _by_marker(len(scopes), len(named)), {**scopes, **named}
        for check, into in zip(checks, found, strict=True):
            marker = check.origin.clues.marker
            into.update(r.owner_scope for r in rows if marker and r.id == marker and _same_origin(r, check))
    if any(check.origin.clues.bot_id and check.origin.serves is not None for check in checks):
        rows = yield _bots(len(scopes)), scopes
        for check, into in zip(checks, found, strict=True):
            into.update(_bot_scopes(check, rows))
    return [frozenset(scopes) for scopes in found]


def _same_origin(row: Any, check: Check) -> bool:
    """A reply of one of the check's scopes, to its thread, by its provider (rows made before the
    provider was kept have none; their thread names it anyway)."""
    origin = check.origin
    return (
        row.owner_scope in check.scopes
        and row.thread_key == origin.thread
        and (row.provider == origin.provider or row.provider is None)
    )


def _bot_scopes(check: Check, connections: Sequence[Any]) -> set[str]:
    """The check's scopes with a connection of its provider, serving its address, whose last test
    found the delivery's bot."""
    origin, bot_id = check.origin, check.origin.clues.bot_id
    if not bot_id or origin.serves is None:
        return set()
    out = set()
    for row in connections:
        if row.kind != origin.provider or not (
            row.owner_human_id in check.scopes or row.owner_team_id in check.scopes
        ):
            continue
        facts = (row.last_test or {}).get("facts") or {}
        if facts.get("bot_id") == bot_id and origin.serves(row.account_key):
            out.add(row.owner_human_id or row.owner_team_id)
    return out


# At most this many deliveries' checks in one read: a burst's placeholders stay well inside both
# engines' limits on a statement's parameters.
_MOST_CHECKS = 128


async def _check_batch(db: Database, checks: list[Check]) -> list[Outcome]:
    answers: list[Outcome] = []
    for start in range(0, len(checks), _MOST_CHECKS):
        found = await db.read_steps(echo_steps(checks[start : start + _MOST_CHECKS]))
        answers += [(True, scopes) for scopes in found]
    return answers


# A read the database refuses for one delivery's values (not an outage) fails that delivery only:
# the batch is read again one check at a time.
_CHECKS: Combiner[Database, Check] = Combiner(_check_batch, lambda exc: not is_unavailable(exc))


async def echo_scopes(db: Database, scopes: Iterable[str], origin: Origin | None) -> frozenset[str]:
    """The scopes, among ``scopes``, for which a delivery of ``origin`` is their own reply: read
    together with the other deliveries checking at the same time (``echo_steps``)."""
    wanted = tuple(dict.fromkeys(scopes))
    if origin is None or not wanted or not has_clues(origin.clues):
        return frozenset()
    found: frozenset[str] = await _CHECKS.submit(db, Check(wanted, origin))
    return found


def clues_of(providers: Providers, delivery: Delivery, verdict: Verdict) -> EchoClues | None:
    """The provider's echo clues for a verified delivery; a provider that fails gives none."""
    try:
        clues = providers.source(delivery.source).echo_clues(delivery, verdict)
    except Exception as exc:
        log.error("is_echo for %s raised %s; treating as not an echo", delivery.source, type(exc).__name__)
        return None
    return clues if isinstance(clues, EchoClues) else None


def origin_of(
    providers: Providers, delivery: Delivery, verdict: Verdict, address: Address | None
) -> Origin | None:
    """The delivery's origin for echo matching: None without an address (no thread) or clues."""
    if address is None:
        return None
    clues = clues_of(providers, delivery, verdict)
    if not has_clues(clues):
        return None
    assert clues is not None
    try:
        kind: ConnectionKind | None = providers.connection(address.provider)
    except UnknownKind:
        kind = None
    return Origin.of(address, clues, kind)


async def own_reply_scopes(
    services: Services,
    delivery: Delivery,
    verdict: Verdict,
    address: Address | None,
    scopes: Iterable[str],
) -> frozenset[str]:
    """Ingest's one call (step 5, for a verified delivery, with the address step 6 kept): the
    target scopes for which the delivery is their own reply. Those targets get no todo; it is a
    ``self_reply`` only when that is every target. Reads the database only when the delivery has
    an address and clues."""
    origin = origin_of(services.providers, delivery, verdict, address)
    if origin is None:
        return frozenset()
    return await echo_scopes(services.db, scopes, origin)
