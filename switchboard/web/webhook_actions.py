"""What a webhook's managers do to it from the webhooks page: rotate or replace its signing secret
(the old one keeps verifying for ``SWITCHBOARD_SECRET_OVERLAP_SECONDS``, or until "expire old secret
now"), name and describe it, pause and resume it, add and remove routes, delete it.

Every destructive one (rotate, replace, expire, remove a route, delete) has a confirmation page,
a GET that changes nothing, whose form does it; a POST without that page's ``confirm=yes`` is sent
to it. Every POST that works redirects: a rotation to the one-time reveal (``webhooks.reveal``), the
rest back to the list with a notice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web

from switchboard import tenancy, webhook_ops
from switchboard.errors import SwitchboardError, invalid
from switchboard.models import Endpoint, Webhook
from switchboard.services import services_of
from switchboard.tenancy import Owner
from switchboard.web.confirm import confirm_page
from switchboard.web.forms import ask_first, changes, see_other, shows_refusals
from switchboard.web.html import Safe, card_form, h, hidden, mono, page, path_part, secret_field, when
from switchboard.web.session import Viewer
from switchboard.web.webhooks import name_fields, reveal_webhook, webhooks_page

log = logging.getLogger("switchboard.web")


async def managed_webhook(request: web.Request, viewer: Viewer) -> tuple[Webhook, Endpoint]:
    """The webhook in the URL and its endpoint, if the viewer may manage it."""
    async with services_of(request).db.read() as s:
        webhook, endpoint = await viewer.owned(s, Webhook, request.match_info["webhook_id"], "webhook")
    viewer.managing(Owner.of(endpoint), "change its webhooks")
    return webhook, endpoint


webhook_change = changes(webhooks_page, "/ui/webhooks", managed_webhook)


def _named(webhook: Webhook) -> str:
    return f"{webhook.name} ({webhook.id})" if webhook.name else webhook.id


def _overlap(request: web.Request) -> int:
    return services_of(request).settings.secret_overlap_seconds


def _overlap_text(seconds: int) -> str:
    if seconds <= 0:
        return "The current secret stops working at once (SWITCHBOARD_SECRET_OVERLAP_SECONDS is 0)."
    hours = seconds / 3600
    span = f"{hours:g} hours" if hours >= 1 else f"{seconds} seconds"
    return (
        f"The current secret keeps verifying deliveries for {span}, so the provider can be updated "
        "without losing any; you can end that early (expire old secret now)."
    )


# ---------------------------------------------------------------------------------------------
# Rotate (minted kinds) and replace (provider-issued secrets)


async def rotate_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    webhook, endpoint = await managed_webhook(request, viewer)
    return confirm_page(
        viewer,
        question="Rotate this webhook's signing secret?",
        explain=h(
            "<p>Webhook <strong>{w}</strong> on endpoint <code>{e}</code> ({source}) gets a new signing "
            "secret, shown once on the next page. {overlap}</p>",
            w=_named(webhook),
            e=endpoint.slug,
            source=webhook.source,
            overlap=_overlap_text(_overlap(request)),
        ),
        action=f"/ui/webhooks/{path_part(webhook.id)}/rotate",
        button="Yes, rotate it",
        back="/ui/webhooks",
        active="webhooks",
    )


@shows_refusals(webhooks_page)
async def webhook_rotate(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    webhook, endpoint = await managed_webhook(request, viewer)
    ask_first(request, viewer)
    secret = await tenancy.rotate_webhook_secret(
        services.db, services.vault, services.providers, webhook.id, overlap_seconds=_overlap(request)
    )
    rotated = await tenancy.get_webhook(services.db, webhook.id)
    log.info("web: %s rotated webhook %s", viewer.handle, webhook.id)
    raise await reveal_webhook(
        request,
        viewer,
        heading="Webhook secret rotated",
        webhook=rotated,
        endpoint_slug=endpoint.slug,
        ingest_token=None,
        secret=secret,
    )


async def secret_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Replacing a provider-issued secret: the page with the new secret's field is the confirmation."""
    webhook, endpoint = await managed_webhook(request, viewer)
    form = card_form(
        viewer,
        f"/ui/webhooks/{path_part(webhook.id)}/secret",
        h(
            "{field}{confirm}",
            field=secret_field("secret", "The provider's new signing secret", required=True),
            confirm=hidden("confirm", "yes"),
        ),
        "Replace secret",
        after=Safe('<p><a href="/ui/webhooks">No, go back</a></p>'),
    )
    body = h(
        "<h1>Replace this webhook's signing secret?</h1><p>Webhook <strong>{w}</strong> on endpoint "
        "<code>{e}</code> ({source}). {overlap}</p>{form}",
        w=_named(webhook),
        e=endpoint.slug,
        source=webhook.source,
        overlap=_overlap_text(_overlap(request)),
        form=form,
    )
    return page("Replace secret", body, viewer, active="webhooks")


@webhook_change
async def webhook_set_secret(request: web.Request, viewer: Viewer, found: tuple[Webhook, Endpoint]) -> str:
    services, webhook = services_of(request), found[0]
    kind = services.providers.sources.get(webhook.source)
    if webhook.secret_state == "set" and kind is not None and kind.secret == "provider":
        # Replacing one is destructive: only from its confirmation page.
        ask_first(request, viewer)
    await tenancy.set_webhook_secret(
        services.db,
        services.vault,
        services.providers,
        webhook.id,
        viewer.form.get("secret", ""),
        overlap_seconds=_overlap(request),
    )
    log.info("web: %s set the secret of webhook %s", viewer.handle, webhook.id)
    return "secret_set"


