"""Teams (``/ui/teams``): the viewer's teams and members; create a team, add, change, remove.

Owners and admins manage members; only an owner makes, changes or removes an owner; anyone may
leave. ``tenancy`` keeps the last owner in place.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from switchboard import tenancy
from switchboard.errors import invalid, not_found
from switchboard.services import services_of
from switchboard.web.forms import see_other, shows_refusals
from switchboard.web.html import (
    EMPTY,
    FormRefusal,
    Safe,
    action_form,
    badge,
    card_form,
    dropdown,
    field,
    h,
    hidden,
    join,
    kept,
    listing_page,
    path_part,
    same,
    table,
)
from switchboard.web.session import Viewer, forbidden

MANAGERS = ("owner", "admin")


def member_row(viewer: Viewer, team: str, my_role: str, member: dict[str, Any]) -> Safe:
    handle, role = member["handle"], member["role"]
    leaving = handle == viewer.handle
    may_remove = leaving or (my_role in MANAGERS and (role != "owner" or my_role == "owner"))
    return h(
        '<tr><td class="mono">{handle}</td><td>{role}</td><td>{actions}</td></tr>',
        handle=handle,
        role=badge(role, "role"),
        actions=action_form(
            viewer,
            f"/ui/teams/{path_part(team)}/members/remove",
            "Leave" if leaving else "Remove",
            cls="danger",
            fields=hidden("handle", handle),
        )
        if may_remove
        else EMPTY,
    )


def team_section(viewer: Viewer, team: dict[str, Any]) -> Safe:
    scope = viewer.scope_by_key(f"team:{team['slug']}")
    my_role = scope.role if scope else "member"
    add = EMPTY
    if my_role in MANAGERS:
        roles = ("owner", "admin", "member") if my_role == "owner" else ("admin", "member")
        add = action_form(
            viewer,
            f"/ui/teams/{path_part(team['slug'])}/members",
            "Add or change member",
            fields=join(
                [
                    Safe('<input type="text" name="handle" placeholder="handle" aria-label="handle">'),
                    dropdown("role", same(roles), "member", aria_label="role"),
                ]
            ),
        )
    return h(
        '<section class="card"><h2>{slug}</h2><p class="muted">Your role: {role}</p>{members}<p>{add}</p>'
        "</section>",
        slug=team["slug"],
        role=my_role,
        members=table(
            ("Member", "Role", ""), (member_row(viewer, team["slug"], my_role, m) for m in team["members"])
        ),
        add=add,
    )


async def teams_page(request: web.Request, viewer: Viewer, refusal: FormRefusal | None) -> web.Response:
    teams = await tenancy.list_teams(services_of(request).db, viewer.human_id)
    create = card_form(
        viewer,
        "/ui/teams",
        join(
            [
                Safe("<h2>Create a team</h2>"),
                field(
                    "slug",
                    "Slug",
                    kept(refusal).get("slug", ""),
                    required=True,
                    maxlength=63,
                    placeholder="e.g. platform",
                    note="You become its owner.",
                ),
            ]
        ),
        "Create team",
    )
    return listing_page(
        request,
        viewer,
        refusal,
        title="Teams",
        intro="A team owns endpoints and connections together. Owners and admins manage them; members "
        "see them. Only owners can make or change owners.",
        create=create,
        sections=[team_section(viewer, t) for t in teams]
        or [Safe('<div class="empty">You are in no team yet.</div>')],
    )


@shows_refusals(teams_page, create_form=True)
async def team_create(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    await tenancy.add_team(services_of(request).db, viewer.form.get("slug", "").strip(), viewer.handle)
    raise see_other("/ui/teams", "team_created")


async def _roles(request: web.Request, viewer: Viewer, handle: str) -> tuple[str, str, str | None]:
    """The team in the URL, the viewer's role in it, and ``handle``'s current role (``None`` when
    not a member); a team the viewer is not in is a 404."""
    slug = request.match_info["slug"]
    scope = viewer.scope_by_key(f"team:{slug}")
    if scope is None:
        raise not_found(f"team {slug!r}")
    teams = await tenancy.list_teams(services_of(request).db, viewer.human_id)
    current = next(
        (m["role"] for t in teams if t["slug"] == slug for m in t["members"] if m["handle"] == handle),
        None,
    )
    return slug, scope.role, current


@shows_refusals(teams_page)
async def member_set(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    handle = viewer.form.get("handle", "").strip()
    role = viewer.form.get("role", "member")
    slug, my_role, current = await _roles(request, viewer, handle)
    if my_role not in MANAGERS:
        raise forbidden(f"only owners and admins of team {slug!r} manage its members")
    tenancy.check_handle(handle)
    if role not in tenancy.ROLES:
        raise invalid(f"role must be one of {', '.join(tenancy.ROLES)}")
    if my_role != "owner" and "owner" in (role, current):
        raise forbidden("only a team owner can make or change an owner")
    await tenancy.set_member(services_of(request).db, slug, handle, role)
    raise see_other("/ui/teams", "member_saved")


@shows_refusals(teams_page)
async def member_remove(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    handle = viewer.form.get("handle", "").strip()
    slug, my_role, current = await _roles(request, viewer, handle)
    if current is None:
        raise not_found(f"{handle!r} in team {slug!r}")
    leaving = handle == viewer.handle
    if not leaving and (my_role not in MANAGERS or (current == "owner" and my_role != "owner")):
        raise forbidden("only owners and admins remove members, and only owners remove owners")
    await tenancy.remove_member(services_of(request).db, slug, handle)
    raise see_other("/ui/teams", "member_removed")
