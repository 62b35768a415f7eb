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

import asyncio
import functools
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import ColumnElement, Integer, Select, String, and_, bindparam, column, func, or_, select
from sqlalchemy.dialects.postgresql import ARRAY

from switchboard.db import Database, DatabaseUnavailable
from switchboard.direct import Steps
from switchboard.models import Connection, Reply
from switchboard.plugins import Providers, UnknownKind
from switchboard.provider import Address, ConnectionKind, Delivery, EchoClues, Verdict
from switchboard.services import Services

log = logging.getLogger("switchboard.echo")

# The echo reads run on the driver directly (``Database.read_steps``): ingest runs one for every
# delivery that carries a comment id, and through a session that read cost more than the rest of
# the delivery's storing (issue 12). A direct statement is compiled once, so its lists of values
# are placeholders of fixed length: each list is padded (repeating its last value, which matches
# nothing new) to the next power of two, so a handful of statements serve every length. The
# object-id read takes its values as arrays (or JSON) instead: one statement for any number of
# checks (``_by_objects_of_checks``).
_REPLIES = Reply.__table__.c
_CONNECTIONS = Connection.__table__.c


def _padded(name: str, values: Sequence[str]) -> dict[str, str]:
    size = 1 << max(len(values) - 1, 0).bit_length()
    padded = [*values, *[values[-1]] * (size - len(values))]
    return {f"{name}_{i}": value for i, value in enumerate(padded)}


def _one_of(column: ColumnElement[Any], name: str, count: int) -> ColumnElement[bool]:
    return column.in_([bindparam(f"{name}_{i}") for i in range(count)])


@functools.cache
def _by_marker(scopes: int) -> Select[tuple[str]]:
    return select(_REPLIES.owner_scope).where(_REPLIES.id == bindparam("marker"), *_same_origin(scopes))


@functools.cache
def _bots(scopes: int) -> Select[tuple[str | None, str | None, str, Any]]:
    """The connections of the wanted scopes for the provider, with their last test's facts."""
    c = _CONNECTIONS
    return select(c.owner_human_id, c.owner_team_id, c.account_key, c.last_test).where(
        c.kind == bindparam("provider"),
        _one_of(c.owner_human_id, "scope", scopes) | _one_of(c.owner_team_id, "scope", scopes),
    )


def _same_origin(scopes: int) -> tuple[ColumnElement[bool], ...]:
    return (
        _one_of(_REPLIES.owner_scope, "scope", scopes),
        *_thread_of(bindparam("thread"), bindparam("provider")),
    )


def _thread_of(thread: ColumnElement[Any], provider: ColumnElement[Any]) -> tuple[ColumnElement[bool], ...]:
    """A reply to this thread (the address's display) and provider; a row made before the
    provider was kept has none, and its thread names the provider anyway."""
    return _REPLIES.thread_key == thread, or_(_REPLIES.provider == provider, _REPLIES.provider.is_(None))


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


def echo_steps(
    scopes: Iterable[str], origin: Origin | None, sqlite: bool, *, by_object: frozenset[str] | None = None
) -> Steps[frozenset[str]]:
    """The scopes, among ``scopes``, for which the delivery is their own reply coming back (the
    reads, as ``direct.Steps``; ``echo_scopes`` runs them).

    A scope matches when one of its replies to the same provider and thread has the delivery's
    object id, or is the reply the delivery's marker names, or when the delivery's bot is the bot a
    connection of that scope, of that provider and serving that address, recorded in its test.
    The object-id read is ``SharedEchoReads``' statement, for this one check (``sqlite``: which
    form it takes); ``by_object``: what it found, when it was made already, shared.
    """
    wanted = list(dict.fromkeys(scopes))
    if origin is None or not wanted or not has_clues(origin.clues):
        return frozenset()
    clues, found = origin.clues, set[str]()
    scope_values = _padded("scope", wanted)
    same_origin = {**scope_values, "thread": origin.thread, "provider": origin.provider}
    if by_object is not None:
        found.update(by_object)
    elif clues.object_ids:
        found.update((yield from _by_objects_steps([(wanted, origin)], sqlite)).get(0, ()))
    if clues.marker:
        rows = yield _by_marker(len(scope_values)), {**same_origin, "marker": clues.marker}
        found.update(row.owner_scope for row in rows)
    serves = _bot_serves(origin)
    if serves is not None:
        rows = yield _bots(len(scope_values)), {**scope_values, "provider": origin.provider}
        for row in rows:
            facts = (row.last_test or {}).get("facts") or {}
            if facts.get("bot_id") == clues.bot_id and serves(row.account_key):
                found.add(row.owner_human_id or row.owner_team_id)
    return frozenset(found)


def _bot_serves(origin: Origin) -> Callable[[str], bool] | None:
    """The account rule a bot id is matched by; None when there is no bot read to make (no bot
    id, or the kind is not installed)."""
    return origin.serves if origin.clues.bot_id else None


async def echo_scopes(
    db: Database, scopes: Iterable[str], origin: Origin | None, shared: SharedEchoReads | None = None
) -> frozenset[str]:
    """``echo_steps``, run on a read connection; with ``shared``, the object-id read is made with
    the other checks waiting at the time (the marker and bot reads, rare, are made alone)."""
    wanted = list(dict.fromkeys(scopes))
    if shared is None or origin is None or not wanted or not origin.clues.object_ids:
        return await db.read_steps(echo_steps(wanted, origin, db.is_sqlite))
    by_object = await shared.found(wanted, origin)
    if not origin.clues.marker and _bot_serves(origin) is None:
        return by_object
    return await db.read_steps(echo_steps(wanted, origin, db.is_sqlite, by_object=by_object))


