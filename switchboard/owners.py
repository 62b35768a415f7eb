"""Humans, teams and owner scopes: who may own, see and manage what.

A human holds an ``sbo_`` token; a team is humans with roles. Every endpoint, webhook and connection
belongs to exactly one owner scope (one human or one team), and ``can_manage`` / ``can_see`` are the
team rule every surface applies. Writes take the ``Database`` and run in one write transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard import bearers
from switchboard.db import Database, utcnow
from switchboard.errors import SwitchboardError, conflict, invalid, not_found
from switchboard.ids import new_id, new_token, token_display, token_hash
from switchboard.models import Connection, Endpoint, Human, Membership, Team

HANDLE_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
ROLES = ("owner", "admin", "member")


@dataclass(frozen=True)
class Owner:
    """An owner scope: exactly one of a human or a team."""

    human_id: str | None = None
    team_id: str | None = None

    def __post_init__(self) -> None:
        if (self.human_id is None) == (self.team_id is None):
            raise ValueError("an owner is exactly one human or one team")

    @property
    def id(self) -> str:
        return self.human_id or self.team_id or ""

    @classmethod
    def of(cls, row: Any) -> Owner:
        return cls(human_id=row.owner_human_id, team_id=row.owner_team_id)

    def columns(self) -> dict[str, str | None]:
        return {"owner_human_id": self.human_id, "owner_team_id": self.team_id}


def check_handle(value: str, what: str = "handle") -> str:
    if not isinstance(value, str) or not HANDLE_RE.fullmatch(value):
        raise invalid(f"{what} {value!r} must match [a-z0-9][a-z0-9-]{{0,62}}")
    return value


# ---------------------------------------------------------------------------------------------
# Humans


async def add_human(db: Database, handle: str, email: str | None = None) -> tuple[Human, str]:
    """Create a human; returns the row and the ``sbo_`` token, which is never shown again."""
    check_handle(handle)
    if email is not None and (len(email) > 320 or "@" not in email or any(c.isspace() for c in email)):
        raise invalid(f"email {email!r} is not an email address")
    token = new_token("sbo")
    human = Human(
        id=new_id("hu"),
        handle=handle,
        email=email,
        token_hash=token_hash(token),
        token_display=token_display(token),
        created_at=utcnow(),
    )
    try:
        async with db.write() as s:
            s.add(human)
    except IntegrityError:
        raise conflict(f"human {handle!r} already exists") from None
    return human, token


async def list_humans(db: Database) -> list[Human]:
    async with db.read() as s:
        return list((await s.scalars(select(Human).order_by(Human.handle))).all())


async def human_by_token(db: Database, token: str) -> Human | None:
    if not token.startswith("sbo_"):
        return None
    return await bearers.human_by_hash(db, token_hash(token))


def human_view(human: Human) -> dict[str, Any]:
    """A human as every surface shows them: the token only as its display prefix."""
    return {
        "id": human.id,
        "handle": human.handle,
        "email": human.email,
        "token_prefix": human.token_display,
        # ``revoked``: no token of theirs is accepted until ``human rotate`` issues a new one.
        "token_state": "revoked" if human.revoked_at is not None else "active",
        "token_rotated_at": human.token_rotated_at,
        "revoked_at": human.revoked_at,
        "created_at": human.created_at,
    }


async def _human(s: AsyncSession, handle: str) -> Human:
    human = await s.scalar(select(Human).where(Human.handle == handle))
    if human is None:
        raise not_found(f"human {handle!r}")
    return human


# ---------------------------------------------------------------------------------------------
# Teams


async def _team(s: AsyncSession, slug: str) -> Team:
    team = await s.scalar(select(Team).where(Team.slug == slug))
    if team is None:
        raise not_found(f"team {slug!r}")
    return team


async def add_team(db: Database, slug: str, owner_handle: str) -> Team:
    check_handle(slug, "team slug")
    try:
        async with db.write() as s:
            owner = await _human(s, owner_handle)
            team = Team(id=new_id("tm"), slug=slug, created_at=utcnow())
            s.add(team)
            await s.flush()
            s.add(Membership(team_id=team.id, human_id=owner.id, role="owner", created_at=utcnow()))
    except IntegrityError:
        raise conflict(f"team {slug!r} already exists") from None
    return team


async def list_teams(db: Database, human_id: str | None = None) -> list[dict[str, Any]]:
    """Teams with their members; only the human's own teams when ``human_id`` is given."""
    async with db.read() as s:
        query = select(Team).order_by(Team.slug)
        if human_id is not None:
            query = query.join(Membership).where(Membership.human_id == human_id)
        teams = list((await s.scalars(query)).all())
        out = []
        for team in teams:
            rows = await s.execute(
                select(Human.handle, Membership.role)
                .join(Membership)
                .where(Membership.team_id == team.id)
                .order_by(Human.handle)
            )
            out.append(
                {
                    "id": team.id,
                    "slug": team.slug,
                    "created_at": team.created_at,
                    "members": [{"handle": h, "role": r} for h, r in rows],
                }
            )
        return out


