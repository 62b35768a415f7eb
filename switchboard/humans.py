"""A human's token and web sessions over their lifetime: rotate, revoke, remove; list and end sessions.

The ``sbo_`` token is kept only as its SHA-256. **Rotating** stores the hash of a new token (shown
once to whoever asked) and the old one stops matching with that commit. **Revoking** stores the hash
of a token nobody is ever shown and marks the human ``revoked_at``, so no token of theirs matches
until a rotation issues a new one; the human keeps their memberships and everything they own.
Both end the human's web sessions, since each was opened with a token that is no longer theirs:
all of them, except that a rotation asked for from the web UI keeps the session that asked (it shows
the new token, and the human has just proved they hold the old one).

**Removing** a human is refused while anything still depends on them: a live endpoint, a webhook,
a connection, or a team they are the last owner of. The refusal names each one and what to do
first. Their revoked endpoints go with them, with those endpoints' todo history (attempts and
replies): a revoked endpoint's token is dead and its open todos were dead-lettered when it was
revoked, and an owner scope that no longer exists cannot keep rows that belong to it.

Every function is one write transaction; the human's row is locked first, so two rotations (or a
rotation and a removal) of one human never interleave.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.db import Database, utcnow
from switchboard.errors import SwitchboardError, not_found
from switchboard.ids import new_token, token_display, token_hash
from switchboard.models import (
    Attempt,
    Connection,
    Endpoint,
    Human,
    Membership,
    Reply,
    ReplyBucket,
    Route,
    Team,
    Todo,
    Webhook,
    WebSession,
)

# How many of each blocker a refusal names before it says "and N more".
_NAMED = 5


@dataclass(frozen=True)
class Rotated:
    human: Human
    token: str  # shown once, by whoever asked for the rotation
    sessions_ended: int


@dataclass(frozen=True)
class Revoked:
    human: Human
    sessions_ended: int
    already: bool  # it was revoked before: nothing changed


@dataclass(frozen=True)
class Removed:
    handle: str
    memberships: int
    sessions: int
    endpoints: int  # revoked endpoints removed with the human
    todos: int  # their todos (with attempts and replies)


def unauthorized(message: str) -> SwitchboardError:
    return SwitchboardError("unauthorized", message)


async def _locked_human(s: AsyncSession, *, handle: str | None, human_id: str | None) -> Human:
    """The human by handle or id, its row locked for this transaction (PostgreSQL; SQLite's write
    transaction already excludes other writers)."""
    query = select(Human).with_for_update()
    query = query.where(Human.handle == handle) if handle is not None else query.where(Human.id == human_id)
    human = await s.scalar(query)
    if human is None:
        raise not_found(f"human {handle!r}" if handle is not None else "human")
    return human


async def _end_sessions(s: AsyncSession, human_id: str, *, keep: str | None = None) -> int:
    """Delete the human's web sessions (but ``keep``, a session's id hash); returns how many."""
    query = delete(WebSession).where(WebSession.human_id == human_id)
    if keep is not None:
        query = query.where(WebSession.id_hash != keep)
    result: Any = await s.execute(query)
    return int(result.rowcount or 0)


async def rotate_token(
    db: Database,
    *,
    handle: str | None = None,
    human_id: str | None = None,
    current_token: str | None = None,
    keep_session: str | None = None,
    seal_for_session: Callable[[str], bytes] | None = None,
) -> Rotated:
    """Issue the human a new token; the old one (or a revoked state) ends with this commit.

    ``current_token``: rotate only if this is still the human's live token (a self-rotation: the API
    caller's bearer token, or the token typed on the account page), else ``unauthorized`` and nothing
    changes — so of two concurrent self-rotations with one token, only the first succeeds.
    ``keep_session``: the id hash of the web session that asked, left open. ``seal_for_session``:
    seals the new token for that session's one-time reveal, stored in the same transaction, so the
    token is never issued without a way to show it (a session that ended meanwhile is a
    ``conflict`` and nothing changes).
    """
    now = utcnow()
    async with db.write() as s:
        human = await _locked_human(s, handle=handle, human_id=human_id)
        if current_token is not None and (
            human.revoked_at is not None
            or not hmac.compare_digest(human.token_hash, token_hash(current_token))
        ):
            raise unauthorized("that is not the human's current token; nothing was changed")
        token = new_token("sbo")
        human.token_hash, human.token_display = token_hash(token), token_display(token)
        human.token_rotated_at, human.revoked_at = now, None
        ended = await _end_sessions(s, human.id, keep=keep_session)
        if keep_session is not None and seal_for_session is not None:
            kept: Any = await s.execute(
                update(WebSession)
                .where(WebSession.id_hash == keep_session, WebSession.human_id == human.id)
                .values(reveal=seal_for_session(token))
            )
            if not kept.rowcount:
                raise SwitchboardError("conflict", "the session that asked has ended; log in again")
    return Rotated(human, token, ended)


async def revoke_token(db: Database, *, handle: str | None = None, human_id: str | None = None) -> Revoked:
    """Refuse every token of the human from this commit on and end all their web sessions. The human
    stays, with their memberships and everything they own; a later rotation issues a new token."""
    async with db.write() as s:
        human = await _locked_human(s, handle=handle, human_id=human_id)
        already = human.revoked_at is not None
        if not already:
            # A hash no token is known for, in place of the live one (the column is unique and not
            # null); the display prefix stays, so listings still say which token was revoked.
            human.token_hash = token_hash(new_token("sbo"))
            human.revoked_at = utcnow()
        ended = await _end_sessions(s, human.id)
    return Revoked(human, ended, already)


def _some(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")


async def _blockers(s: AsyncSession, human: Human) -> list[str]:
    """What keeps the human from being removed, each with what to do first."""
    found: list[str] = []
    live = list(
        (
            await s.scalars(
                select(Endpoint.slug)
                .where(Endpoint.owner_human_id == human.id, Endpoint.state == "active")
                .order_by(Endpoint.slug)
            )
        ).all()
    )
    if live:
        found.append(f"endpoints {_some(live)} (revoke them first: switchboard endpoint revoke SLUG)")
    hooks = list(
        (
            await s.scalars(
                select(Webhook.id)
                .join(Endpoint, Endpoint.id == Webhook.endpoint_id)
                .where(Endpoint.owner_human_id == human.id)
                .order_by(Webhook.id)
            )
        ).all()
    )
    if hooks:
        found.append(f"webhooks {_some(hooks)} (delete them first: switchboard webhook delete ID)")
    conns = list(
        (
            await s.execute(
                select(Connection.id, Connection.name)
                .where(Connection.owner_human_id == human.id)
                .order_by(Connection.name)
            )
        ).all()
    )
    if conns:
        named = [f"{name} ({cid})" for cid, name in conns]
        found.append(f"connections {_some(named)} (delete them first: switchboard connection delete ID)")
    other_owner = select(Membership.team_id).where(
        Membership.role == "owner", Membership.human_id != human.id
    )
    sole = list(
        (
            await s.scalars(
                select(Team.slug)
                .join(Membership, Membership.team_id == Team.id)
                .where(
                    Membership.human_id == human.id,
                    Membership.role == "owner",
                    Team.id.not_in(other_owner),
                )
                .order_by(Team.slug)
            )
        ).all()
    )
    if sole:
        found.append(
            f"the last owner of team {_some(sole)} (make another member owner first: "
            "switchboard team member add SLUG HANDLE --role owner)"
        )
    return found


async def _lock_owned_teams(s: AsyncSession, human_id: str) -> None:
    """Lock the owner rows of every team the human owns, in the order ``owners`` locks them (team,
    then human), before the last-owner check reads them: on PostgreSQL a plain read saw another
    owner's uncommitted leave or demotion as not made, and the removal then left the team with no
    owner. SQLite's write transaction already excludes other writers."""
    owned = select(Membership.team_id).where(Membership.human_id == human_id, Membership.role == "owner")
    await s.execute(
        select(Membership.team_id, Membership.human_id)
        .where(Membership.role == "owner", Membership.team_id.in_(owned))
        .order_by(Membership.team_id, Membership.human_id)
        .with_for_update()
    )


