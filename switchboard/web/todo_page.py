"""One todo (``/ui/todos/{id}``): its facts, why it is held when it is (quarantine), how routing
decided it (the routing trace), result, reply address, replies, attempts, the operators' history and
its payload; the operator's actions on it (requeue, release, and cancel
after a confirmation page); and its raw payload as a download.

Payloads and results are shown cut on a JSON boundary (what is shown still parses, and every cut
is marked), with the whole stored payload one link away. Another scope's todo is a 404 everywhere
here; a team member sees the page but not the buttons, and gets 403 from the actions.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from sqlalchemy import select

from switchboard import quarantine
from switchboard.errors import SwitchboardError
from switchboard.models import Attempt, Endpoint, Todo
from switchboard.provider import no_address
from switchboard.reply import replies_of
from switchboard.services import Services, services_of
from switchboard.tenancy import Owner
from switchboard.todos import operator as todo_ops
from switchboard.todos import payload_of, stored_payload
from switchboard.todos.queries import source_webhook, todo_history
from switchboard.web.board import back_params, board_link, state_cell, utc
from switchboard.web.forms import see_other
from switchboard.web.html import (
    EMPTY,
    Safe,
    action_form,
    badge,
    h,
    hidden,
    join,
    kv,
    link_if_web,
    mono,
    muted,
    notice_of,
    page,
    path_part,
    post_form,
    table,
)
from switchboard.web.intake_views import hold_pairs, trace_card
from switchboard.web.session import Viewer

# About this many characters of a payload (or result) are shown; the rest is one link away.
SHOWN_MAX = 64 * 1024
# A string is never cut shorter than this, even when the budget is nearly spent.
STRING_MIN = 200


def clip_json(value: Any, budget: int = SHOWN_MAX) -> tuple[str, bool]:
    """``value`` as indented JSON of about ``budget`` characters at most, and whether anything was
    cut. Cuts fall between JSON values, so the text still parses: a container keeps its first items
    and ends with a marker saying how many were left out; a long string keeps its start and says
    how much it lost."""
    left = budget
    cut = False

    def walk(v: Any) -> Any:
        nonlocal left, cut
        if isinstance(v, dict):
            out: dict[str, Any] = {}
            for i, (key, item) in enumerate(v.items()):
                if left <= 0:
                    cut = True
                    out["…" if "…" not in v else "… (cut)"] = f"{len(v) - i} more keys cut"
                    break
                left -= len(key) + 4
                out[key] = walk(item)
            return out
        if isinstance(v, list):
            items: list[Any] = []
            for i, item in enumerate(v):
                if left <= 0:
                    cut = True
                    items.append(f"… {len(v) - i} more items cut")
                    break
                left -= 2
                items.append(walk(item))
            return items
        if isinstance(v, str) and len(v) > max(left, STRING_MIN):
            keep = max(left, STRING_MIN)
            cut, left = True, left - keep
            return f"{v[:keep]}… ({len(v) - keep} more characters cut)"
        left -= len(json.dumps(v, ensure_ascii=False))
        return v

    try:
        return json.dumps(walk(value), indent=2, ensure_ascii=False), cut
    except (RecursionError, ValueError):
        # Nested deeper than Python walks (only a payload stored before ingest refused those):
        # the compact text, cut where the budget ends.
        text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
        return text[:budget], len(text) > budget


def no_address_text(services: Services, todo: Todo) -> str:
    """Why this todo has no reply address, in words that fit its source."""
    if todo.source == "manual":
        return "This todo was pushed by hand: there is no conversation to answer."
    kind = services.providers.sources.get(todo.source)
    if kind is None:
        return f"No reply address: the {todo.source} source is not installed on this server."
    # The plugin loader wraps a kind's callables in checks; the function underneath says it.
    if inspect.unwrap(kind.derive_address) is no_address:
        return f"No reply address: Switchboard cannot answer {todo.source} deliveries at all."
    return (
        f"No reply address: this {todo.source} event ({todo.kind}) is not a conversation Switchboard can "
        "answer (a push, for instance, has no thread), or it came from another instance than the one "
        "its webhook serves."
    )


def address_card(services: Services, todo: Todo) -> Safe:
    if not todo.reply_to:
        return h('<p class="muted">{text}</p>', text=no_address_text(services, todo))
    reply_to = todo.reply_to
    return kv(
        [("kind", reply_to.get("kind", "")), ("display", reply_to.get("display", ""))]
        + [(k, v) for k, v in sorted(reply_to.items()) if k not in ("kind", "display")]
    )


def replies_table(replies: list[dict[str, Any]]) -> Safe:
    if not replies:
        return Safe('<p class="muted">No replies yet.</p>')
    return table(
        ("Reply", "State", "Where", "Connection", "Link", "Error", "Created"),
        (
            h(
                '<tr><td class="mono">{id}</td><td>{state}</td><td class="mono">{display}</td>'
                '<td>{connection} <span class="muted mono">{fp}</span></td><td>{link}</td>'
                "<td>{error}</td><td>{created}</td></tr>",
                id=r.get("id", ""),
                state=badge(str(r.get("state", "?"))),
                display=r.get("display", ""),
                connection=(r.get("connection") or {}).get("name", ""),
                fp=(r.get("connection") or {}).get("fingerprint", ""),
                link=link_if_web(r.get("permalink")),
                error=r.get("error_class") or "",
                created=utc(r.get("created_at")),
            )
            for r in replies
        ),
    )


def attempts_table(attempts: list[Attempt], slugs: Mapping[str, str]) -> Safe:
    if not attempts:
        return Safe('<p class="muted">Not claimed yet.</p>')
    return table(
        ("#", "Endpoint", "Claimed", "Heartbeats", "Outcome", "Summary", "Error", "Ended"),
        (
            h(
                "<tr><td>{n}</td><td>{endpoint}</td><td>{claimed}</td><td>{hb}</td><td>{outcome}</td>"
                "<td>{summary}</td><td>{error}</td><td>{ended}</td></tr>",
                n=a.number,
                endpoint=mono(slugs.get(a.endpoint_id, a.endpoint_id)),
                claimed=utc(a.claimed_at),
                hb=a.heartbeats,
                outcome=badge(a.outcome) if a.outcome else muted("open"),
                summary=a.summary or "",
                error=a.error or "",
                ended=utc(a.ended_at),
            )
            for a in attempts
        ),
    )


def history_table(history: list[dict[str, Any]]) -> Safe:
    if not history:
        return Safe('<p class="muted">No operator has acted on this todo.</p>')
    return table(
        ("When", "Action", "By", "From", "To", "Detail"),
        (
            h(
                "<tr><td>{at}</td><td>{action}</td><td>{actor}</td><td>{before}</td><td>{after}</td>"
                "<td>{detail}</td></tr>",
                at=utc(e["at"]),
                action=e["action"],
                actor=mono(e["actor"]),
                before=badge(e["from_state"]),
                after=badge(e["to_state"]),
                detail=e["detail"] or "",
            )
            for e in history
        ),
    )


def _todo_url(todo_id: str, back: Mapping[str, str], suffix: str = "") -> str:
    query = f"?{urlencode({'back': urlencode(back)})}" if back else ""
    return f"/ui/todos/{path_part(todo_id)}{suffix}{query}"


def actions_bar(viewer: Viewer, todo: Todo, endpoint: Endpoint, back: Mapping[str, str]) -> Safe:
    """The buttons this viewer may press on this todo now (none for a read-only member)."""
    scope = viewer.scope_of(Owner.of(endpoint))
    if scope is None or not scope.manage:
        return EMPTY
    keep = h('<input type="hidden" name="back" value="{b}">', b=urlencode(back)) if back else EMPTY
    buttons = []
    if todo.state == "failed":
        buttons.append(action_form(viewer, f"/ui/todos/{path_part(todo.id)}/requeue", "Requeue", fields=keep))
    if todo.state == "claimed":
        buttons.append(action_form(viewer, f"/ui/todos/{path_part(todo.id)}/release", "Release", fields=keep))
    if todo.state in ("pending", "claimed", "failed"):
        buttons.append(
            h('<a class="button danger" href="{u}">Cancel…</a>', u=_todo_url(todo.id, back, "/cancel"))
        )
    if not buttons:
        return EMPTY
    return h('<div class="actions todo-actions">{b}</div>', b=join(buttons))


def payload_section(todo: Todo, stored: bytes) -> Safe:
    payload = payload_of(stored)
    if isinstance(payload, str):
        shown, cut = payload[:SHOWN_MAX], len(payload) > SHOWN_MAX
    else:
        shown, cut = clip_json(payload)
    raw = h(
        '<a href="/ui/todos/{id}/payload" download>raw payload ({n} bytes, application/json)</a>',
        id=path_part(todo.id),
        n=f"{todo.payload_size:,}",
    )
    note = (
        h(
            '<p class="hint">Cut to about {n} characters where marked “…”; the whole payload: {raw}.</p>',
            n=f"{SHOWN_MAX:,}",
            raw=raw,
        )
        if cut
        else h('<p class="hint">Download: {raw}.</p>', raw=raw)
    )
    return h("{note}<pre>{payload}</pre>", note=note, payload=shown)


def hold_section(todo: Todo, endpoint: Endpoint, webhook_id: str | None) -> Safe:
    """A held todo: why (reason, actor verdict, rule, fault), until when, and where to decide."""
    if todo.state != quarantine.HELD:
        return EMPTY
    where = "/ui/quarantine" + (f"?{urlencode({'webhook': webhook_id})}" if webhook_id else "")
    return h(
        '<h2>Held in quarantine</h2><section class="card held">{facts}<p>No agent sees it until a person '
        'decides: <a href="{where}">release or discard it in the quarantine list</a>.</p></section>',
        facts=kv(hold_pairs(quarantine.held_view(todo, endpoint.slug, webhook_id))),
        where=where,
    )


def result_section(todo: Todo) -> Safe:
    if todo.result is None:
        return Safe('<p class="muted">No result.</p>')
    shown, cut = clip_json(todo.result)
    note = (
        h('<p class="hint">Cut where marked “…”; the API\'s todo detail has all of it.</p>') if cut else EMPTY
    )
    return h('{note}<pre class="result">{result}</pre>', note=note, result=shown)


def _routing(todo: Todo, webhook_id: str | None) -> Safe:
    """The routing trace, for a viewer who can see the webhook whose delivery made the todo: the
    trace is that webhook's side (its rules' ids and names, the endpoints they name, who released
    it), and a todo a route minted in another scope is the viewer's, the webhook is not
    (docs/api.md, "Scopes and roles"). A webhook deleted since cannot say whose it was."""
    if todo.event_id is not None and webhook_id is None:
        return muted("Not shown: it was decided by a webhook you cannot see, or one deleted since.")
    return trace_card(todo.routing)


async def render(
    request: web.Request, viewer: Viewer, *, error: str | None = None, status: int = 200
) -> web.Response:
    services = services_of(request)
    back = back_params(request.query.get("back") or viewer.form.get("back"))
    async with services.db.read() as s:
        todo, endpoint = await viewer.owned(s, Todo, request.match_info["todo_id"], "todo")
        attempts = list(
            (
                await s.scalars(select(Attempt).where(Attempt.todo_id == todo.id).order_by(Attempt.number))
            ).all()
        )
        slugs = dict(
            (
                await s.execute(
                    select(Endpoint.id, Endpoint.slug).where(
                        Endpoint.id.in_({a.endpoint_id for a in attempts})
                    )
                )
            ).all()
        )
        history = await todo_history(s, todo.id)
        stored = await stored_payload(s, todo)
        # The delivery that minted it (its webhook's delivery log links back here), if the viewer
        # can see that webhook's scope.
        webhook_id = await source_webhook(s, todo.event_id, [scope.owner for scope in viewer.scopes])
    replies = await replies_of(services, todo.id)
    facts: list[tuple[str, object]] = [
        ("id", mono(todo.id)),
        ("endpoint", endpoint.slug),
        ("queue", todo.queue),
        ("source / kind", f"{todo.source} / {todo.kind}"),
        ("state", state_cell(todo)),
        ("attempts", f"{todo.attempt} of {todo.max_attempts}"),
        ("lease expires", utc(todo.lease_expires_at)),
        ("next retry", utc(todo.next_retry_at)),
        ("created", utc(todo.created_at)),
        ("updated", utc(todo.updated_at)),
        ("finished", utc(todo.finished_at)),
        ("payload size", f"{todo.payload_size:,} bytes"),
    ]
    if todo.event_id and webhook_id:
        delivery = f"/ui/webhooks/{path_part(webhook_id)}/deliveries/{path_part(todo.event_id)}"
        facts.append(("delivery", h('<a href="{u}" class="mono">{id}</a>', u=delivery, id=todo.event_id)))
    if todo.dead_letter:
        facts.insert(5, ("dead letter", todo_ops.dead_reason_text(todo.dead_reason)))
    body = h(
        '<p><a href="{back}">← Board</a></p><h1 class="title">{title}</h1>{actions}'
        '<section class="card">{facts}</section>{hold}'
        "<h2>Routing</h2>{routing}<h2>Result</h2>{result}"
        '<h2>Reply address</h2><section class="card">{address}</section>'
        "<h2>Replies</h2>{replies}<h2>Attempts</h2>{attempts}<h2>History</h2>{history}"
        "<h2>Payload</h2>{payload}",
        back=board_link(back),
        title=todo.title,
        actions=actions_bar(viewer, todo, endpoint, back),
        facts=kv(facts),
        hold=hold_section(todo, endpoint, webhook_id),
        routing=_routing(todo, webhook_id),
        result=result_section(todo),
        address=address_card(services, todo),
        replies=replies_table(replies),
        attempts=attempts_table(attempts, slugs),
        history=history_table(history),
        payload=payload_section(todo, stored),
    )
    return page(
        todo.title, body, viewer, active="board", status=status, error=error, notice=notice_of(request)
    )


async def todo_detail(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await render(request, viewer)


async def raw_payload(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The stored payload, byte for byte, as a JSON download (another scope's todo is a 404)."""
    async with services_of(request).db.read() as s:
        todo, _ = await viewer.owned(s, Todo, request.match_info["todo_id"], "todo")
        stored = await stored_payload(s, todo)
    return web.Response(
        body=stored,
        content_type="application/json",
        charset="utf-8",
        headers={"Content-Disposition": f'attachment; filename="{todo.id}-payload.json"'},
    )