async def expire_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    webhook, endpoint = await managed_webhook(request, viewer)
    return confirm_page(
        viewer,
        question="Expire the old signing secret now?",
        explain=h(
            "<p>Webhook <strong>{w}</strong> on endpoint <code>{e}</code> still accepts the secret its "
            "last rotation replaced, until {until}. From now on only the current secret verifies: "
            "deliveries the provider still signs with the old one are refused (401). Do this when the old "
            "secret may have leaked.</p>",
            w=_named(webhook),
            e=endpoint.slug,
            until=when(webhook.previous_secret_expires_at),
        ),
        action=f"/ui/webhooks/{path_part(webhook.id)}/expire-previous",
        button="Yes, expire it now",
        back="/ui/webhooks",
        active="webhooks",
    )


@changes(webhooks_page, "/ui/webhooks", managed_webhook, confirm=())
async def webhook_expire_previous(
    request: web.Request, viewer: Viewer, found: tuple[Webhook, Endpoint]
) -> str:
    _, was_live = await webhook_ops.expire_previous_secret(services_of(request).db, found[0].id)
    log.info("web: %s expired the previous secret of webhook %s", viewer.handle, found[0].id)
    return "previous_secret_expired" if was_live else "no_previous_secret"


# ---------------------------------------------------------------------------------------------
# Name, description, pause


def _edit_form(
    viewer: Viewer,
    webhook: Webhook,
    endpoint: Endpoint,
    values: Mapping[str, str],
    *,
    error: str | None = None,
    status: int = 200,
) -> web.Response:
    form = card_form(
        viewer,
        f"/ui/webhooks/{path_part(webhook.id)}/edit",
        name_fields(values),
        "Save",
        after=Safe('<p><a href="/ui/webhooks">Back to webhooks</a></p>'),
    )
    body = h(
        "<h1>Webhook {id}</h1><p>On endpoint {e}, source {source}, queue {queue}.</p>{form}",
        id=mono(webhook.id),
        e=mono(endpoint.slug),
        source=webhook.source,
        queue=webhook.queue,
        form=form,
    )
    return page("Edit webhook", body, viewer, active="webhooks", status=status, error=error)


async def edit_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    webhook, endpoint = await managed_webhook(request, viewer)
    return _edit_form(
        viewer, webhook, endpoint, {"name": webhook.name or "", "description": webhook.description or ""}
    )


@shows_refusals(webhooks_page)
async def webhook_edit(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    webhook, endpoint = await managed_webhook(request, viewer)
    try:
        await webhook_ops.update_webhook(
            services_of(request).db,
            webhook.id,
            name=viewer.form.get("name", ""),
            description=viewer.form.get("description", ""),
        )
    except SwitchboardError as exc:
        if exc.code == "not_found":
            raise
        # A refused name or description (too long, not one line of printable text): the edit page
        # again with what was typed, rather than the webhooks list with both fields lost.
        return _edit_form(viewer, webhook, endpoint, viewer.form, error=exc.message, status=exc.http_status)
    raise see_other("/ui/webhooks", "webhook_saved")


@webhook_change
async def webhook_pause(request: web.Request, viewer: Viewer, found: tuple[Webhook, Endpoint]) -> str:
    await webhook_ops.update_webhook(services_of(request).db, found[0].id, paused=True)
    log.info("web: %s paused webhook %s", viewer.handle, found[0].id)
    return "webhook_paused"


@webhook_change
async def webhook_resume(request: web.Request, viewer: Viewer, found: tuple[Webhook, Endpoint]) -> str:
    await webhook_ops.update_webhook(services_of(request).db, found[0].id, paused=False)
    log.info("web: %s resumed webhook %s", viewer.handle, found[0].id)
    return "webhook_resumed"


# ---------------------------------------------------------------------------------------------
# Delete, routes


async def delete_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    webhook, endpoint = await managed_webhook(request, viewer)
    return confirm_page(
        viewer,
        question="Delete this webhook?",
        explain=h(
            "<p>Webhook <strong>{w}</strong> on endpoint <code>{e}</code> ({source}) and its routes are "
            "deleted: its ingest URL answers 404 from now on. Todos it already made stay, with their "
            "deliveries. This cannot be undone.</p>",
            w=_named(webhook),
            e=endpoint.slug,
            source=webhook.source,
        ),
        action=f"/ui/webhooks/{path_part(webhook.id)}/delete",
        button="Yes, delete it",
        back="/ui/webhooks",
        active="webhooks",
    )


@changes(webhooks_page, "/ui/webhooks", managed_webhook, confirm=())
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


async def route_remove_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    webhook, _ = await managed_webhook(request, viewer)
    slug = request.query.get("endpoint", "").strip()
    if not slug:
        raise invalid("name the endpoint whose route to remove")
    return confirm_page(
        viewer,
        question="Remove this route?",
        explain=h(
            "<p>Deliveries to webhook <strong>{w}</strong> stop becoming todos for endpoint "
            "<code>{e}</code>. Todos already made stay. Adding the route again needs the consent of "
            "both scopes.</p>",
            w=_named(webhook),
            e=slug,
        ),
        action=f"/ui/webhooks/{path_part(webhook.id)}/routes/remove",
        button="Yes, remove it",
        back="/ui/webhooks",
        active="webhooks",
        fields=hidden("endpoint", slug),
    )


@changes(webhooks_page, "/ui/webhooks", managed_webhook, confirm=("endpoint",))
async def route_remove(request: web.Request, viewer: Viewer, found: tuple[Webhook, Endpoint]) -> str:
    slug = viewer.form.get("endpoint", "").strip()
    await tenancy.remove_route(services_of(request).db, found[0].id, slug)
    return "route_removed"
