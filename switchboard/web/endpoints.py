"""Endpoints (``/ui/endpoints``): list with their health, vend with a one-time token reveal,
revoke after a confirmation.

The vend form offers the optional verb families unchecked, and flags the connection verbs as
handing the agent the owner's outbound credentials. The ``sbk_`` token is shown once, on the
reveal page the vend redirects to (``once``); afterwards only its display prefix is shown.

Health at a glance: each endpoint's last activity (claim, heartbeat or end of an attempt), its
pending todos and how long the oldest has waited, and the MCP sessions this server process holds
for it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from aiohttp import web
from sqlalchemy import func, select

from switchboard import tenancy
from switchboard.db import rfc3339, utcnow
from switchboard.health import EndpointHealth, endpoint_health
from switchboard.models import Endpoint, Todo
from switchboard.services import services_of
from switchboard.tenancy import Owner
from switchboard.web.confirm import confirm_link, confirm_page
from switchboard.web.forms import ask_first, int_field, list_field, see_other, shows_refusals
from switchboard.web.html import (
    EMPTY,
    FormRefusal,
    Safe,
    badge,
    card_form,
    checkbox,
    error_page,
    field,
    h,
    join,
    kept,
    listing_page,
    mono,
    muted,
    owner_picker,
    page,
    path_part,
    reveal_page,
    section,
    table,
    when,
)
from switchboard.web.once import gone_page_text, put_reveal, take_reveal
from switchboard.web.session import Viewer

log = logging.getLogger("switchboard.web")

CONNECTIONS_FLAG = Safe('<span class="flag">⚠ hands the agent the owner\'s outbound credentials</span>')


def vend_form(viewer: Viewer, form: Mapping[str, str]) -> Safe:
    fields = join(
        [
            field(
                "name",
                "Name",
                form.get("name", ""),
                required=True,
                maxlength=200,
                placeholder="e.g. triage-bot",
            ),
            owner_picker(viewer, form.get("owner", "me")),
            field(
                "queues",
                "Queues",
                form.get("queues", "default"),
                note="Comma-separated; the first is the default queue.",
            ),
            Safe(
                "<label>Verbs</label>"
                '<label class="check"><input type="checkbox" checked disabled> <span>'
                "<strong>Basics</strong>: list, get, claim, heartbeat, complete, fail, release "
                "(always granted)</span></label>"
            ),
            # Both optional families start unchecked; a form coming back with an error keeps the choice.
            checkbox(
                "reply",
                Safe(
                    "<strong>reply</strong>: post text publicly into the conversation a todo came from, "
                    "with the owner's connection"
                ),
                form.get("reply") == "on",
            ),
            checkbox(
                "connection_verbs",
                h(
                    "<strong>Connection verbs</strong> (list, create, rotate, delete connections) — {flag}: "
                    "it can manage the credentials replies are posted with (it never sees a secret).",
                    flag=CONNECTIONS_FLAG,
                ),
                form.get("connection_verbs") == "on",
            ),
            *(
                field(name, label, form.get(name, default), type_="number", min=1, max=top)
                for name, label, default, top in (
                    ("expires_in_days", "Expires in days (optional)", "", 3650),
                    ("default_lease_seconds", "Default lease (seconds)", "300", 86400),
                )
            ),
        ]
    )
    return card_form(
        viewer,
        "/ui/endpoints",
        fields,
        "Vend endpoint",
        after=Safe(
            '<p class="hint">The token is shown once, on the next page. Grants never widen; to change '
            "them, vend a new endpoint.</p>"
        ),
    )


def families_cell(verbs: list[str]) -> Safe:
    return join(
        h("{f} ", f=f)
        if f != "connections"
        else h('<span class="flag" title="holds the owner\'s outbound credentials">{f}</span> ', f=f)
        for f in tenancy.families_of(verbs)
    )


def age(since: datetime) -> str:
    """How long ago, in one rough unit (the exact time is in the tooltip)."""
    seconds = max(0, int((utcnow() - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def health_cell(health: EndpointHealth, sessions: int | None) -> Safe:
    """Last activity, live MCP sessions (this server process's), and the pending backlog's age."""
    activity = when(health.last_activity_at) if health.last_activity_at else muted("never")
    if health.pending and health.oldest_pending_at is not None:
        waiting = h(
            '{n} pending, oldest <span title="{at} UTC">{age}</span>',
            n=f"{health.pending:,}",
            at=rfc3339(health.oldest_pending_at),
            age=age(health.oldest_pending_at),
        )
    else:
        waiting = muted("nothing pending")
    live = (
        muted("sessions unknown")
        if sessions is None
        else h("{n} live MCP session{s}", n=sessions, s="" if sessions == 1 else "s")
    )
    return h(
        '<div class="nowrap"><span class="muted">last activity</span> {activity}</div>'
        "<div>{live}</div><div>{waiting}</div>",
        activity=activity,
        live=live,
        waiting=waiting,
    )


def endpoint_row(
    viewer: Viewer, e: Endpoint, manage: bool, health: EndpointHealth, sessions: int | None
) -> Safe:
    return h(
        '<tr><td>{slug}<div class="muted">{name}</div></td>'
        '<td class="mono">{prefix}</td><td>{queues}</td><td>{families}</td><td>{state}</td>'
        "<td>{health}</td><td>{expires}</td><td>{actions}</td></tr>",
        slug=mono(e.slug),
        name=e.name,
        prefix=e.token_display,
        queues=", ".join(e.queues),
        families=families_cell(e.verbs),
        state=badge(e.state),
        health=health_cell(health, sessions),
        expires=when(e.expires_at),
        actions=confirm_link(f"/ui/endpoints/{path_part(e.slug)}/revoke", "Revoke")
        if manage and e.state == "active"
        else EMPTY,
    )


async def endpoints_page(request: web.Request, viewer: Viewer, refusal: FormRefusal | None) -> web.Response:
    services = services_of(request)
    listed = [(scope, await tenancy.list_endpoints(services.db, scope.owner)) for scope in viewer.scopes]
    health = await endpoint_health(services.db, (e.id for _, endpoints in listed for e in endpoints))
    live = services.live_sessions() if services.live_sessions is not None else None
    sections = [
        section(
            scope.label,
            table(
                ("Endpoint", "Token", "Queues", "Verb families", "State", "Health", "Expires", ""),
                (
                    endpoint_row(
                        viewer,
                        e,
                        scope.manage,
                        health.get(e.id, EndpointHealth()),
                        None if live is None else live.get(e.id, 0),
                    )
                    for e in endpoints
                ),
                empty="No endpoints.",
            ),
        )
        for scope, endpoints in listed
    ]
    return listing_page(
        request,
        viewer,
        refusal,
        title="Endpoints",
        intro="An endpoint is an agent's identity and grant. Health: its last claim, heartbeat or result, "
        "the MCP sessions this server holds for it, and how long its oldest pending todo has waited. "
        "Revoking kills its token at once and dead-letters its open todos.",
        create=vend_form(viewer, kept(refusal)),
        create_label="Vend an endpoint",
        sections=sections,
    )


@shows_refusals(endpoints_page, create_form=True)
async def vend(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    form = viewer.form
    scope = viewer.managed_scope(form.get("owner", "me"))
    boxes = (("reply", "reply"), ("connections", "connection_verbs"))
    families = [family for family, box in boxes if form.get(box) == "on"]
    endpoint, token = await tenancy.vend_endpoint(
        services.db,
        name=form.get("name", ""),
        owner=scope.owner,
        queues=list_field(form, "queues"),
        families=families,
        expires_in_days=int_field(form, "expires_in_days", "expires in days", None),
        default_lease_seconds=int_field(form, "default_lease_seconds", "default lease", 300) or 0,
        max_per_owner=services.settings.max_endpoints_per_owner,
    )
    log.info("web: %s vended endpoint %s", viewer.handle, endpoint.slug)
    # Shown once by the page this redirects to: a reload there cannot vend again, nor show it again.
    await put_reveal(
        request,
        viewer,
        "endpoint",
        {
            "token": token,
            "slug": endpoint.slug,
            "owner": scope.label,
            "queues": endpoint.queues,
            "verbs": endpoint.verbs,
            "expires": rfc3339(endpoint.expires_at) if endpoint.expires_at else None,
        },
    )
    raise see_other("/ui/endpoints/token")


async def reveal(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The new endpoint's token, once (``once``); a reload has nothing to show."""
    shown = await take_reveal(request, viewer, "endpoint")
    if shown is None:
        body = h(
            '<h1>Nothing to show</h1><p>{text}</p><p><a href="/ui/endpoints">Endpoints</a></p>',
            text=gone_page_text("endpoint token", "revoke that endpoint and vend a new one"),
        )
        return page("Endpoint token", body, viewer, active="endpoints", status=410)
    mcp_url = f"{services_of(request).settings.base_url.rstrip('/')}/mcp"
    return reveal_page(
        viewer,
        title="Endpoint token",
        heading=f"Endpoint {shown['slug']} is ready",
        active="endpoints",
        lead="Copy this token now. It is shown only this once",
        detail="Switchboard keeps only its hash. If you lose it, revoke the endpoint and vend a new one.",
        content=h(
            '<code class="secret">{token}</code>'
            "<h3>Connect an agent</h3><pre>claude mcp add --transport http {slug} {mcp} \\\n"
            '  --header "Authorization: Bearer {token}"</pre>',
            slug=shown["slug"],
            token=shown["token"],
            mcp=mcp_url,
        ),
        facts=[
            ("owner", shown["owner"]),
            ("queues", ", ".join(shown["queues"])),
            ("verbs", ", ".join(shown["verbs"])),
            ("expires", when(shown["expires"])),
        ],
    )


async def _managed_endpoint(request: web.Request, viewer: Viewer) -> Endpoint:
    async with services_of(request).db.read() as s:
        endpoint = await viewer.endpoint(s, request.match_info["slug"])
    viewer.managing(Owner.of(endpoint), "revoke it")
    return endpoint


async def revoke_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    endpoint = await _managed_endpoint(request, viewer)
    if endpoint.state != "active":
        return error_page(viewer, 409, f"Endpoint {endpoint.slug} is already revoked.", "Conflict")
    async with services_of(request).db.read() as s:
        open_todos = await s.scalar(
            select(func.count())
            .select_from(Todo)
            .where(
                Todo.endpoint_id == endpoint.id,
                Todo.state.in_(("pending", "claimed", "failed")),
                # What ``revoke_endpoint`` dead-letters: its dead letters already are, and stay.
                Todo.dead_letter.is_(False),
            )
        )
    return confirm_page(
        viewer,
        question=f"Revoke endpoint {endpoint.slug}?",
        explain=h(
            "<p>Its token stops working at once and its MCP sessions close. Its <strong>{n}</strong> open "
            "todo(s) are dead-lettered, and its webhooks answer 503 until they deliver elsewhere. This "
            "cannot be undone: to go on, vend a new endpoint.</p>",
            n=f"{open_todos or 0:,}",
        ),
        action=f"/ui/endpoints/{path_part(endpoint.slug)}/revoke",
        button="Yes, revoke it",
        back="/ui/endpoints",
        active="endpoints",
    )


@shows_refusals(endpoints_page)
async def revoke(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    slug = request.match_info["slug"]
    endpoint = await _managed_endpoint(request, viewer)
    ask_first(request, viewer)
    await tenancy.revoke_endpoint(services.db, slug)
    log.info("web: %s revoked endpoint %s", viewer.handle, slug)
    # Close its live MCP sessions now rather than at the next revocation pass (every MCP request
    # re-checks the token in any case).
    await services.endpoints_revoked([endpoint.id])
    raise see_other("/ui/endpoints", "revoked")