async def remove_human(db: Database, handle: str) -> Removed:
    """Remove the human, their memberships and web sessions, and their revoked endpoints with those
    endpoints' todos; refused (``conflict``, naming each blocker) while anything depends on them."""
    async with db.write() as s:
        human = await _locked_human(s, handle=handle, human_id=None)
        await _lock_owned_teams(s, human.id)
        blockers = await _blockers(s, human)
        if blockers:
            raise SwitchboardError(
                "conflict", f"human {handle!r} cannot be removed: still owns " + "; ".join(blockers)
            )
        endpoint_ids = list(
            (await s.scalars(select(Endpoint.id).where(Endpoint.owner_human_id == human.id))).all()
        )
        todo_ids = select(Todo.id).where(Todo.endpoint_id.in_(endpoint_ids))
        todos = await s.scalar(select(func.count(Todo.id)).where(Todo.endpoint_id.in_(endpoint_ids)))
        await s.execute(delete(Attempt).where(Attempt.todo_id.in_(todo_ids)))
        await s.execute(delete(Reply).where(Reply.todo_id.in_(todo_ids)))
        await s.execute(delete(Todo).where(Todo.endpoint_id.in_(endpoint_ids)))
        # Routes from other scopes' webhooks into these (revoked) endpoints end with them.
        await s.execute(delete(Route).where(Route.endpoint_id.in_(endpoint_ids)))
        await s.execute(delete(ReplyBucket).where(ReplyBucket.endpoint_id.in_(endpoint_ids)))
        await s.execute(delete(Endpoint).where(Endpoint.id.in_(endpoint_ids)))
        memberships: Any = await s.execute(delete(Membership).where(Membership.human_id == human.id))
        sessions = await _end_sessions(s, human.id)
        await s.delete(human)
    return Removed(handle, int(memberships.rowcount or 0), sessions, len(endpoint_ids), int(todos or 0))


