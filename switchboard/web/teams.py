"""Teams (``/ui/teams``): the viewer's teams and members; create a team, add, change, remove
(after a confirmation), and delete a team that owns nothing.

Owners and admins manage members; only an owner makes, changes or removes an owner, or deletes the
team; anyone may leave. ``tenancy`` keeps the last owner in place; ``owners.delete_team`` refuses,
saying what, while the team still owns endpoints or connections.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from switchboard import tenancy
from switchboard.errors import invalid, not_found
from switchboard.owners import delete_team
from switchboard.services import services_of
from switchboard.web.confirm import confirm_link, confirm_page
from switchboard.web.forms import ask_first, see_other, shows_refusals
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
        actions=confirm_link(
            f"/ui/teams/{path_part(team)}/members/remove?{urlencode({'handle': handle})}",
            "Leave" if leaving else "Remove",
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
    delete = (
        h("<p>{link}</p>", link=confirm_link(f"/ui/teams/{path_part(team['slug'])}/delete", "Delete team"))
        if my_role == "owner"
        else EMPTY
    )
    return h(
        '<section class="card"><h2>{slug}</h2><p class="muted">Your role: {role}</p>{members}<p>{add}</p>'
        "{delete}</section>",
        slug=team["slug"],
        role=my_role,
        delete=delete,
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
    # Checked again by ``set_member`` with the rows locked (a change not yet committed is seen there).
    await tenancy.set_member(services_of(request).db, slug, handle, role, by=viewer.human_id)
    raise see_other("/ui/teams", "member_saved")


async def _removable(request: web.Request, viewer: Viewer, handle: str) -> tuple[str, bool]:
    """The team in the URL and whether the viewer is leaving it, if they may remove ``handle``."""
    slug, my_role, current = await _roles(request, viewer, handle)
    if current is None:
        raise not_found(f"{handle!r} in team {slug!r}")
    leaving = handle == viewer.handle
    if not leaving and (my_role not in MANAGERS or (current == "owner" and my_role != "owner")):
        raise forbidden("only owners and admins remove members, and only owners remove owners")
    return slug, leaving


@shows_refusals(teams_page)
async def member_remove_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    handle = request.query.get("handle", "").strip()
    slug, leaving = await _removable(request, viewer, handle)
    explain = (
        h(
            "<p>You leave team <strong>{t}</strong>: its endpoints, webhooks, connections and todos "
            "disappear from your pages. Only its owners and admins can add you again.</p>",
            t=slug,
        )
        if leaving
        else h(
            "<p><strong>{who}</strong> leaves team <strong>{t}</strong> and no longer sees or manages "
            "anything of it.</p>",
            who=handle,
            t=slug,
        )
    )
    return confirm_page(
        viewer,
        question=f"Leave team {slug}?" if leaving else f"Remove {handle} from team {slug}?",
        explain=explain,
        action=f"/ui/teams/{path_part(slug)}/members/remove",
        button="Yes, leave" if leaving else "Yes, remove",
        back="/ui/teams",
        active="teams",
        fields=hidden("handle", handle),
    )


@shows_refusals(teams_page)
async def member_remove(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    handle = viewer.form.get("handle", "").strip()
    slug, _ = await _removable(request, viewer, handle)
    ask_first(request, viewer, ("handle",))
    await tenancy.remove_member(services_of(request).db, slug, handle, by=viewer.human_id)
    raise see_other("/ui/teams", "member_removed")


def _owned_team(viewer: Viewer, slug: str) -> str:
    scope = viewer.scope_by_key(f"team:{slug}")
    if scope is None:
        raise not_found(f"team {slug!r}")
    if scope.role != "owner":
        raise forbidden(f"only an owner of team {slug!r} may delete it")
    return slug


@shows_refusals(teams_page)
async def team_delete_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    slug = _owned_team(viewer, request.match_info["slug"])
    return confirm_page(
        viewer,
        question=f"Delete team {slug}?",
        explain=h(
            "<p>Team <strong>{t}</strong> and its memberships are deleted. A team is deleted only once it "
            "owns nothing: revoke its endpoints and delete its connections first (the next page says "
            "what is left, if anything). This cannot be undone.</p>",
            t=slug,
        ),
        action=f"/ui/teams/{path_part(slug)}/delete",
        button="Yes, delete it",
        back="/ui/teams",
        active="teams",
    )


@shows_refusals(teams_page)
async def team_delete(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    slug = _owned_team(viewer, request.match_info["slug"])
    ask_first(request, viewer)
    await delete_team(services_of(request).db, slug, human_id=viewer.human_id)
    raise see_other("/ui/teams", "team_deleted")
