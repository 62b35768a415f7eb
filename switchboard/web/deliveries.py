"""A webhook's delivery log in the UI (``switchboard.deliveries``): the log page, one delivery's page
(redacted headers, the raw body as a download, never rendered), redeliver (after a confirmation
page: it mints new todos) and send a test delivery. Another scope's webhook is a 404; making a
delivery needs to manage the webhook."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from sqlalchemy import select

from switchboard import deliveries
from switchboard.delivery_signing import REDELIVERABLE, TESTABLE
from switchboard.ingest import INGEST_WRITER
from switchboard.models import Endpoint, Event, Webhook
from switchboard.services import services_of
from switchboard.tenancy import Owner
from switchboard.web.confirm import confirm_link, confirm_page
from switchboard.web.forms import ask_first, see_other
from switchboard.web.html import (
    EMPTY,
    Safe,
    action_form,
    badge,
    h,
    join,
    kv,
    mono,
    muted,
    notice_of,
    page,
    path_part,
    table,
    when,
)
from switchboard.web.intake_views import trace_card
from switchboard.web.session import Viewer

log = logging.getLogger("switchboard.web")

PAGE_SIZE = 50


async def _webhook(request: web.Request, viewer: Viewer, manage: bool = False) -> tuple[Webhook, Endpoint]:
    async with services_of(request).db.read() as s:
        webhook, endpoint = await viewer.owned(s, Webhook, request.match_info["webhook_id"], "webhook")
    if manage:
        viewer.managing(Owner.of(endpoint), "make deliveries on its webhooks")
    return webhook, endpoint


def _manages(viewer: Viewer, endpoint: Endpoint) -> bool:
    scope = viewer.scope_of(Owner.of(endpoint))
    return scope is not None and scope.manage


def _base(webhook: Webhook) -> str:
    return f"/ui/webhooks/{path_part(webhook.id)}/deliveries"


def _disposition(d: dict[str, Any]) -> Safe:
    label = d["disposition"] + (f": {d['reason']}" if d["reason"] else "")
    cls = "failed" if d["disposition"] == "refused" else d["disposition"]
    counted = h(' <span class="muted">(x{n})</span>', n=d["count"]) if d["count"] > 1 else EMPTY
    return join([badge(label, cls), counted])


def _todos(d: dict[str, Any]) -> Safe:
    if not d["todos"]:
        return muted("none")
    return join(
        h('<a href="/ui/todos/{u}" class="mono">{id}</a> ', u=path_part(t["id"]), id=t["id"])
        for t in d["todos"]
    )


def _marks(webhook: Webhook, d: dict[str, Any]) -> Safe:
    parts = []
    if d["redelivery_of"]:
        parts.append(
            h(
                'redelivery of <a href="{b}/{u}">{id}</a>',
                b=_base(webhook),
                u=path_part(d["redelivery_of"]),
                id=d["redelivery_of"],
            )
        )
    if d["original"]:
        parts.append(
            h(
                'duplicate of <a href="{b}/{u}">{id}</a>',
                b=_base(webhook),
                u=path_part(d["original"]),
                id=d["original"],
            )
        )
    return join(parts)


def _row(webhook: Webhook, d: dict[str, Any]) -> Safe:
    verified = {True: "verified", False: "unverified", None: ""}[d["verified"]]
    return h(
        '<tr class="delivery {disp}"><td>{when}</td><td><a href="{b}/{u}" class="mono">{id}</a></td>'
        '<td>{status}</td><td>{disposition}</td><td>{event}</td><td class="mono key">{key}</td>'
        "<td>{verified} {detail}</td><td>{todos}</td><td>{marks}</td></tr>",
        disp=d["disposition"],
        when=when(d["received_at"]),
        b=_base(webhook),
        u=path_part(d["id"]),
        id=d["id"],
        status=d["status"],
        disposition=_disposition(d),
        event=d["event"] or "",
        key=d["delivery_key"] or "",
        verified=verified,
        detail=muted(d["detail"]),
        todos=_todos(d),
        marks=_marks(webhook, d),
    )


async def log_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    webhook, endpoint = await _webhook(request, viewer)
    found = await deliveries.list_deliveries(
        services_of(request).db,
        webhook.id,
        before=request.query.get("before"),
        after=request.query.get("after"),
        limit=PAGE_SIZE,
        scopes=[scope.owner for scope in viewer.scopes],
    )
    links = []
    if found.next_after:
        links.append(
            h(
                '<a href="{b}">Newest</a> <a href="{b}?{q}">Newer</a>',
                b=_base(webhook),
                q=urlencode({"after": found.next_after}),
            )
        )
    if found.next_before:
        links.append(
            h('<a href="{b}?{q}">Older</a>', b=_base(webhook), q=urlencode({"before": found.next_before}))
        )
    manage = _manages(viewer, endpoint)
    test = EMPTY
    if manage and webhook.source in TESTABLE:
        test = action_form(viewer, f"/ui/webhooks/{path_part(webhook.id)}/test", "Send test delivery")
    elif manage:
        test = muted(f"{webhook.source} webhooks cannot make a test delivery; send one from the provider.")
    body = h(
        "<h1>Deliveries of {name}</h1>"
        '<p>{source} webhook <span class="mono">{id}</span> on endpoint <code>{ep}</code>. Newest first; '
        "refusals past 20 a minute are counted in one row; refusals and duplicates are kept 3 days. "
        '<a href="/ui/webhooks">All webhooks</a></p><p>{test}</p>{table}<p class="pager">{links}</p>',
        name=webhook.name or webhook.id,
        source=webhook.source,
        id=webhook.id,
        ep=endpoint.slug,
        test=test,
        table=table(
            [
                "Received",
                "Delivery",
                "Status",
                "Disposition",
                "Event",
                "Delivery key",
                "Verified",
                "Todos",
                "",
            ],
            (_row(webhook, d) for d in found.rows),
            empty="No deliveries yet.",
        ),
        links=join(links),
    )
    return page("Deliveries", body, viewer, active="webhooks", notice=notice_of(request))


async def _routing(request: web.Request, webhook: Webhook, event_id: str) -> Any:
    """The event's routing trace (docs/routing.md), with what each target got."""
    async with services_of(request).db.read() as s:
        return await s.scalar(
            select(Event.routing).where(Event.id == event_id, Event.webhook_id == webhook.id)
        )