# ---------------------------------------------------------------------------------------------
# Web sessions


async def list_sessions(db: Database, human_id: str) -> list[WebSession]:
    """The human's live web sessions, the most recently used first."""
    async with db.read() as s:
        rows = await s.scalars(
            select(WebSession)
            .where(WebSession.human_id == human_id, WebSession.expires_at > utcnow())
            .order_by(WebSession.last_seen_at.desc(), WebSession.ref.desc())
        )
        return list(rows.all())


async def end_session(db: Database, human_id: str, ref: str) -> WebSession:
    """End one of the human's web sessions by its name; another human's is ``not_found``."""
    async with db.write() as s:
        row = await s.scalar(select(WebSession).where(WebSession.ref == ref, WebSession.human_id == human_id))
        if row is None:
            raise not_found(f"session {ref!r}")
        await s.delete(row)
    return row


async def end_sessions(db: Database, human_id: str, *, keep: str | None = None) -> int:
    """End all the human's web sessions (but ``keep``, a session's id hash); returns how many."""
    async with db.write() as s:
        return await _end_sessions(s, human_id, keep=keep)


def session_view(row: WebSession, *, current_hash: str | None = None) -> dict[str, Any]:
    """A web session as the account page and the API show it: never the cookie or its hash."""
    view: dict[str, Any] = {
        "id": row.ref,
        "created_at": row.created_at,
        "last_seen_at": row.last_seen_at,
        "expires_at": row.expires_at,
        "user_agent": row.user_agent,
    }
    if current_hash is not None:
        view["current"] = hmac.compare_digest(row.id_hash, current_hash)
    return view
