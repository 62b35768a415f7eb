"""Webhooks (``/ui/webhooks``): the list with each webhook's health, the create form, and the one
page that shows a new ingest URL or signing secret.

Creating a webhook or rotating its secret seals what must be shown once onto the session
(``once``) and redirects to ``/ui/webhooks/new``, which shows it once: reloading that page neither
shows it again nor creates or rotates again. A provider-issued secret is typed into a password
field and never shown back. The per-webhook actions are in ``webhook_actions``.

Health at a glance: when the newest delivery was stored, the refusals of the last day by reason
(the delivery log's refusal rows, every server process's), whether it is paused, and until when a
rotated-away secret is still accepted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from switchboard import intake_config, quarantine, tenancy
from switchboard.health import WebhookHealth, webhook_health
from switchboard.models import Endpoint, Webhook
from switchboard.services import Services, services_of
from switchboard.tenancy import Owner
from switchboard.web.confirm import confirm_link
from switchboard.web.forms import see_other, shows_refusals
from switchboard.web.html import (
    EMPTY,
    MUTED_DASH,
    FormRefusal,
    Safe,
    action_form,
    badge,
    card_form,
    dropdown,
    field,
    h,
    join,
    kept,
    listing_page,
    mono,
    muted,
    page,
    path_part,
    reveal_page,
    same,
    section,
    table,
    when,
)
from switchboard.web.once import gone_page_text, put_reveal, take_reveal
from switchboard.web.routes import incoming_section
from switchboard.web.session import Viewer
from switchboard.web.trust_form import create_fields, trust_value

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
COLUMNS = ("Webhook", "Endpoint", "Source", "Trust", "Health", "Ingest URL", "Routes", "")


def base_of(w: Mapping[str, Any]) -> str:
    return f"/ui/webhooks/{path_part(str(w['id']))}"


def webhook_actions(viewer: Viewer, w: Mapping[str, Any], secret_kind: str) -> Safe:
    base = base_of(w)
    parts: list[Safe] = [confirm_link(f"{base}/edit", "Edit", "secondary")]
    if secret_kind == "minted":
        parts.append(confirm_link(f"{base}/rotate", "Rotate secret", "secondary"))
    elif secret_kind == "provider" and w.get("secret_state") == "awaiting":
        # The first secret replaces nothing: set it right here.
        parts.append(action_form(viewer, f"{base}/secret", "Set secret", fields=PROVIDER_SECRET_INPUT))
    elif secret_kind == "provider":
        parts.append(confirm_link(f"{base}/secret", "Replace secret", "secondary"))
    if w.get("previous_secret_expires_at"):
        parts.append(confirm_link(f"{base}/expire-previous", "Expire old secret now"))
    if w.get("paused"):
        parts.append(action_form(viewer, f"{base}/resume", "Resume"))
    else:
        parts.append(action_form(viewer, f"{base}/pause", "Pause"))
    parts.append(action_form(viewer, f"{base}/routes", "Add route", fields=ROUTE_INPUT))
    parts.append(confirm_link(f"{base}/delete", "Delete"))
    return h('<div class="actions">{p}</div>', p=join(parts))


def routes_cell(w: Mapping[str, Any], manage: bool) -> Safe:
    routes = w.get("routes") or []
    if not routes:
        return MUTED_DASH
    remove = f"{base_of(w)}/routes/remove"
    return join(
        h(
            "<div>{slug}{remove}</div>",
            slug=mono(slug),
            remove=h(" {link}", link=confirm_link(f"{remove}?endpoint={path_part(slug)}", "remove"))
            if manage
            else EMPTY,
        )
        for slug in routes
    )


def quarantined_line(w: Mapping[str, Any]) -> Safe:
    """How many of its deliveries are held, linking to them in the quarantine list."""
    held = int(w.get("quarantined") or 0)
    if not held:
        return EMPTY
    return h(
        '<div><a class="flag" href="/ui/quarantine?webhook={u}">{n} quarantined</a></div>',
        u=path_part(str(w["id"])),
        n=f"{held:,}",
    )


def health_cell(w: Mapping[str, Any], health: WebhookHealth) -> Safe:
    parts = [
        badge("paused", "claimed") if w.get("paused") else EMPTY,
        quarantined_line(w),
        h(
            '<div class="nowrap"><span class="muted">last delivery</span> {t}</div>',
            t=when(health.last_delivery_at) if health.last_delivery_at else muted("none yet"),
        ),
        h('<div><a href="{b}/deliveries">Deliveries</a></div>', b=base_of(w)),
    ]
    if health.refused_total:
        reasons = ", ".join(f"{reason} {n}" for reason, n in sorted((health.refused or {}).items()))
        parts.append(
            h(
                '<div><span class="flag">{n} refused</span> <span class="muted">in the last day ({why}), '
                "the last {t}</span></div>",
                n=f"{health.refused_total:,}",
                why=reasons,
                t=when(health.last_refused_at),
            )
        )
    else:
        parts.append(muted("no refusals in the last day"))
    if w.get("previous_secret_expires_at"):
        parts.append(
            h(
                '<div class="muted">old secret still accepted until {t}</div>',
                t=when(w["previous_secret_expires_at"]),
            )
        )
    return join(parts)


def webhook_row(
    viewer: Viewer, services: Services, w: Mapping[str, Any], manage: bool, health: WebhookHealth
) -> Safe:
    sources = services.providers.sources
    state_text, state_cls = SECRET_STATE.get(str(w["secret_state"]), (str(w["secret_state"]), ""))
    named = h("<strong>{n}</strong>", n=w["name"]) if w.get("name") else EMPTY
    return h(
        '<tr><td class="key">{named}<div><a class="mono" href="{page}">{id}</a></div>'
        '<div class="muted">{about}</div></td>'
        '<td>{endpoint}<div class="muted">queue {queue}</div></td>'
        '<td>{source}</td><td>{trust} {secret}</td><td>{health}</td><td class="mono">{prefix}</td>'
        "<td>{routes}</td><td>{actions}</td></tr>",
        named=named,
        page=base_of(w),
        id=w["id"],
        about=w.get("description") or "",
        endpoint=mono(w["endpoint"]),
        queue=w["queue"],
        source=w["source"],
        trust=badge(str(w["trust_mode"]), "trust"),
        secret=badge(state_text, state_cls),
        health=health_cell(w, health),
        prefix=w["ingest_token_prefix"],
        routes=routes_cell(w, manage),
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
            '<input type="text" id="queue" name="queue" value="{queue}">{name}'
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
            name=join([name_fields(form), create_fields(services.providers, form)]),
        ),
        "Create webhook",
    )


def name_fields(form: Mapping[str, str]) -> Safe:
    """The name and description inputs (create form and edit page)."""
    return join(
        [
            field(
                "name",
                "Name (optional)",
                form.get("name", ""),
                maxlength=tenancy.WEBHOOK_NAME_MAX,
                placeholder="e.g. acme/api issues",
            ),
            field(
                "description",
                "Description (optional)",
                form.get("description", ""),
                maxlength=tenancy.WEBHOOK_DESCRIPTION_MAX,
                placeholder="what it is for, who set it up",
            ),
        ]
    )


async def webhooks_page(request: web.Request, viewer: Viewer, refusal: FormRefusal | None) -> web.Response:
    services = services_of(request)
    live_managed: list[Endpoint] = []
    listed = []
    for scope in viewer.scopes:
        if scope.manage:
            endpoints = await tenancy.list_endpoints(services.db, scope.owner)
            live_managed += [e for e in endpoints if tenancy.endpoint_is_live(e)]
        hooks = await tenancy.list_webhooks(services.db, owner=scope.owner)
        listed.append((scope, await quarantine.with_quarantined(services.db, hooks)))
    ids = [w["id"] for _, hooks in listed for w in hooks]
    health = await webhook_health(services.db, ids)
    sections = [
        section(
            scope.label,
            table(
                COLUMNS,
                (
                    webhook_row(viewer, services, w, scope.manage, health.get(w["id"], WebhookHealth()))
                    for w in hooks
                ),
                empty="No webhooks.",
            ),
        )
        for scope, hooks in listed
    ]
    sections.append(await incoming_section(request, viewer))
    return listing_page(
        request,
        viewer,
        refusal,
        title="Webhooks",
        intro="Each webhook is an ingest URL owned by one endpoint; routes fan its deliveries out to more "
        "endpoints. Secrets and ingest URLs are never shown again after creation. A paused webhook "
        "answers 503 with Retry-After and stores nothing; after a rotation the old secret still verifies "
        "for a while, so the provider can be updated.",
        create=create_form(services, viewer, live_managed, kept(refusal)),
        # With no endpoint to deliver into, the page says so in plain sight instead of a fold.
        create_label="Create a webhook" if live_managed else None,
        sections=sections,
    )


# ---------------------------------------------------------------------------------------------
# The one-time reveal


async def reveal_webhook(
    request: web.Request,
    viewer: Viewer,
    *,
    heading: str,
    webhook: Webhook,
    endpoint_slug: str,
    ingest_token: str | None,
    secret: str | None,
) -> web.HTTPSeeOther:
    """Seal what the reveal page shows onto the session; the redirect to it."""
    services = services_of(request)
    url = tenancy.ingest_url(services.settings.base_url, ingest_token) if ingest_token else None
    await put_reveal(
        request,
        viewer,
        "webhook",
        {
            "heading": heading,
            "webhook": webhook.id,
            "endpoint": endpoint_slug,
            "source": webhook.source,
            "queue": webhook.queue,
            "ingest_url": url,
            "secret": secret,
            "overlap_until": webhook.previous_secret_expires_at.isoformat()
            if webhook.previous_secret_expires_at
            else None,
        },
    )
    return see_other("/ui/webhooks/new")


def _reveal_parts(services: Services, shown: Mapping[str, Any]) -> list[Safe]:
    kind = services.providers.sources.get(str(shown.get("source")))
    parts: list[Safe] = []
    if shown.get("ingest_url"):
        parts.append(
            h(
                "<h3>Ingest URL</h3><p>Configure the provider to POST to:</p>"
                '<code class="secret">{url}</code>',
                url=shown["ingest_url"],
            )
        )
    if shown.get("secret"):
        parts.append(
            h(
                "<h3>Signing secret</h3><p>Give the provider this secret; deliveries are verified "
                'against it.</p><code class="secret">{secret}</code>',
                secret=shown["secret"],
            )
        )
        if shown.get("overlap_until"):
            parts.append(
                h(
                    "<p>The previous secret is still accepted until {t}, so deliveries signed with it "
                    "keep landing while you update the provider. If it leaked, expire it now from the "
                    '<a href="/ui/webhooks">webhooks page</a>.</p>',
                    t=when(shown["overlap_until"]),
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
    return parts


async def reveal(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The new webhook's ingest URL and secret, or a rotated secret, once; a reload has nothing."""
    shown = await take_reveal(request, viewer, "webhook")
    if shown is None:
        body = h(
            '<h1>Nothing to show</h1><p>{text}</p><p><a href="/ui/webhooks">Webhooks</a></p>',
            text=gone_page_text(
                "ingest URL or signing secret",
                "rotate the secret (minted kinds), or delete the webhook and create a new one",
            ),
        )
        return page("Webhook", body, viewer, active="webhooks", status=410)
    response = reveal_page(
        viewer,
        title=str(shown["heading"]),
        heading=str(shown["heading"]),
        active="webhooks",
        lead="Copy this now. It is shown only this once",
        detail="Switchboard keeps only a hash of the URL and an encrypted copy of the secret.",
        content=join(_reveal_parts(services_of(request), shown)),
        facts=[
            ("webhook", mono(shown["webhook"])),
            ("endpoint", shown["endpoint"]),
            ("source", shown["source"]),
            ("queue", shown["queue"]),
        ],
    )
    return response


@shows_refusals(webhooks_page, create_form=True)
async def webhook_create(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    slug = viewer.form.get("endpoint", "")
    async with services.db.read() as s:
        endpoint = await viewer.endpoint(s, slug)
    viewer.managing(Owner.of(endpoint), "add webhooks to its endpoints")
    source = viewer.form.get("source", "")
    # Checked before anything is made: the choice is required for kinds with actors, refused for
    # the others (docs/routing.md, "Trusted actors").
    trust = intake_config.trust_for_create(
        services.providers, source, trust_value(services.providers.sources.get(source), viewer.form)
    )
    created = await tenancy.create_webhook(
        services.db,
        services.vault,
        services.providers,
        endpoint_slug=slug,
        source=source,
        queue=viewer.form.get("queue", "").strip() or None,
        name=viewer.form.get("name"),
        description=viewer.form.get("description"),
        trust=trust,
    )
    log.info("web: %s created webhook %s on %s", viewer.handle, created.webhook.id, slug)
    raise await reveal_webhook(
        request,
        viewer,
        heading="Webhook created",
        webhook=created.webhook,
        endpoint_slug=slug,
        ingest_token=created.ingest_token,
        secret=created.secret,
    )