async def set_member(
    db: Database, slug: str, handle: str, role: str = "member", *, by: str | None = None
) -> None:
    """Add a member, or change an existing member's role. ``by``: the human asking (the API, the web
    UI), held to the team rule (owners and admins manage members; only an owner grants the owner
    role or changes an owner's) in this transaction; the CLI (the instance operator) passes none."""
    if role not in ROLES:
        raise invalid(f"role {role!r} must be one of {', '.join(ROLES)}")
    async with db.write() as s:
        team, human = await _team(s, slug), await _human(s, handle)
        if by is not None:
            mine, current = await _acting_roles(s, team, by, human.id)
            if mine != "owner" and "owner" in (role, current):
                raise SwitchboardError("forbidden", "only a team owner may grant or change the owner role")
        row = await s.get(Membership, (team.id, human.id))
        if row is None:
            s.add(Membership(team_id=team.id, human_id=human.id, role=role, created_at=utcnow()))
        else:
            if row.role == "owner" and role != "owner":
                await _keep_an_owner(s, team.id, human.id)
            row.role = role


async def remove_member(db: Database, slug: str, handle: str, *, by: str | None = None) -> None:
    """Remove a member. ``by``: the human asking (anyone may leave; otherwise held to the team rule:
    owners and admins remove members, only an owner removes an owner); the CLI passes none."""
    async with db.write() as s:
        team, human = await _team(s, slug), await _human(s, handle)
        if by is not None and by != human.id:
            mine, current = await _acting_roles(s, team, by, human.id)
            if current == "owner" and mine != "owner":
                raise SwitchboardError("forbidden", "only a team owner may remove an owner")
        row = await s.get(Membership, (team.id, human.id))
        if row is None:
            raise not_found(f"{handle!r} in team {slug!r}")
        if row.role == "owner":
            await _keep_an_owner(s, team.id, human.id)
        await s.delete(row)


async def delete_team(db: Database, slug: str, *, human_id: str | None = None) -> Team:
    """Delete a team that owns nothing: its memberships go with it. A human must be one of its
    owners (a member or admin is refused); the instance operator passes no human. Refused, saying
    what, while any endpoint (revoked ones too: they keep the history of the team's todos) or
    connection still belongs to it."""
    async with db.write() as s:
        team = await _team(s, slug)
        if human_id is not None:
            role = await role_in(s, human_id, team.id)
            if role is None:
                raise not_found(f"team {slug!r}")
            if role != "owner":
                raise SwitchboardError("forbidden", f"only an owner of team {slug!r} may delete it")
        endpoints = (
            await s.execute(
                select(Endpoint.slug, Endpoint.state)
                .where(Endpoint.owner_team_id == team.id)
                .order_by(Endpoint.slug)
            )
        ).all()
        connections = list(
            (await s.scalars(select(Connection.name).where(Connection.owner_team_id == team.id))).all()
        )
        if endpoints or connections:
            held = []
            live = [e for e, state in endpoints if state == "active"]
            if live:
                held.append(f"{len(live)} active endpoint(s) ({_some(live)}): revoke them first")
            if len(live) < len(endpoints):
                held.append(
                    f"{len(endpoints) - len(live)} revoked endpoint(s), kept as the history of its todos"
                )
            if connections:
                held.append(
                    f"{len(connections)} connection(s) ({_some(sorted(connections))}): delete them first"
                )
            raise conflict(f"team {slug!r} still owns {'; '.join(held)}")
        # Memberships cascade in the schema; said here too so no engine setting decides it.
        await s.execute(delete(Membership).where(Membership.team_id == team.id))
        await s.delete(team)
    return team


