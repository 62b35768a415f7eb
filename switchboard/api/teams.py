"""``/teams``: the caller's teams and their members.

Any human may create a team (and owns it). Owners and admins run the membership; only an owner
makes an owner, changes an owner's role or removes one; anyone may leave. ``tenancy`` keeps a
team's last owner in place.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from switchboard import tenancy
from switchboard.api.openapi import TIMESTAMP, deleted, list_of, obj, ref
from switchboard.api.routing import Operation, Param, Request, page_query, paged
from switchboard.db import Database
from switchboard.errors import SwitchboardError, not_found
from switchboard.models import Human, Membership
from switchboard.owners import delete_team


async def _team_view(req: Request, slug: str) -> dict[str, Any]:
    for team in await tenancy.list_teams(req.services.db, req.caller.human.id):
        if team["slug"] == slug:
            return team
    raise not_found(f"team {slug!r}")


async def _member_role(db: Database, team_id: str, handle: str) -> str | None:
    async with db.read() as s:
        return await s.scalar(
            select(Membership.role)
            .join(Human, Human.id == Membership.human_id)
            .where(Membership.team_id == team_id, Human.handle == handle)
        )


async def list_my_teams(req: Request) -> tuple[int, dict[str, Any]]:
    teams = await tenancy.list_teams(req.services.db, req.caller.human.id)
    return 200, paged(req, "teams", teams, lambda t: t["id"], lambda t: t)


async def create_team(req: Request) -> tuple[int, dict[str, Any]]:
    team = await tenancy.add_team(req.services.db, req.body["slug"], req.caller.human.handle)
    return 201, {"team": await _team_view(req, team.slug)}


async def get_team(req: Request) -> tuple[int, dict[str, Any]]:
    return 200, {"team": await _team_view(req, req.path["slug"])}


async def put_member(req: Request) -> tuple[int, dict[str, Any]]:
    slug, handle = req.path["slug"], req.path["handle"]
    role = req.body.get("role", "member")
    scope = req.caller.team_scope(slug)
    req.caller.require_manage(scope, f"team {slug!r}")
    current = await _member_role(req.services.db, scope.team_id or "", handle)
    mine = req.caller.roles[scope.team_id or ""]
    # Admins run the membership; only owners make owners or change an owner's role.
    if mine != "owner" and ("owner" in (role, current)):
        raise SwitchboardError("forbidden", "only a team owner may grant or change the owner role")
    # Checked again by ``set_member`` with the rows locked: a change not yet committed (the member
    # made an owner meanwhile) is seen there, not here.
    await tenancy.set_member(req.services.db, slug, handle, role, by=req.caller.human.id)
    return 200, {"team": await _team_view(req, slug)}


async def delete_member(req: Request) -> tuple[int, dict[str, Any]]:
    slug, handle = req.path["slug"], req.path["handle"]
    scope = req.caller.team_scope(slug)
    leaving_self = handle == req.caller.human.handle
    if not leaving_self:
        req.caller.require_manage(scope, f"team {slug!r}")
        current = await _member_role(req.services.db, scope.team_id or "", handle)
        if current == "owner" and req.caller.roles[scope.team_id or ""] != "owner":
            raise SwitchboardError("forbidden", "only a team owner may remove an owner")
    await tenancy.remove_member(req.services.db, slug, handle, by=req.caller.human.id)
    if leaving_self:
        return 200, {"team": slug, "removed": handle}
    return 200, {"team": await _team_view(req, slug)}


async def remove_team(req: Request) -> tuple[int, dict[str, Any]]:
    slug = req.path["slug"]
    req.caller.team_scope(slug)  # another human's team is a 404, as if it did not exist
    await delete_team(req.services.db, slug, human_id=req.caller.human.id)
    return 200, {"team": slug, "deleted": True}


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/teams",
        "listTeams",
        "Teams the caller belongs to, with members, oldest first, one cursor page.",
        "teams",
        list_my_teams,
        "TeamList",
        query=page_query(),
    ),
    Operation(
        "POST",
        "/teams",
        "createTeam",
        "Create a team with the caller as its owner.",
        "teams",
        create_team,
        "TeamEnvelope",
        status=201,
        errors=(400, 401, 409),
        body=(Param("slug", "string", "Team slug, [a-z0-9][a-z0-9-]{0,62}.", required=True),),
    ),
    Operation(
        "GET",
        "/teams/{slug}",
        "getTeam",
        "One of the caller's teams, with members.",
        "teams",
        get_team,
        "TeamEnvelope",
    ),
    Operation(
        "DELETE",
        "/teams/{slug}",
        "deleteTeam",
        "Delete a team (its owners only) once it owns nothing: while it still owns endpoints (revoked "
        "ones too) or connections it is a 409 saying what.",
        "teams",
        remove_team,
        "TeamDeleted",
        errors=(400, 401, 403, 404, 409),
    ),
    Operation(
        "PUT",
        "/teams/{slug}/members/{handle}",
        "putTeamMember",
        "Add a member or change their role (team owners and admins; only owners grant owner).",
        "teams",
        put_member,
        "TeamEnvelope",
        errors=(400, 401, 403, 404, 409),
        body=(Param("role", "string", "Default member.", enum=tenancy.ROLES),),
    ),
    Operation(
        "DELETE",
        "/teams/{slug}/members/{handle}",
        "deleteTeamMember",
        "Remove a member (owners and admins; anyone may leave; a team keeps one owner).",
        "teams",
        delete_member,
        "TeamEnvelope",
        errors=(400, 401, 403, 404, 409),
    ),
)

SCHEMAS: dict[str, Any] = {
    "Team": obj(
        {
            "id": {"type": "string"},
            "slug": {"type": "string"},
            "created_at": TIMESTAMP,
            "members": {
                "type": "array",
                "items": obj(
                    {"handle": {"type": "string"}, "role": {"type": "string", "enum": list(tenancy.ROLES)}}
                ),
            },
        }
    ),
    "TeamEnvelope": obj(
        {"team": {"oneOf": [ref("Team"), {"type": "string"}]}, "removed": {"type": "string"}}, ["team"]
    ),
    "TeamList": list_of("teams", "Team"),
    "TeamDeleted": deleted("team", "team's slug"),
}
