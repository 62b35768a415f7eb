"""Webhooks (``/ui/webhooks``): create with a one-time reveal, rotate, set a provider's secret,
routes, delete.

The ingest URL and a minted ``whsec_`` secret appear only on the reveal page answering the POST
that made them (create, rotate). A provider-issued secret is typed into a password field and never
shown back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from switchboard import tenancy
from switchboard.errors import invalid
from switchboard.models import Endpoint, Webhook
from switchboard.services import Services, services_of
from switchboard.tenancy import Owner
from switchboard.web.forms import changes, shows_refusals
from switchboard.web.html import (
    EMPTY,
    MUTED_DASH,
    FormRefusal,
    Safe,
    action_form,
    badge,
    card_form,
    dropdown,
    h,
    hidden,
    join,
    kept,
    listing_page,
    mono,
    path_part,
    reveal_page,
    same,
    section,
    table,
)
from switchboard.web.routes import incoming_section
from switchboard.web.session import Viewer

log = logging.getLogger("switchboard.web")

# How a source kind's signing secret comes to be, as the create form's kind picker says it.
SECRET_HOW = {
    "minted": "signed, secret minted here",
    "provider": "signed, provider's secret",
    "none": "unsigned",
}
# A webhook's secret state: its badge text and class.
SECRET_STATE = {
    "set": ("secret set", "ok"),
    "awaiting": ("awaiting secret", "claimed"),
    "none": ("no secret", "trust"),
}
ROUTE_INPUT = Safe(
    '<input type="text" name="endpoint" placeholder="endpoint slug" aria-label="route to endpoint">'
)
PROVIDER_SECRET_INPUT = Safe(
    '<input type="password" name="secret" autocomplete="off" '
    'placeholder="provider\'s signing secret" aria-label="signing secret">'
)


def webhook_actions(viewer: Viewer, w: Mapping[str, Any], secret_kind: str) -> Safe:
    base = f"/ui/webhooks/{path_part(str(w['id']))}"
    parts: list[Safe] = []
    if secret_kind == "minted":
        parts.append(action_form(viewer, f"{base}/rotate", "Rotate secret"))
    elif secret_kind == "provider":
        parts.append(
            action_form(
                viewer,
                f"{base}/secret",
                "Set secret" if w.get("secret_state") == "awaiting" else "Replace secret",
                fields=PROVIDER_SECRET_INPUT,
            )
        )
    parts.append(action_form(viewer, f"{base}/routes", "Add route", fields=ROUTE_INPUT))
    parts.append(action_form(viewer, f"{base}/delete", "Delete", cls="danger"))
    return h('<div class="actions">{p}</div>', p=join(parts))


def routes_cell(viewer: Viewer, w: Mapping[str, Any], manage: bool) -> Safe:
    routes = w.get("routes") or []
    if not routes:
        return MUTED_DASH
    action = f"/ui/webhooks/{path_part(str(w['id']))}/routes/remove"
    return join(
        h(
            "<div>{slug}{remove}</div>",
            slug=mono(slug),
            remove=h(
                " {form}",
                form=action_form(viewer, action, "remove", cls="danger", fields=hidden("endpoint", slug)),
            )
            if manage
            else EMPTY,
        )
        for slug in routes
    )


def webhook_row(viewer: Viewer, services: Services, w: Mapping[str, Any], manage: bool) -> Safe:
    sources = services.providers.sources
    state_text, state_cls = SECRET_STATE.get(str(w["secret_state"]), (str(w["secret_state"]), ""))
    return h(
        '<tr><td class="mono">{id}</td><td>{endpoint}<div class="muted">queue {queue}</div></td>'
        '<td>{source}</td><td>{trust} {secret}</td><td class="mono">{prefix}</td><td>{routes}</td>'
        "<td>{actions}</td></tr>",
        id=w["id"],
        endpoint=mono(w["endpoint"]),
        queue=w["queue"],
        source=w["source"],
        trust=badge(str(w["trust_mode"]), "trust"),
        secret=badge(state_text, state_cls),
        prefix=w["ingest_token_prefix"],
        routes=routes_cell(viewer, w, manage),
        actions=webhook_actions(viewer, w, sources[w["source"]].secret if w["source"] in sources else "none")
        if manage
        else EMPTY,
    )


def create_form(
    services: Services, viewer: Viewer, live_managed: list[Endpoint], form: Mapping[str, str]
) -> Safe:
    if not live_managed:
        return Safe(
            '<section class="card"><p class="muted">Vend an endpoint you manage first; a webhook delivers '
            "into one of its queues.</p></section>"
        )
    sources = services.providers.sources
    return card_form(
        viewer,
        "/ui/webhooks",
        h(
            '<label for="endpoint">Endpoint</label>{endpoints}'
            '<label for="source">Source kind</label>{sources}'
            '<label for="queue">Queue (optional)</label>'
            '<input type="text" id="queue" name="queue" value="{queue}">'
            '<p class="hint">The ingest URL, and for GitHub, Gitea and Cairn the signing secret, are shown '
            "once on the next page. For Slack and Stripe, paste the provider's signing secret afterwards; "
            "until then deliveries are refused. Generic webhooks are unsigned: the URL is the only "
            "protection.</p>",
            endpoints=dropdown(
                "endpoint", same(e.slug for e in live_managed), form.get("endpoint"), id_="endpoint"
            ),
            sources=dropdown(
                "source",
                [
                    (name, f"{name} ({SECRET_HOW.get(kind.secret, kind.secret)})")
                    for name, kind in sorted(sources.items())
                ],
                form.get("source"),
                id_="source",
            ),
            queue=form.get("queue", ""),
        ),
        "Create webhook",
    )


async def webhooks_page(request: web.Request, viewer: Viewer, refusal: FormRefusal | None) -> web.Response:
    services = services_of(request)
    sections = []
    live_managed: list[Endpoint] = []
    for scope in viewer.scopes:
        if scope.manage:
            endpoints = await tenancy.list_endpoints(services.db, scope.owner)
            live_managed += [e for e in endpoints if tenancy.endpoint_is_live(e)]
        hooks = await tenancy.list_webhooks(services.db, owner=scope.owner)
        sections.append(
            section(
                scope.label,
                table(
                    ("Webhook", "Endpoint", "Source", "Trust", "Ingest URL", "Routes", ""),
                    (webhook_row(viewer, services, w, scope.manage) for w in hooks),
                    empty="No webhooks.",
                ),
            )
        )
    sections.append(await incoming_section(request, viewer))
    return listing_page(
        request,
        viewer,
        refusal,
        title="Webhooks",
        intro="Each webhook is an ingest URL owned by one endpoint; routes fan its deliveries out to more "
        "endpoints. Secrets and ingest URLs are never shown again after creation.",
        create=create_form(services, viewer, live_managed, kept(refusal)),
        # With no endpoint to deliver into, the page says so in plain sight instead of a fold.
        create_label="Create a webhook" if live_managed else None,
        sections=sections,
    )


def webhook_reveal(
    viewer: Viewer,
    services: Services,
    *,
    heading: str,
    webhook: Webhook,
    endpoint_slug: str,
    ingest_token: str | None,
    secret: str | None,
) -> web.Response:
    kind = services.providers.sources.get(webhook.source)
    parts: list[Safe] = []
    if ingest_token is not None:
        parts.append(
            h(
                "<h3>Ingest URL</h3><p>Configure the provider to POST to:</p>"
                '<code class="secret">{url}</code>',
                url=tenancy.ingest_url(services.settings.base_url, ingest_token),
            )
        )
    if secret is not None:
        parts.append(
            h(
                "<h3>Signing secret</h3><p>Give the provider this secret; deliveries are verified "
                'against it.</p><code class="secret">{secret}</code>',
                secret=secret,
            )
        )
    elif kind is not None and kind.secret == "provider":
        parts.append(
            Safe(
                "<p>This kind's signing secret is issued by the provider. Paste it on the "
                '<a href="/ui/webhooks">webhooks page</a>; deliveries are refused until then.</p>'
            )
        )
    elif kind is not None and kind.secret == "none":
        parts.append(Safe("<p>Unsigned webhook: anyone holding the URL can deliver. Keep it private.</p>"))
    return reveal_page(
        viewer,
        title=heading,
        heading=heading,
        active="webhooks",
        lead="Copy this now. It is shown only this once",
        detail="Switchboard keeps only a hash of the URL and an encrypted copy of the secret.",
        content=join(parts),
        facts=[
            ("webhook", mono(webhook.id)),
            ("endpoint", endpoint_slug),
            ("source", webhook.source),
            ("queue", webhook.queue),
        ],
    )


@shows_refusals(webhooks_page, create_form=True)
async def webhook_create(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    slug = viewer.form.get("endpoint", "")
    async with services.db.read() as s:
        endpoint = await viewer.endpoint(s, slug)
    viewer.managing(Owner.of(endpoint), "add webhooks to its endpoints")
    created = await tenancy.create_webhook(
        services.db,
        services.vault,
        services.providers,
        endpoint_slug=slug,
        source=viewer.form.get("source", ""),
        queue=viewer.form.get("queue", "").strip() or None,
    )
    log.info("web: %s created webhook %s on %s", viewer.handle, created.webhook.id, slug)
    return webhook_reveal(
        viewer,
        services,
        heading="Webhook created",
        webhook=created.webhook,
        endpoint_slug=slug,
        ingest_token=created.ingest_token,
        secret=created.secret,
    )


async def managed_webhook(request: web.Request, viewer: Viewer) -> tuple[Webhook, Endpoint]:
    """The webhook in the URL and its endpoint, if the viewer may manage it."""
    async with services_of(request).db.read() as s:
        webhook, endpoint = await viewer.owned(s, Webhook, request.match_info["webhook_id"], "webhook")
    viewer.managing(Owner.of(endpoint), "change its webhooks")
    return webhook, endpoint


webhook_change = changes(webhooks_page, "/ui/webhooks", managed_webhook)


@shows_refusals(webhooks_page)
async def webhook_rotate(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    webhook, endpoint = await managed_webhook(request, viewer)
    secret = await tenancy.rotate_webhook_secret(services.db, services.vault, services.providers, webhook.id)
    log.info("web: %s rotated webhook %s", viewer.handle, webhook.id)
    return webhook_reveal(
        viewer,
        services,
        heading="Webhook secret rotated",
        webhook=webhook,
        endpoint_slug=endpoint.slug,
        ingest_token=None,
        secret=secret,
    )


@webhook_change
async def webhook_set_secret(request: web.Request, viewer: Viewer, found: tuple[Webhook, Endpoint]) -> str:
    services, webhook = services_of(request), found[0]
    await tenancy.set_webhook_secret(
        services.db, services.vault, services.providers, webhook.id, viewer.form.get("secret", "")
    )
    log.info("web: %s set the secret of webhook %s", viewer.handle, webhook.id)
    return "secret_set"


@webhook_change
async def webhook_delete(request: web.Request, viewer: Viewer, found: tuple[Webhook, Endpoint]) -> str:
    webhook = found[0]
    await tenancy.delete_webhook(services_of(request).db, webhook.id)
    log.info("web: %s deleted webhook %s", viewer.handle, webhook.id)
    return "webhook_deleted"


@webhook_change
async def route_add(request: web.Request, viewer: Viewer, found: tuple[Webhook, Endpoint]) -> str:
    services, webhook = services_of(request), found[0]
    slug = viewer.form.get("endpoint", "").strip()
    if not slug:
        raise invalid("name the endpoint to route to")
    async with services.db.read() as s:
        # An endpoint the viewer cannot see does not exist, as far as they can tell.
        await viewer.endpoint(s, slug)
    await tenancy.add_route(services.db, webhook.id, slug, consenting_human_id=viewer.human_id)
    return "route_added"


@webhook_change
async def route_remove(request: web.Request, viewer: Viewer, found: tuple[Webhook, Endpoint]) -> str:
    slug = viewer.form.get("endpoint", "").strip()
    await tenancy.remove_route(services_of(request).db, found[0].id, slug)
    return "route_removed"