def _some(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


async def _acting_roles(s: AsyncSession, team: Team, by: str, member_id: str) -> tuple[str, str | None]:
    """The asking human's role in the team (a manager's, else refused) and the member's (None: not
    one), read with their rows and the owners' locked in ``_keep_an_owner``'s order. Checked on a
    plain read (or the caller's roles as its request began), a change not yet committed was not
    seen: on PostgreSQL an admin's change then overwrote an owner's promotion of the same member,
    and an admin demoted or removed an owner."""
    rows = await s.execute(
        select(Membership.human_id, Membership.role)
        .where(
            Membership.team_id == team.id,
            or_(Membership.human_id.in_((by, member_id)), Membership.role == "owner"),
        )
        .order_by(Membership.human_id)
        .with_for_update()
    )
    roles: dict[str, str] = {human_id: role for human_id, role in rows.all()}
    mine = roles.get(by)
    if mine is None:
        raise not_found(f"team {team.slug!r}")
    if mine not in ("owner", "admin"):
        raise SwitchboardError(
            "forbidden", f"only the owners and admins of team {team.slug!r} manage its members"
        )
    return mine, roles.get(member_id)


async def _keep_an_owner(s: AsyncSession, team_id: str, leaving: str) -> None:
    # The team's owner rows locked, in one order (two owners going at once queue instead of
    # deadlocking): on PostgreSQL a plain read saw another owner's uncommitted leave or demotion as
    # not made, and two owners going at once left the team with none. SQLite serialises writes.
    owners = await s.scalars(
        select(Membership.human_id)
        .where(Membership.team_id == team_id, Membership.role == "owner")
        .order_by(Membership.human_id)
        .with_for_update()
    )
    if all(human_id == leaving for human_id in owners):
        raise conflict("a team must keep at least one owner")


# ---------------------------------------------------------------------------------------------
# Owner scopes and the team rule


async def resolve_owner(db: Database, *, human: str | None = None, team: str | None = None) -> Owner:
    """An owner scope from a human handle or a team slug (exactly one)."""
    if (human is None) == (team is None):
        raise invalid("name exactly one owner: a human handle or a team slug")
    async with db.read() as s:
        if human is not None:
            return Owner(human_id=(await _human(s, human)).id)
        return Owner(team_id=(await _team(s, team or "")).id)


async def role_in(s: AsyncSession, human_id: str, team_id: str) -> str | None:
    row = await s.get(Membership, (team_id, human_id))
    return row.role if row else None


async def can_manage(s: AsyncSession, human_id: str, owner: Owner) -> bool:
    """May this human manage the scope's endpoints, webhooks and connections?"""
    if owner.human_id is not None:
        return owner.human_id == human_id
    return await role_in(s, human_id, owner.team_id or "") in ("owner", "admin")


async def can_see(s: AsyncSession, human_id: str, owner: Owner) -> bool:
    if owner.human_id is not None:
        return owner.human_id == human_id
    return await role_in(s, human_id, owner.team_id or "") is not None


async def owner_label(s: AsyncSession, owner: Owner) -> str:
    if owner.human_id:
        handle = await s.scalar(select(Human.handle).where(Human.id == owner.human_id))
        return f"human:{handle}"
    slug = await s.scalar(select(Team.slug).where(Team.id == owner.team_id))
    return f"team:{slug}"
