"""Endpoints (``/ui/endpoints``): list, vend with a one-time token reveal, revoke.

The vend form offers the optional verb families unchecked, and flags the connection verbs as
handing the agent the owner's outbound credentials. The ``sbk_`` token exists in exactly one
response, the reveal page; afterwards only its display prefix is shown.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web

from switchboard import tenancy
from switchboard.models import Endpoint
from switchboard.services import services_of
from switchboard.tenancy import Owner
from switchboard.web.forms import int_field, list_field, see_other, shows_refusals
from switchboard.web.html import (
    EMPTY,
    FormRefusal,
    Safe,
    action_form,
    badge,
    card_form,
    checkbox,
    field,
    h,
    join,
    kept,
    listing_page,
    mono,
    owner_picker,
    path_part,
    reveal_page,
    section,
    table,
    when,
)
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


def endpoint_row(viewer: Viewer, e: Endpoint, manage: bool) -> Safe:
    return h(
        '<tr><td>{slug}<div class="muted">{name}</div></td>'
        '<td class="mono">{prefix}</td><td>{queues}</td><td>{families}</td><td>{state}</td>'
        "<td>{expires}</td><td>{actions}</td></tr>",
        slug=mono(e.slug),
        name=e.name,
        prefix=e.token_display,
        queues=", ".join(e.queues),
        families=families_cell(e.verbs),
        state=badge(e.state),
        expires=when(e.expires_at),
        actions=action_form(viewer, f"/ui/endpoints/{path_part(e.slug)}/revoke", "Revoke", cls="danger")
        if manage and e.state == "active"
        else EMPTY,
    )


async def endpoints_page(request: web.Request, viewer: Viewer, refusal: FormRefusal | None) -> web.Response:
    services = services_of(request)
    sections = []
    for scope in viewer.scopes:
        endpoints = await tenancy.list_endpoints(services.db, scope.owner)
        sections.append(
            section(
                scope.label,
                table(
                    ("Endpoint", "Token", "Queues", "Verb families", "State", "Expires", ""),
                    (endpoint_row(viewer, e, scope.manage) for e in endpoints),
                    empty="No endpoints.",
                ),
            )
        )
    return listing_page(
        request,
        viewer,
        refusal,
        title="Endpoints",
        intro="An endpoint is an agent's identity and grant. Revoking kills its token at once and "
        "dead-letters its open todos.",
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
    mcp_url = f"{services.settings.base_url.rstrip('/')}/mcp"
    return reveal_page(
        viewer,
        title="Endpoint token",
        heading=f"Endpoint {endpoint.slug} is ready",
        active="endpoints",
        lead="Copy this token now. It is shown only this once",
        detail="Switchboard keeps only its hash. If you lose it, revoke the endpoint and vend a new one.",
        content=h(
            '<code class="secret">{token}</code>'
            "<h3>Connect an agent</h3><pre>claude mcp add --transport http {slug} {mcp} \\\n"
            '  --header "Authorization: Bearer {token}"</pre>',
            slug=endpoint.slug,
            token=token,
            mcp=mcp_url,
        ),
        facts=[
            ("owner", scope.label),
            ("queues", ", ".join(endpoint.queues)),
            ("verbs", ", ".join(endpoint.verbs)),
            ("expires", when(endpoint.expires_at)),
        ],
    )


@shows_refusals(endpoints_page)
async def revoke(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    slug = request.match_info["slug"]
    async with services.db.read() as s:
        endpoint = await viewer.endpoint(s, slug)
    viewer.managing(Owner.of(endpoint), "revoke it")
    await tenancy.revoke_endpoint(services.db, slug)
    log.info("web: %s revoked endpoint %s", viewer.handle, slug)
    # Close its live MCP sessions now rather than at the next revocation pass (every MCP request
    # re-checks the token in any case).
    await services.endpoints_revoked([endpoint.id])
    raise see_other("/ui/endpoints", "revoked")
