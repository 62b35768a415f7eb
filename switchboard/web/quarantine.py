"""The quarantine (``/ui/quarantine``, docs/routing.md "Quarantine"): held todos of the viewer's scopes,
newest first, a page at a time (``?webhook=`` narrows it to one webhook), each with why it is held —
the reason, the actor verdict, the rule and its fault — and until when; and what a person decides:

* **Release**: routing runs again with trust satisfied (the webhook's rules still apply: they may
  drop it, or hold it again);
* **Release to queue**: one pending todo on a queue the endpoint is granted;
* **Trust … and release**: the delivery's actor joins the webhook's trusted actors, then release;
* **Discard…**: after a confirmation page that asks for the reason (required).

Each is ``switchboard.quarantine``'s, as in the API and the CLI, and ends in the held todo's
history. Titles, logins and faults come from senders and rules: shown as escaped text. Another
scope's held todo or webhook is a 404; a team member sees the list without buttons and gets 403.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from sqlalchemy import select

from switchboard import quarantine, tenancy
from switchboard import trust as trusting
from switchboard.errors import SwitchboardError, conflict
from switchboard.intake import HOLD_QUEUE
from switchboard.models import Endpoint, Event, Todo, Webhook
from switchboard.services import Services, services_of
from switchboard.web.confirm import confirm_link
from switchboard.web.forms import ask_first, see_other
from switchboard.web.html import (
    EMPTY,
    FormRefusal,
    Safe,
    action_form,
    badge,
    dropdown,
    field,
    h,
    hidden,
    join,
    kv,
    mono,
    muted,
    notice_of,
    page,
    path_part,
    post_form,
    same,
    table,
    when,
)
from switchboard.web.intake_views import HOLD_REASONS, caller_of, hold_pairs, rule_text, verdict_cell
from switchboard.web.session import Viewer

log = logging.getLogger("switchboard.web")

PAGE_SIZE = 50
COLUMNS = ("Held todo", "Why", "Actor", "Rule / fault", "Held", "")
INTRO = (
    "Deliveries that trust refused, that a rule sent to quarantine, or that a rule faulted on. Each is "
    "one held todo on its webhook's own endpoint: no agent lists, claims or hears of it. Release runs "
    "routing again with trust satisfied (the rules still apply); release to queue puts it straight on "
    "a queue the endpoint is granted; trust and release first adds the delivery's actor to the "
    "webhook's trusted actors. Held todos nobody decides on expire after 30 days."
)


def list_url(webhook_id: str | None = None) -> str:
    return "/ui/quarantine" + (f"?{urlencode({'webhook': webhook_id})}" if webhook_id else "")


def _filter(request: web.Request, viewer: Viewer) -> str | None:
    """The webhook the list is narrowed to: the query's, or the posted form's (a refused action
    comes back as the list it was pressed on)."""
    return request.query.get("webhook") or viewer.form.get("webhook") or None


async def _endpoints(services: Services, viewer: Viewer) -> dict[str, tuple[bool, Endpoint]]:
    """Every endpoint the viewer sees, by slug: whether they manage it, and the row (its grant)."""
    out: dict[str, tuple[bool, Endpoint]] = {}
    for scope in viewer.scopes:
        for endpoint in await tenancy.list_endpoints(services.db, scope.owner):
            out[endpoint.slug] = (scope.manage, endpoint)
    return out


async def _webhooks(services: Services, ids: set[str]) -> dict[str, Webhook]:
    if not ids:
        return {}
    async with services.db.read() as s:
        return {w.id: w for w in (await s.scalars(select(Webhook).where(Webhook.id.in_(ids)))).all()}


def _trust_label(services: Services, webhook: Webhook | None, row: Mapping[str, Any]) -> str | None:
    """The trust-and-release button's label naming whom it trusts, or None when there is nobody
    it could add (no actor named, a kind without actors, allow_all already)."""
    if webhook is None or row.get("reason") != "untrusted_actor" or not isinstance(row.get("actor"), dict):
        return None
    kind = services.providers.sources.get(webhook.source)
    if kind is None or kind.trust is None:
        return None
    adding = trusting.actors_to_add(kind.trust, webhook.trust, row["actor"])
    return f"Trust {', '.join(adding)} and release" if adding else None


def _actions(
    viewer: Viewer, row: Mapping[str, Any], endpoint: Endpoint, trust_label: str | None, keep: Safe
) -> Safe:
    base = f"/ui/quarantine/{path_part(str(row['id']))}"
    queues = [q for q in endpoint.queues or () if q != HOLD_QUEUE]
    parts = [action_form(viewer, f"{base}/release", "Release", cls="", fields=keep)]
    if queues:
        parts.append(
            action_form(
                viewer,
                f"{base}/release",
                "Release to queue",
                fields=join([keep, dropdown("queue", same(queues), aria_label="queue to release to")]),
            )
        )
    if trust_label:
        parts.append(
            action_form(viewer, f"{base}/release", trust_label, fields=join([keep, hidden("trust", "yes")]))
        )
    query = f"?{urlencode({'webhook': row['webhook']})}" if row.get("webhook") else ""
    parts.append(confirm_link(f"{base}/discard{query}", "Discard"))
    return h('<div class="actions">{p}</div>', p=join(parts))


def _row(
    viewer: Viewer,
    row: Mapping[str, Any],
    seen: tuple[bool, Endpoint] | None,
    trust_label: str | None,
    keep: Safe,
) -> Safe:
    reason = str(row.get("reason") or "?")
    webhook = (
        h(
            '<a class="mono" href="/ui/webhooks/{u}">{id}</a>',
            u=path_part(str(row["webhook"])),
            id=row["webhook"],
        )
        if row.get("webhook")
        else muted("webhook gone")
    )
    return h(
        '<tr class="held"><td class="title"><a href="/ui/todos/{u}">{title}</a>'
        '<div class="mono muted">{id}</div><div>{source} / {event}</div>'
        "<div>{webhook} → {endpoint}</div></td>"
        '<td>{reason}<div class="muted">{why}</div></td><td>{actor}</td>'
        "<td>{rule}{fault}</td>"
        '<td>{created}<div class="muted">expires {expires}</div></td><td>{actions}</td></tr>',
        u=path_part(str(row["id"])),
        title=row.get("title") or "",
        id=row["id"],
        source=row.get("source") or "",
        event=row.get("event") or "",
        webhook=webhook,
        endpoint=mono(row.get("endpoint") or ""),
        reason=badge(reason, "claimed"),
        why=HOLD_REASONS.get(reason, ""),
        actor=verdict_cell(row.get("actor")),
        rule=rule_text(row.get("rule")),
        fault=h('<div class="flag mono">{f}</div>', f=row["fault"]) if row.get("fault") else EMPTY,
        created=when(row.get("created_at")),
        expires=when(row.get("expires_at")),
        actions=_actions(viewer, row, seen[1], trust_label, keep) if seen is not None and seen[0] else EMPTY,
    )


def _pager(webhook_id: str | None, next_after: str | None, next_before: str | None) -> Safe:
    def link(**cursor: str) -> str:
        query = {**({"webhook": webhook_id} if webhook_id else {}), **cursor}
        return "/ui/quarantine" + (f"?{urlencode(query)}" if query else "")

    links = []
    if next_after:
        links.append(
            h('<a href="{a}">Newest</a> <a href="{b}">Newer</a>', a=link(), b=link(after=next_after))
        )
    if next_before:
        links.append(h('<a href="{b}">Older</a>', b=link(before=next_before)))
    return h('<p class="pager">{l}</p>', l=join(links))


async def quarantine_page(request: web.Request, viewer: Viewer, refusal: FormRefusal | None) -> web.Response:
    services = services_of(request)
    webhook_id = _filter(request, viewer)
    found = await quarantine.list_held(
        services.db,
        caller_of(viewer, "decide on its held todos"),
        webhook_id=webhook_id,
        before=request.query.get("before"),
        after=request.query.get("after"),
        limit=PAGE_SIZE,
    )
    seen = await _endpoints(services, viewer)
    hooks = await _webhooks(services, {str(r["webhook"]) for r in found.rows if r.get("webhook")})
    keep = hidden("webhook", webhook_id) if webhook_id else EMPTY
    rows = (
        _row(
            viewer,
            r,
            seen.get(str(r.get("endpoint"))),
            _trust_label(services, hooks.get(str(r.get("webhook"))), r),
            keep,
        )
        for r in found.rows
    )
    narrowed = (
        h(
            '<p>Held todos of webhook <a class="mono" href="/ui/webhooks/{u}">{id}</a> only. '
            '<a href="/ui/quarantine">Show all</a></p>',
            u=path_part(webhook_id),
            id=webhook_id,
        )
        if webhook_id
        else EMPTY
    )
    body = h(
        '<h1>Quarantine</h1><p class="hint">{intro}</p>{narrowed}{table}{pager}',
        intro=INTRO,
        narrowed=narrowed,
        table=table(COLUMNS, rows, empty="Nothing is held."),
        pager=_pager(webhook_id, found.next_after, found.next_before),
    )
    return page(
        "Quarantine",
        body,
        viewer,
        active="quarantine",
        status=refusal.status if refusal else 200,
        error=refusal.message if refusal else None,
        notice=notice_of(request),
    )


async def quarantine_view(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await quarantine_page(request, viewer, None)


# ---------------------------------------------------------------------------------------------
# Release


def _released(answer: Mapping[str, Any], queue: str | None, trust: bool) -> str:
    """The notice that says what a release made of the held todo."""
    outcome = answer.get("outcome")
    if outcome in ("quarantined", "faulted"):
        return "quarantine_held_again"
    if outcome == "dropped":
        return "quarantine_dropped"
    if not answer.get("todos"):
        return "quarantine_released_none"
    if queue is not None:
        return "quarantine_released_queue"
    return "quarantine_trust_released" if trust else "quarantine_released"


async def release(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    todo_id = request.match_info["todo_id"]
    queue = viewer.form.get("queue", "").strip() or None
    trust = viewer.form.get("trust") == "yes"
    try:
        answer = await quarantine.release(
            services, caller_of(viewer, "release its held todos"), todo_id, queue=queue, trust=trust
        )
    except SwitchboardError as exc:
        if exc.code == "not_found":
            raise
        # Refused (a member, a queue outside the grant, already decided): the list as it is now.
        return await quarantine_page(request, viewer, FormRefusal(exc.message, exc.http_status))
    log.info("web: %s released held todo %s (%s)", viewer.handle, todo_id, answer.get("outcome"))
    raise see_other(list_url(_filter(request, viewer)), _released(answer, queue, trust))


# ---------------------------------------------------------------------------------------------
# Discard, after its confirmation page


async def _held(request: web.Request, viewer: Viewer) -> dict[str, Any]:
    """The held todo in the URL as the list shows it; 404 outside the viewer's scopes, 403 for a
    member, 409 once it was decided on."""
    async with services_of(request).db.read() as s:
        todo, endpoint = await viewer.owned(s, Todo, request.match_info["todo_id"], "todo")
        webhook_id = (
            await s.scalar(select(Event.webhook_id).where(Event.id == todo.event_id))
            if todo.event_id
            else None
        )
    viewer.managing(tenancy.Owner.of(endpoint), "discard its held todos")
    if todo.state != quarantine.HELD:
        raise conflict(f"todo {todo.id} is not held: it was already decided on")
    return quarantine.held_view(todo, endpoint.slug, str(webhook_id) if webhook_id else None)


def _discard_page(
    viewer: Viewer,
    row: Mapping[str, Any],
    back: str | None,
    *,
    reason: str = "",
    error: str | None = None,
    status: int = 200,
) -> web.Response:
    keep = hidden("webhook", back) if back else EMPTY
    form = post_form(
        viewer,
        f"/ui/quarantine/{path_part(str(row['id']))}/discard",
        "confirm",
        join(
            [
                keep,
                field(
                    "reason",
                    "Reason (required, kept in its history)",
                    reason,
                    required=True,
                    maxlength=quarantine.DISCARD_REASON_MAX,
                    placeholder="e.g. spam",
                ),
                hidden("confirm", "yes"),
                h(
                    '<p><button type="submit" class="danger">Yes, discard it</button> '
                    '<a href="{no}">No, go back</a></p>',
                    no=list_url(back),
                ),
            ]
        ),
    )
    body = h(
        '<h1>Discard this held todo?</h1><section class="card confirm"><p class="title"><strong>{title}'
        '</strong> <span class="mono muted">{id}</span></p>{facts}<p>It is cancelled for good: no agent '
        "ever sees it, and it cannot be released later. Its history keeps who discarded it and why.</p>"
        "{form}</section>",
        title=row.get("title") or "",
        id=row["id"],
        facts=kv(hold_pairs(row)),
        form=form,
    )
    return page("Discard held todo", body, viewer, active="quarantine", status=status, error=error)


async def discard_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    row = await _held(request, viewer)
    return _discard_page(viewer, row, request.query.get("webhook"))


async def discard(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    row = await _held(request, viewer)
    back = _filter(request, viewer)
    ask_first(request, viewer, ("webhook",))
    reason = viewer.form.get("reason", "")
    try:
        await quarantine.discard(
            services, caller_of(viewer, "discard its held todos"), str(row["id"]), reason
        )
    except SwitchboardError as exc:
        if exc.code == "not_found":
            raise
        return _discard_page(viewer, row, back, reason=reason, error=exc.message, status=exc.http_status)
    log.info("web: %s discarded held todo %s", viewer.handle, row["id"])
    raise see_other(list_url(back), "quarantine_discarded")