# One check of ``SharedEchoReads``: its scopes, its origin and the future its answer goes to.
_Check = tuple[list[str], "Origin", "asyncio.Future[frozenset[str]]"]


class SharedEchoReads:
    """The object-id reads of the echo checks waiting at one time, made as one statement.

    Ingest makes one for every verified delivery that carries a comment id (most of a forge bot's
    deliveries): alone, each was a pooled connection and a round trip, about a sixth of such a
    delivery's CPU on PostgreSQL (issue 12). As the ingest writer shares its commit, the checks
    that arrive while a read runs share the next one; a check that arrives when none runs is read
    on the event loop's next turn. Every row of the statement carries the number of the check it
    answers, so a check gets exactly the rows its own scopes, thread and provider match, as its
    own statement would have given it. If the read fails, every check of it gets the error.
    """

    def __init__(self, db: Database, max_batch: int = 64) -> None:
        self.db = db
        self.max_batch = max_batch
        self._waiting: list[_Check] = []
        self._task: asyncio.Task[None] | None = None
        # For tests: how many statements the checks took.
        self.reads = 0

    async def found(self, scopes: list[str], origin: Origin) -> frozenset[str]:
        """The scopes among ``scopes`` with a reply to ``origin``'s provider and thread that has
        one of its object ids."""
        loop = asyncio.get_running_loop()
        check: _Check = (scopes, origin, loop.create_future())
        self._waiting.append(check)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain(), name="switchboard:echo-reads")
        return await check[2]

    async def _drain(self) -> None:
        batch: list[_Check] = []
        try:
            while self._waiting:
                batch = [c for c in self._waiting[: self.max_batch] if not c[2].done()]
                del self._waiting[: self.max_batch]
                if not batch:
                    continue
                self.reads += 1
                checks = [(scopes, origin) for scopes, origin, _ in batch]
                try:
                    found = await self.db.read_steps(_by_objects_steps(checks, self.db.is_sqlite))
                except Exception as exc:
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for n, (_, _, future) in enumerate(batch):
                    if not future.done():
                        future.set_result(found.get(n, frozenset()))
        finally:
            # Stopped (the loop is closing), even in the middle of a read: nobody waits for ever.
            for _, _, future in [*batch, *self._waiting]:
                if not future.done():
                    future.set_exception(DatabaseUnavailable("echo reads stopped"))


def _by_objects_steps(
    checks: Sequence[tuple[list[str], Origin]], sqlite: bool
) -> Steps[dict[int, frozenset[str]]]:
    """One read for every (object id, scope) pair of every check (its scopes and its origin): the
    scopes each check found, by its place in ``checks``."""
    given = [
        (n, object_id, scope, origin.thread, origin.provider)
        for n, (scopes, origin) in enumerate(checks)
        for object_id in dict.fromkeys(origin.clues.object_ids)
        for scope in scopes
    ]
    if sqlite:
        values: dict[str, Any] = {"given": json.dumps(given)}
    else:
        values = {name: [row[i] for row in given] for i, name in enumerate(_GIVEN)}
    rows = yield _by_objects_of_checks(sqlite), values
    found: dict[int, set[str]] = {}
    for row in rows:
        found.setdefault(int(row.n), set()).add(row.owner_scope)
    return {n: frozenset(scopes) for n, scopes in found.items()}


_GIVEN = ("n", "object_id", "scope", "thread", "provider")


@functools.cache
def _by_objects_of_checks(sqlite: bool) -> Select[tuple[int, str]]:
    """The replies with one of a delivery's object ids, for many checks at once (or one alone):
    the given (check, object id, scope, thread, provider) rows joined to the replies they match.
    PostgreSQL takes them as one array per column (``unnest``), SQLite as one JSON array of rows
    (``json_each``): one statement text either way."""
    if sqlite:
        table = func.json_each(bindparam("given", type_=String())).table_valued("value")
        rows = table.alias("given")
        n, object_id, scope, thread, provider = (
            cast(ColumnElement[Any], func.json_extract(rows.c.value, f"$[{i}]")) for i in range(len(_GIVEN))
        )
    else:
        # Any: SQLAlchemy's stubs type ARRAY's and column's item types more narrowly than they are.
        typed: list[tuple[str, Any]] = list(
            zip(_GIVEN, (Integer(), String(), String(), String(), String()), strict=True)
        )
        arrays = func.unnest(*(bindparam(name, type_=ARRAY(kind)) for name, kind in typed))
        rows = arrays.table_valued(*(column(name, kind) for name, kind in typed)).render_derived(name="given")
        n, object_id, scope, thread, provider = (rows.c[name] for name in _GIVEN)
    r = _REPLIES
    matches = and_(r.provider_object_id == object_id, r.owner_scope == scope, *_thread_of(thread, provider))
    return select(n.label("n"), r.owner_scope).select_from(rows).join(Reply.__table__, matches).distinct()


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
    shared: SharedEchoReads | None = None,
) -> frozenset[str]:
    """Ingest's one call (step 5, for a verified delivery, with the address step 6 kept): the
    target scopes for which the delivery is their own reply. Those targets get no todo; it is a
    ``self_reply`` only when that is every target. Reads the database only when the delivery has
    an address and clues; with ``shared``, its object-id read is shared with the other
    deliveries' checks waiting at the time."""
    origin = origin_of(services.providers, delivery, verdict, address)
    if origin is None:
        return frozenset()
    return await echo_scopes(services.db, scopes, origin, shared)
