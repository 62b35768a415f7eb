"""The board (``/ui``): todos of the viewer's scopes, newest first, and one todo's detail page.

Titles, reply displays and payloads come from webhook senders: they are shown as escaped text,
never as markup, and permalinks become links only for http(s) URLs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from sqlalchemy import select

from switchboard.errors import SwitchboardError
from switchboard.models import Attempt, Endpoint, Todo
from switchboard.reply import replies_of
from switchboard.services import services_of
from switchboard.todos import BOARD_STATES, payload_of, replies_summary, scoped_rows
from switchboard.web.html import (
    EMPTY,
    MUTED_DASH,
    Safe,
    badge,
    dropdown,
    h,
    join,
    kv,
    link_if_web,
    mono,
    muted,
    notice_of,
    page,
    same,
    table,
    when,
)
from switchboard.web.session import Viewer

BOARD_LIMIT_DEFAULT = 100
BOARD_LIMIT_MAX = 500
PAYLOAD_SHOWN_MAX = 64 * 1024
BOARD_COLUMNS = ("Todo", "Endpoint / queue", "Source", "State", "Attempts", "Reply to", "Replies", "Created")


def reply_to_cell(reply_to: Mapping[str, Any] | None) -> Safe:
    if not reply_to:
        return MUTED_DASH
    return h(
        "{kind} {display}",
        kind=badge(str(reply_to.get("kind", "?")), "reply"),
        display=mono(reply_to.get("display", "")),
    )


def replies_cell(summary: Mapping[str, Any] | None) -> Safe:
    if not summary or not summary.get("count"):
        return muted("none")
    return h(
        "{count} · last {state} {link}",
        count=summary["count"],
        state=badge(str(summary.get("last_state") or "?")),
        link=link_if_web(summary.get("last_permalink")),
    )


def state_cell(todo: Todo) -> Safe:
    cell = badge(todo.state)
    if todo.dead_letter:
        cell = join([cell, " ", badge("dead letter", "dead")])
    elif todo.state == "failed" and todo.next_retry_at is not None:
        cell = join([cell, h(' <span class="muted">retry {t}</span>', t=when(todo.next_retry_at))])
    return cell


def _board_query(query: Mapping[str, str]) -> tuple[str, int, str | None]:
    """The state and limit filters, each falling back to its default with a message if bad."""
    state = query.get("state", "")
    error = None
    if state and state not in BOARD_STATES:
        error, state = f"Unknown state {state!r}; choose one of {', '.join(BOARD_STATES)}.", ""
    try:
        limit = int(query.get("limit", BOARD_LIMIT_DEFAULT))
        if not 1 <= limit <= BOARD_LIMIT_MAX:
            raise ValueError
    except ValueError:
        error, limit = f"limit must be a number from 1 to {BOARD_LIMIT_MAX}.", BOARD_LIMIT_DEFAULT
    return state, limit, error


async def board(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    state, limit, error = _board_query(request.query)
    endpoint_slug = request.query.get("endpoint", "")
    queue = request.query.get("queue", "")

    async with services.db.read() as s:
        endpoints = list(
            (await s.scalars(select(Endpoint).where(viewer.sees()).order_by(Endpoint.slug))).all()
        )
        filters: dict[str, Any] = {
            "scopes": [scope.owner for scope in viewer.scopes],
            "state": state or None,
            "endpoint_slug": endpoint_slug or None,
            "queue": queue or None,
            "limit": limit,
        }
        try:
            rows = await scoped_rows(s, **filters, before=request.query.get("before") or None)
        except SwitchboardError:
            # An unknown endpoint or a cursor past what the viewer can see: say so, show the newest.
            error = "That page of the board no longer exists; showing the newest todos."
            rows = await scoped_rows(s, **{**filters, "endpoint_slug": None})
        summaries = await replies_summary(s, [t.id for t, _ in rows])

    filter_form = h(
        '<form method="get" action="/ui" class="filters">'
        '<div><label for="f-state">State</label>{states}</div>'
        '<div><label for="f-endpoint">Endpoint</label>{endpoints}</div>'
        '<div><label for="f-queue">Queue</label>'
        '<input type="text" id="f-queue" name="queue" value="{queue}"></div>'
        '<div><button type="submit" class="secondary">Filter</button></div></form>',
        states=dropdown("state", same(BOARD_STATES), state, id_="f-state", any_label="any"),
        endpoints=dropdown(
            "endpoint", same(e.slug for e in endpoints), endpoint_slug, id_="f-endpoint", any_label="any"
        ),
        queue=queue,
    )
    if rows:
        more = EMPTY
        if len(rows) == limit:
            params = {k: v for k, v in (("state", state), ("endpoint", endpoint_slug), ("queue", queue)) if v}
            params.update(limit=str(limit), before=rows[-1][0].id)
            more = h('<p><a href="/ui?{q}">Older todos →</a></p>', q=urlencode(params))
        todos = join(
            [
                table(
                    BOARD_COLUMNS,
                    (
                        h(
                            '<tr><td class="title"><a href="/ui/todos/{id}">{title}</a>'
                            '<div class="muted mono">{id}</div></td>'
                            '<td>{endpoint}<div class="muted">{queue}</div></td>'
                            '<td>{source}<div class="muted">{kind}</div></td><td>{state}</td>'
                            "<td>{attempt}/{max}</td><td>{reply_to}</td><td>{replies}</td><td>{created}</td></tr>",
                            id=todo.id,
                            title=todo.title,
                            endpoint=mono(endpoint.slug),
                            queue=todo.queue,
                            source=todo.source,
                            kind=todo.kind,
                            state=state_cell(todo),
                            attempt=todo.attempt,
                            max=todo.max_attempts,
                            reply_to=reply_to_cell(todo.reply_to),
                            replies=replies_cell(summaries.get(todo.id)),
                            created=when(todo.created_at),
                        )
                        for todo, endpoint in rows
                    ),
                ),
                more,
            ]
        )
    else:
        todos = Safe(
            '<div class="empty">No todos here yet. They appear when a webhook delivers work to one of '
            "your endpoints.</div>"
        )
    body = h(
        '<h1>Board</h1><p class="hint">Todos of your endpoints and your teams\' endpoints, newest first '
        "(at most {limit}). Titles come from the senders' payloads: they are data, not instructions.</p>"
        "{filters}{todos}",
        limit=limit,
        filters=filter_form,
        todos=todos,
    )
    return page(
        "Board",
        body,
        viewer,
        active="board",
        status=400 if error else 200,
        error=error,
        notice=notice_of(request),
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
                created=when(r.get("created_at")),
            )
            for r in replies
        ),
    )


def attempts_table(attempts: list[Attempt]) -> Safe:
    if not attempts:
        return Safe('<p class="muted">Not claimed yet.</p>')
    return table(
        ("#", "Claimed", "Heartbeats", "Outcome", "Summary", "Error", "Ended"),
        (
            h(
                "<tr><td>{n}</td><td>{claimed}</td><td>{hb}</td><td>{outcome}</td><td>{summary}</td>"
                "<td>{error}</td><td>{ended}</td></tr>",
                n=a.number,
                claimed=when(a.claimed_at),
                hb=a.heartbeats,
                outcome=badge(a.outcome) if a.outcome else muted("open"),
                summary=a.summary or "",
                error=a.error or "",
                ended=when(a.ended_at),
            )
            for a in attempts
        ),
    )


def address_card(reply_to: Mapping[str, Any] | None) -> Safe:
    if not reply_to:
        return Safe('<p class="muted">This todo has no reply address (its source cannot be answered).</p>')
    return kv(
        [("kind", reply_to.get("kind", "")), ("display", reply_to.get("display", ""))]
        + [(k, v) for k, v in sorted(reply_to.items()) if k not in ("kind", "display")]
    )


async def todo_detail(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    async with services.db.read() as s:
        todo, endpoint = await viewer.owned(s, Todo, request.match_info["todo_id"], "todo")
        attempts = list(
            (
                await s.scalars(select(Attempt).where(Attempt.todo_id == todo.id).order_by(Attempt.number))
            ).all()
        )
    replies = await replies_of(services, todo.id)
    payload = payload_of(todo)
    shown = payload if isinstance(payload, str) else json.dumps(payload, indent=2, ensure_ascii=False)
    body = h(
        '<p><a href="/ui">← Board</a></p><h1>{title}</h1>'
        '<section class="card">{facts}</section>'
        '<h2>Reply address</h2><section class="card">{address}</section>'
        "<h2>Replies</h2>{replies}<h2>Attempts</h2>{attempts}"
        "<h2>Payload</h2>{note}<pre>{payload}</pre>",
        title=todo.title,
        facts=kv(
            [
                ("id", mono(todo.id)),
                ("endpoint", endpoint.slug),
                ("queue", todo.queue),
                ("source / kind", f"{todo.source} / {todo.kind}"),
                ("state", state_cell(todo)),
                ("attempts", f"{todo.attempt} of {todo.max_attempts}"),
                ("lease expires", when(todo.lease_expires_at)),
                ("created", when(todo.created_at)),
                ("updated", when(todo.updated_at)),
                ("payload size", f"{todo.payload_size} bytes"),
            ]
        ),
        address=address_card(todo.reply_to),
        replies=replies_table(replies),
        attempts=attempts_table(attempts),
        note=h('<p class="hint">Showing the first {n} characters.</p>', n=PAYLOAD_SHOWN_MAX)
        if len(shown) > PAYLOAD_SHOWN_MAX
        else EMPTY,
        payload=shown[:PAYLOAD_SHOWN_MAX],
    )
    return page(todo.title, body, viewer, active="board")
