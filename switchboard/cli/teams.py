"""``switchboard team``: teams and their members (roles owner, admin, member)."""

from __future__ import annotations

from typing import Any

import click

from switchboard import tenancy
from switchboard.cli.group import main
from switchboard.cli.output import emit, json_option, table
from switchboard.cli.pages import page_options, with_hint
from switchboard.cli.runner import do
from switchboard.paging import page_of
from switchboard.services import Services


@main.group("team")
def team_group() -> None:
    """Teams: a slug and members with roles owner, admin, member."""


@team_group.command("add")
@click.argument("slug")
@click.option(
    "--owner", "owner_handle", metavar="HANDLE", required=True, help="Handle of the team's first owner."
)
@json_option
def team_add(slug: str, owner_handle: str, as_json: bool) -> None:
    """Create a team with HANDLE as its owner."""

    async def go(services: Services) -> dict[str, Any]:
        team = await tenancy.add_team(services.db, slug, owner_handle)
        return {
            "id": team.id,
            "slug": team.slug,
            "created_at": team.created_at,
            "members": [{"handle": owner_handle, "role": "owner"}],
        }

    team = do(go)
    emit(as_json, {"team": team}, f"team {team['slug']} created ({team['id']}), owner {owner_handle}")


@team_group.command("list")
@page_options()
@json_option
def team_list(before: str | None, after: str | None, limit: int, as_json: bool) -> None:
    """List teams and their members, oldest first."""

    async def go(services: Services) -> list[dict[str, Any]]:
        return await tenancy.list_teams(services.db)

    page = page_of(do(go), lambda t: t["id"], before=before, after=after, limit=limit)
    teams = page.rows
    emit(
        as_json,
        page.answer("teams", teams),
        lambda: with_hint(
            table(
                [
                    [t["slug"], ", ".join(f"{m['handle']} ({m['role']})" for m in t["members"]) or "-"]
                    for t in teams
                ],
                "no teams",
            ),
            page,
        ),
    )


@team_group.group("member")
def team_member_group() -> None:
    """Add, re-role or remove team members."""


@team_member_group.command("add")
@click.argument("slug")
@click.argument("handle")
@click.option("--role", type=click.Choice(tenancy.ROLES), default="member", show_default=True)
@json_option
def team_member_add(slug: str, handle: str, role: str, as_json: bool) -> None:
    """Add HANDLE to team SLUG (or change their role)."""

    async def go(services: Services) -> None:
        await tenancy.set_member(services.db, slug, handle, role)

    do(go)
    emit(as_json, {"team": slug, "handle": handle, "role": role}, f"{handle} is {role} of team {slug}")


@team_member_group.command("remove")
@click.argument("slug")
@click.argument("handle")
@json_option
def team_member_remove(slug: str, handle: str, as_json: bool) -> None:
    """Remove HANDLE from team SLUG (a team always keeps at least one owner)."""

    async def go(services: Services) -> None:
        await tenancy.remove_member(services.db, slug, handle)

    do(go)
    emit(as_json, {"team": slug, "handle": handle, "removed": True}, f"{handle} removed from team {slug}")
