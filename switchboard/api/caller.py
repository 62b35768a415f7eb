"""Who is calling the operator API: the human behind a ``Bearer sbo_…`` token, and what they may
see and change.

A human sees their own scope and their teams' scopes. Anything outside them answers 404, exactly
like an id that does not exist, so ids cannot be probed. Inside a team's scope members read, and
owners and admins manage (a member who tries to change something gets 403).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from sqlalchemy import select

from switchboard import tenancy
from switchboard.bearers import bearer_token
from switchboard.errors import SwitchboardError, not_found
from switchboard.models import Human, Membership, Team
from switchboard.services import services_of
from switchboard.tenancy import Owner


class Unauthorized(Exception):
    """No valid human token on the request."""


@dataclass(frozen=True)
class Caller:
    human: Human
    # team id → the caller's role in it
    roles: dict[str, str]
    team_slugs: dict[str, str]

    @property
    def own(self) -> Owner:
        return Owner(human_id=self.human.id)

    @property
    def scopes(self) -> list[Owner]:
        return [self.own, *(Owner(team_id=t) for t in self.roles)]

    def sees(self, owner: Owner) -> bool:
        if owner.human_id is not None:
            return owner.human_id == self.human.id
        return owner.team_id in self.roles

    def manages(self, owner: Owner) -> bool:
        if owner.human_id is not None:
            return owner.human_id == self.human.id
        return self.roles.get(owner.team_id or "") in ("owner", "admin")

    def label(self, owner: Owner) -> str:
        if owner.human_id is not None:
            return f"human:{self.human.handle}" if owner.human_id == self.human.id else "human:?"
        return f"team:{self.team_slugs.get(owner.team_id or '', '?')}"

    def require_visible(self, owner: Owner, what: str) -> None:
        if not self.sees(owner):
            raise not_found(what)

    def require_manage(self, owner: Owner, what: str) -> None:
        """404 outside the caller's scopes (existence is never revealed), 403 for a team member."""
        self.require_visible(owner, what)
        if not self.manages(owner):
            raise SwitchboardError("forbidden", f"only the team's owners and admins may change {what}")

    def team_scope(self, slug: str) -> Owner:
        for team_id, team_slug in self.team_slugs.items():
            if team_slug == slug:
                return Owner(team_id=team_id)
        raise not_found(f"team {slug!r}")

    def write_scope(self, team: str | None, what: str) -> Owner:
        """The scope a new thing goes into: the caller's own, or a team they administer."""
        if team is None:
            return self.own
        owner = self.team_scope(team)
        if not self.manages(owner):
            raise SwitchboardError("forbidden", f"only the team's owners and admins may create {what}")
        return owner

    def read_scopes(self, team: str | None) -> list[Owner]:
        """The scopes a listing covers: the one team asked for, else all of the caller's."""
        return [self.team_scope(team)] if team is not None else self.scopes


async def authenticate(request: web.Request) -> Caller:
    """The caller behind the request's human token; ``Unauthorized`` without a valid one (an
    endpoint's ``sbk_`` token is not a human's)."""
    token = bearer_token(request.headers)
    human = None
    if token is not None:
        human = await tenancy.human_by_token(services_of(request).db, token)
    if human is None:
        raise Unauthorized
    async with services_of(request).db.read() as s:
        rows = (
            await s.execute(
                select(Membership.team_id, Membership.role, Team.slug)
                .join(Team, Team.id == Membership.team_id)
                .where(Membership.human_id == human.id)
            )
        ).all()
    return Caller(human, {t: r for t, r, _ in rows}, {t: slug for t, _, slug in rows})