async def cancel_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Cancelling is final: this page (a GET, which changes nothing) asks first."""
    back = back_params(request.query.get("back"))
    async with services_of(request).db.read() as s:
        todo, endpoint = await viewer.owned(s, Todo, request.match_info["todo_id"], "todo")
    viewer.managing(Owner.of(endpoint), "cancel its todos")
    if todo.state not in ("pending", "claimed", "failed"):
        raise SwitchboardError(
            "conflict", f"todo {todo.id} is {todo_ops.board_state(todo)}: there is nothing to cancel"
        )
    keep = h('<input type="hidden" name="back" value="{b}">', b=urlencode(back)) if back else EMPTY
    form = post_form(
        viewer,
        f"/ui/todos/{path_part(todo.id)}/cancel",
        "inline",
        join(
            [
                keep,
                hidden("confirm", "yes"),
                Safe('<button type="submit" class="danger">Yes, cancel it</button>'),
            ]
        ),
    )
    claimed = (
        " An agent holds it now: its claim ends, and whatever it reports later is refused."
        if todo.state == "claimed"
        else ""
    )
    body = h(
        '<h1>Cancel this todo?</h1><section class="card"><p class="title"><strong>{title}</strong> '
        '<span class="mono muted">{id}</span> ({state})</p><p>Cancelling is final: the todo leaves its '
        "queue for good and cannot be requeued.{claimed} Its history will say you did it.</p>"
        '<p>{form} <a href="{no}">No, keep it</a></p></section>',
        title=todo.title,
        id=todo.id,
        state=todo_ops.board_state(todo),
        claimed=claimed,
        form=form,
        no=_todo_url(todo.id, back),
    )
    return page("Cancel todo", body, viewer, active="board")


def _action(name: str) -> Any:
    act = {"requeue": todo_ops.requeue, "release": todo_ops.release, "cancel": todo_ops.cancel}[name]
    done = {"requeue": "todo_requeued", "release": "todo_released", "cancel": "todo_cancelled"}[name]

    async def handler(request: web.Request, viewer: Viewer) -> web.StreamResponse:
        todo_id = request.match_info["todo_id"]
        back = back_params(viewer.form.get("back"))
        if name == "cancel" and viewer.form.get("confirm") != "yes":
            # Only the confirmation page's form says yes: anything else is sent there first.
            raise see_other(_todo_url(todo_id, back, "/cancel"))
        try:
            await act(
                services_of(request),
                todo_id,
                scopes=[scope.owner for scope in viewer.scopes],
                actor=todo_ops.Actor.human(viewer.human_id, viewer.handle),
                manage=lambda owner: viewer.managing(owner, f"{name} its todos"),
            )
        except SwitchboardError as exc:
            if exc.code == "not_found":
                raise
            # Refused (a read-only member, or the todo moved on): the page as it is now, saying why.
            return await render(request, viewer, error=exc.message, status=exc.http_status)
        raise see_other(_todo_url(todo_id, back), done)

    handler.__name__ = f"todo_{name}"
    return handler


requeue = _action("requeue")
release = _action("release")
cancel = _action("cancel")
