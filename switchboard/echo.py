"""Echo suppression: is this delivery Switchboard's own reply coming back as a webhook?

A provider's ``is_echo`` hook reads the clues out of the delivery; this module matches them against
what was recorded, within the owner scopes the delivery would reach. The marker check is what
catches the race where the provider fires its webhook before our POST has returned: the reply row
exists (pending) before the dial, so its id is already known.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.models import Connection, Reply
from switchboard.provider import EchoClues


async def is_own_reply(
    s: AsyncSession, owner_scopes: list[str], clues: EchoClues, thread_key: str | None = None
) -> bool:
    """True when the clues name a reply (or a posting bot) recorded in one of ``owner_scopes``.

    ``thread_key`` is the display of the delivery's derived address: a marker only counts when its
    reply was posted to that same thread.
    """
    if not owner_scopes:
        return False
    if clues.object_ids:
        hit = await s.scalar(
            select(Reply.id)
            .where(Reply.owner_scope.in_(owner_scopes), Reply.provider_object_id.in_(list(clues.object_ids)))
            .limit(1)
        )
        if hit is not None:
            return True
    if clues.marker:
        reply = await s.get(Reply, clues.marker)
        if (
            reply is not None
            and reply.owner_scope in owner_scopes
            and (thread_key is None or reply.thread_key == thread_key)
        ):
            return True
    if clues.bot_id:
        rows = await s.scalars(
            select(Connection.last_test).where(
                (Connection.owner_human_id.in_(owner_scopes)) | (Connection.owner_team_id.in_(owner_scopes)),
            )
        )
        if any((facts or {}).get("facts", {}).get("bot_id") == clues.bot_id for facts in rows):
            return True
    return False
