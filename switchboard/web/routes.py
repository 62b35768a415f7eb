"""Routes into your endpoints from other scopes (a section of ``/ui/webhooks``), and withdrawing one.

A route from another scope's webhook was added with your scope's consent; its administrators may
withdraw it here, by the route's id. When you cannot see the webhook's scope the row names nothing
of that side — only your endpoint, the queue its todos arrive in and when the route was made — and
neither does a refusal.
"""

from __future__ import annotations

import logging

from aiohttp import web

from switchboard import routes
from switchboard.errors import not_found
from switchboard.services import services_of
from switchboard.tenancy import Owner
from switchboard.web.confirm import confirm_link, confirm_page
from switchboard.web.forms import ask_first, see_other
from switchboard.web.html import (
    EMPTY,
    Safe,
    h,
    hint,
    mono,
    muted,
    path_part,
    section,
    table,
    when,
)
from switchboard.web.session import Viewer, forbidden

log = logging.getLogger("switchboard.web")


def _row(viewer: Viewer, row: routes.RouteRow) -> Safe:
    source = viewer.scope_of(Owner.of(row.source))
    target = viewer.scope_of(Owner.of(row.target))
    withdraw = confirm_link(f"/ui/routes/{path_part(row.route.id)}/remove", "Withdraw")
    return h(
        '<tr><td class="mono">{id}</td><td>{endpoint}</td><td>{queue}</td><td>{source}</td>'
        "<td>{created}</td><td>{action}</td></tr>",
        id=row.route.id,
        endpoint=mono(row.target.slug),
        queue=row.webhook.queue,
        source=h("{w} ({label})", w=mono(row.webhook.id), label=source.label)
        if source is not None
        else muted("a webhook in another scope"),
        created=when(row.route.created_at),
        action=withdraw if target is not None and target.manage else EMPTY,
    )


async def incoming_section(request: web.Request, viewer: Viewer) -> Safe:
    """Routes into the viewer's endpoints from webhooks of another scope (a route inside one scope
    shows on its webhook's row already); nothing when there are none."""
    rows = [
        row
        for row in await routes.list_routes(
            services_of(request).db, into=[scope.owner for scope in viewer.scopes]
        )
        if Owner.of(row.source) != Owner.of(row.target)
    ]
    if not rows:
        return EMPTY
    return section(
        "Routes into your endpoints from other scopes",
        hint(
            "Deliveries to these webhooks also become todos for your endpoints. The administrators of "
            "the receiving scope may withdraw a route at any time."
        ),
        table(
            ("Route", "Your endpoint", "Queue", "From", "Since", ""),
            (_row(viewer, row) for row in rows),
        ),
    )


async def _visible(request: web.Request, viewer: Viewer) -> routes.RouteRow:
    """The route in the URL, if either end is in the viewer's scopes (else a 404 page, as for one
    that does not exist); the removal itself checks who may remove it."""
    route_id = request.match_info["route_id"]
    row = await routes.route_by_id(services_of(request).db, route_id)
    if row is None or not (viewer.scope_of(Owner.of(row.source)) or viewer.scope_of(Owner.of(row.target))):
        raise not_found(f"route {route_id!r}")
    return row


async def _removable(request: web.Request, viewer: Viewer) -> routes.RouteRow:
    """A visible route the viewer administers one end of (a member of either end gets 403)."""
    row = await _visible(request, viewer)
    ends = (viewer.scope_of(Owner.of(row.source)), viewer.scope_of(Owner.of(row.target)))
    if not any(scope is not None and scope.manage for scope in ends):
        raise forbidden("only administrators of either end may remove a route")
    return row


async def withdraw_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    row = await _removable(request, viewer)
    return confirm_page(
        viewer,
        question="Withdraw this route?",
        explain=h(
            "<p>Deliveries stop becoming todos for your endpoint <code>{e}</code> (queue {q}). Todos "
            "already made stay. Only the webhook's side can ask for the route again, and it needs your "
            "consent.</p>",
            e=row.target.slug,
            q=row.webhook.queue,
        ),
        action=f"/ui/routes/{path_part(row.route.id)}/remove",
        button="Yes, withdraw it",
        back="/ui/webhooks",
        active="webhooks",
    )


async def withdraw(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Remove a route by its id (administrators of either end; another scope's is a 404 page)."""
    if viewer.form.get("confirm") != "yes":
        # Without the confirmation page's yes, the browser goes there first and nothing changes
        # (the removal below checks again who may remove it).
        await _removable(request, viewer)
        ask_first(request, viewer)
    row = await routes.remove_route_by_id(
        services_of(request).db, request.match_info["route_id"], human_id=viewer.human_id
    )
    log.info("web: %s removed route %s", viewer.handle, row.route.id)
    raise see_other("/ui/webhooks", "route_removed")
