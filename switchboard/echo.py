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

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlalchemy import bindparam, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.models import Connection, Reply
from switchboard.plugins import Providers, UnknownKind
from switchboard.provider import Address, ConnectionKind, Delivery, EchoClues, Verdict
from switchboard.services import Services

log = logging.getLogger("switchboard.echo")

# The reply reads, built once with bound parameters and run through Core: ingest runs one for
# every delivery that carries a comment id, and building the expression, its cache key and the
# ORM's execution around a one-column select cost more than the query itself (issue 12).
_REPLIES = Reply.__table__.c
# A reply of one of the wanted scopes, on the same thread, by the same provider (rows made before
# the provider was kept have none; their thread names the provider anyway).
_SAME_ORIGIN = (
    _REPLIES.owner_scope.in_(bindparam("scopes", expanding=True)),
    _REPLIES.thread_key == bindparam("thread"),
    or_(_REPLIES.provider == bindparam("provider"), _REPLIES.provider.is_(None)),
)
_BY_OBJECT = (
    select(_REPLIES.owner_scope)
    .where(_REPLIES.provider_object_id.in_(bindparam("object_ids", expanding=True)), *_SAME_ORIGIN)
    .distinct()
)
_BY_MARKER = select(_REPLIES.owner_scope).where(_REPLIES.id == bindparam("marker"), *_SAME_ORIGIN)


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


async def echo_scopes(s: AsyncSession, scopes: Iterable[str], origin: Origin | None) -> frozenset[str]:
    """The scopes, among ``scopes``, for which the delivery is their own reply coming back.

    A scope matches when one of its replies to the same provider and thread has the delivery's
    object id, or is the reply the delivery's marker names, or when the delivery's bot is the bot a
    connection of that scope, of that provider and serving that address, recorded in its test.
    """
    wanted = list(dict.fromkeys(scopes))
    if origin is None or not wanted or not has_clues(origin.clues):
        return frozenset()
    clues, found = origin.clues, set[str]()
    same_origin = {"scopes": wanted, "thread": origin.thread, "provider": origin.provider}
    if clues.object_ids or clues.marker:
        conn = await s.connection()
        if clues.object_ids:
            params = {"object_ids": list(clues.object_ids), **same_origin}
            found.update((await conn.execute(_BY_OBJECT, params)).scalars().all())
        if clues.marker:
            params = {"marker": clues.marker, **same_origin}
            found.update((await conn.execute(_BY_MARKER, params)).scalars().all())
    if clues.bot_id and origin.serves is not None:
        rows_with_bots = await s.execute(
            select(
                Connection.owner_human_id,
                Connection.owner_team_id,
                Connection.account_key,
                Connection.last_test,
            ).where(
                Connection.kind == origin.provider,
                Connection.owner_human_id.in_(wanted) | Connection.owner_team_id.in_(wanted),
            )
        )
        for human_id, team_id, account_key, last_test in rows_with_bots.all():
            facts = (last_test or {}).get("facts") or {}
            if facts.get("bot_id") == clues.bot_id and origin.serves(account_key):
                found.add(human_id or team_id)
    return frozenset(found)


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
    async with services.db.read() as s:
        return await echo_scopes(s, scopes, origin)