async def detail_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    webhook, endpoint = await _webhook(request, viewer)
    d = await deliveries.delivery_detail(
        services_of(request).db,
        webhook.id,
        request.match_info["delivery_id"],
        scopes=[scope.owner for scope in viewer.scopes],
    )
    base = _base(webhook)
    pairs: list[tuple[str, object]] = [
        ("Received", when(d["received_at"])),
        ("Status answered", d["status"]),
        ("Disposition", _disposition(d)),
        ("Event", d["event"] or muted("not stored")),
        ("Delivery key", mono(d["delivery_key"] or "")),
        ("Verified", {True: "yes", False: "no (token trust)", None: "—"}[d["verified"]]),
        ("Detail", d["detail"]),
        ("Todos minted", _todos(d)),
    ]
    marks = _marks(webhook, d)
    if marks:
        pairs.append(("Marked", marks))
    if d.get("redeliveries"):
        pairs.append(
            (
                "Redelivered as",
                join(
                    h('<a href="{b}/{u}">{id}</a> ', b=base, u=path_part(r), id=r) for r in d["redeliveries"]
                ),
            )
        )
    parts = [kv(pairs)]
    if d["stored"]:
        parts.append(
            h("<h2>Routing</h2>{t}", t=trace_card(await _routing(request, webhook, d["id"]), what="delivery"))
        )
        parts.append(
            h(
                '<h2>Headers</h2><p class="muted">Signatures, credentials and unknown headers '
                "are stored as [redacted].</p>{t}",
                t=table(
                    ["Name", "Value"],
                    (
                        h('<tr><td class="mono">{n}</td><td class="mono key">{v}</td></tr>', n=n, v=v)
                        for n, v in d["headers"].items()
                    ),
                ),
            )
        )
        parts.append(
            h(
                '<h2>Body</h2><p>{n} bytes, sha256 <span class="mono">{sha}</span>. '
                '<a href="{b}/{u}/body">Download the raw body</a> (never shown as a page).</p>',
                n=d["body_bytes"],
                sha=d["body_sha256"],
                b=base,
                u=path_part(d["id"]),
            )
        )
        if _manages(viewer, endpoint) and webhook.source in REDELIVERABLE:
            parts.append(
                h(
                    "<p>{r}</p>",
                    r=confirm_link(f"{base}/{path_part(d['id'])}/redeliver", "Redeliver", cls="secondary"),
                )
            )
    else:
        parts.append(muted("Nothing of this delivery was stored but this row: no headers, no body."))
    body = h(
        '<h1>Delivery <span class="mono">{id}</span></h1><p><a href="{b}">All deliveries of this '
        "webhook</a></p>{parts}",
        id=d["id"],
        b=base,
        parts=join(parts),
    )
    return page("Delivery", body, viewer, active="webhooks", notice=notice_of(request))


async def raw_body(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The stored body, byte for byte, as a download: never rendered (it is the sender's data)."""
    webhook, _ = await _webhook(request, viewer)
    event_id = request.match_info["delivery_id"]
    body = await deliveries.stored_body(services_of(request).db, webhook.id, event_id)
    return web.Response(
        body=body,
        content_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{event_id}-body.bin"'},
    )


async def redeliver_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    webhook, _ = await _webhook(request, viewer, manage=True)
    event_id = request.match_info["delivery_id"]
    # Only a stored delivery of this webhook: any other id (another scope's, or none at all) is a
    # 404 like its detail page, not a question with a "Yes" button that can only fail.
    await deliveries.stored_body(services_of(request).db, webhook.id, event_id)
    base = f"{_base(webhook)}/{path_part(event_id)}"
    return confirm_page(
        viewer,
        question="Redeliver this delivery?",
        explain=h(
            '<p>Delivery <span class="mono">{id}</span> goes through ingest again as a <strong>new '
            "delivery</strong>, marked as its redelivery: the webhook's routes as they are now decide, "
            "and it <strong>mints new todos</strong> (it does not count as the original's duplicate). "
            "Each redelivery is another one.</p>",
            id=event_id,
        ),
        action=f"{base}/redeliver",
        button="Yes, redeliver it",
        back=base,
        active="webhooks",
        cls="secondary",
    )


async def redeliver(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    webhook, _ = await _webhook(request, viewer, manage=True)
    ask_first(request, viewer)
    app = request.app
    made = await deliveries.redeliver(
        services_of(request),
        app[INGEST_WRITER],
        webhook.id,
        request.match_info["delivery_id"],
        by=viewer.handle,
    )
    log.info("web: %s redelivered %s as %s", viewer.handle, made.redelivery_of, made.event_id)
    raise see_other(f"{_base(webhook)}/{path_part(made.event_id)}", "delivery_redelivered")


async def send_test(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    webhook, _ = await _webhook(request, viewer, manage=True)
    made = await deliveries.send_test(
        services_of(request), request.app[INGEST_WRITER], webhook.id, by=viewer.handle
    )
    log.info("web: %s sent a test delivery on webhook %s", viewer.handle, webhook.id)
    raise see_other(f"{_base(webhook)}/{path_part(made.event_id)}", "test_delivery_sent")
