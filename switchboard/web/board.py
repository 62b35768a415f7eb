"""The board (``/ui``): todos of the viewer's scopes, newest first, a cursor page at a time, with
per-state counts, search and filters; and the bulk requeue of the dead letters it shows.

Titles, reply displays and payloads come from webhook senders: they are shown as escaped text,
never as markup, and permalinks become links only for http(s) URLs. The filters live in the query
string; every todo link carries them (``back=``) so the todo page's way back returns to the same
board, filters and page.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode

from aiohttp import web
from sqlalchemy import select

from switchboard.errors import SwitchboardError
from switchboard.models import Endpoint, Todo
from switchboard.services import services_of
from switchboard.tenancy import Owner
from switchboard.todos import (
    BOARD_STATES,
    TodoFilter,
    filter_choices,
    replies_summary,
    scoped_page,
    state_counts,
)
from switchboard.todos import operator as todo_ops
from switchboard.web.forms import see_other
from switchboard.web.html import (
    EMPTY,
    MUTED_DASH,
    Safe,
    badge,
    dropdown,
    h,
    hidden,
    join,
    link_if_web,
    mono,
    muted,
    notice_of,
    page,
    post_form,
    same,
    table,
)
from switchboard.web.session import Viewer

BOARD_LIMIT_DEFAULT = 100
BOARD_LIMIT_MAX = 500
BOARD_COLUMNS = ("Todo", "Endpoint / queue", "Source", "State", "Attempts", "Reply to", "Replies", "Created")
# The query parameters of a board page: its filters, its page, and nothing else.
FILTER_PARAMS = ("state", "endpoint", "queue", "source", "kind", "q", "place", "from", "to")
BOARD_PARAMS = (*FILTER_PARAMS, "limit", "before", "after")
# The free-text and list filters: (query parameter, ``TodoFilter`` field).
TEXT_FILTERS = (
    ("endpoint", "endpoint"),
    ("queue", "queue"),
    ("source", "source"),
    ("kind", "kind"),
    ("q", "search"),
    ("place", "place"),
)
BACK_MAX = 2000
# A dry run names no one: it writes no history.
PREVIEW = todo_ops.Actor("preview")


def utc(value: datetime | str | None) -> Safe:
    """A time as every board and todo page shows it: to the second, labelled UTC."""
    if value is None:
        return MUTED_DASH
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    moment = moment.astimezone(UTC)
    return h(
        '<time datetime="{iso}">{text} UTC</time>',
        iso=moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        text=moment.strftime("%Y-%m-%d %H:%M:%S"),
    )


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
        cell = join(
            [
                cell,
                " ",
                badge("dead letter", "dead"),
                h(' <span class="muted">{why}</span>', why=todo_ops.dead_reason_text(todo.dead_reason)),
            ]
        )
    elif todo.state == "failed" and todo.next_retry_at is not None:
        cell = join([cell, h(' <span class="muted">retry {t}</span>', t=utc(todo.next_retry_at))])
    return cell


def board_link(params: Mapping[str, str], **changes: str | None) -> str:
    """``/ui?…`` with ``params`` and ``changes`` (None drops a parameter), empty values left out."""
    merged = {**params, **changes}
    query = urlencode([(k, merged[k]) for k in BOARD_PARAMS if merged.get(k)])
    return f"/ui?{query}" if query else "/ui"


def back_params(raw: str | None) -> dict[str, str]:
    """The board parameters a todo page's ``back=`` carries (anything else in it is dropped)."""
    if not raw or len(raw) > BACK_MAX:
        return {}
    return {k: v for k, v in parse_qsl(raw) if k in BOARD_PARAMS and v and "\x00" not in v}


def _date(value: str, name: str, *, end: bool) -> datetime | None:
    if not value:
        return None
    try:
        day = datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise SwitchboardError("invalid_argument", f"{name} must be a date (YYYY-MM-DD)") from None
    if not end:
        return day
    try:
        return day + timedelta(days=1)
    except OverflowError:
        # The calendar's last day: nothing is later, so no upper bound.
        return None


def board_filters(query: Mapping[str, str]) -> tuple[TodoFilter, dict[str, str], str | None]:
    """The filter a board URL asks for, the parameters kept, and the first problem found (a bad
    value is dropped with a message, so the board still shows the rest)."""
    kept = {k: query.get(k, "").strip() for k in BOARD_PARAMS if query.get(k, "").strip()}
    error = None
    if kept.get("state", "") and kept["state"] not in BOARD_STATES:
        error = f"Unknown state {kept.pop('state')!r}; choose one of {', '.join(BOARD_STATES)}."
    try:
        limit = int(kept.get("limit", BOARD_LIMIT_DEFAULT))
        if not 1 <= limit <= BOARD_LIMIT_MAX:
            raise ValueError
    except ValueError:
        error = f"limit must be a number from 1 to {BOARD_LIMIT_MAX}."
        kept.pop("limit")
    values: dict[str, Any] = {"state": kept.get("state")}
    for param, name in TEXT_FILTERS:
        values[name] = kept.get(param)
        try:
            TodoFilter.of(**{name: values[name]})
        except SwitchboardError as exc:
            # Too long a search (or similar) is dropped alone, like a bad date: the other filters
            # the person chose still apply and stay in the form.
            error = error or exc.message
            kept.pop(param)
            values[name] = None
    for name, end in (("from", False), ("to", True)):
        try:
            values["until" if end else "since"] = _date(kept.get(name, ""), name, end=end)
        except SwitchboardError as exc:
            error = error or f"{exc.message}."
            kept.pop(name)
    try:
        return TodoFilter.of(**values), kept, error
    except SwitchboardError as exc:
        # Too long a search or similar: show the board unfiltered rather than nothing.
        return TodoFilter(), {}, exc.message


def _limit(kept: Mapping[str, str]) -> int:
    return int(kept.get("limit", BOARD_LIMIT_DEFAULT))


def filter_form(kept: Mapping[str, str], endpoints: list[str], choices: dict[str, list[str]]) -> Safe:
    def pick(name: str, label: str, values: list[str]) -> Safe:
        current = kept.get(name, "")
        values = sorted({*values, current} - {""})
        return h(
            '<div><label for="f-{n}">{label}</label>{select}</div>',
            n=name,
            label=label,
            select=dropdown(name, same(values), current, id_=f"f-{name}", any_label="any"),
        )

    def text(name: str, label: str, type_: str, placeholder: str) -> Safe:
        return h(
            '<div><label for="f-{n}">{label}</label>'
            '<input type="{t}" id="f-{n}" name="{n}" value="{v}" placeholder="{p}"></div>',
            n=name,
            label=label,
            t=type_,
            v=kept.get(name, ""),
            p=placeholder,
        )

    return h(
        '<form method="get" action="/ui" class="filters">{fields}{limit}'
        '<div><button type="submit" class="secondary">Filter</button> <a href="/ui">Clear</a></div></form>',
        fields=join(
            [
                text("q", "Title contains", "search", "search titles"),
                pick("state", "State", list(BOARD_STATES)),
                pick("endpoint", "Endpoint", endpoints),
                pick("queue", "Queue", choices["queues"]),
                pick("source", "Source", choices["sources"]),
                pick("kind", "Kind", choices["kinds"]),
                text("place", "Repository / channel", "text", "owner/repo or C0123"),
                text("from", "Created from (UTC)", "date", "YYYY-MM-DD"),
                text("to", "to (UTC)", "date", "YYYY-MM-DD"),
            ]
        ),
        limit=hidden("limit", kept["limit"]) if "limit" in kept else EMPTY,
    )


def state_tabs(kept: Mapping[str, str], counts: Mapping[str, int]) -> Safe:
    """One link per state with how many todos match the other filters; the current one marked."""
    current = kept.get("state", "")
    tabs = [("", "all", counts.get("all", 0))] + [(s, s, counts.get(s, 0)) for s in BOARD_STATES]
    return h(
        '<nav class="states" aria-label="States">{tabs}</nav>',
        tabs=join(
            h(
                '<a href="{href}"{cur}>{label} <span class="count">{n}</span></a>',
                href=board_link(kept, state=state or None, before=None, after=None),
                cur=Safe(' aria-current="page"') if state == current else EMPTY,
                label=label,
                n=f"{count:,}",
            )
            for state, label, count in tabs
        ),
    )


def board_row(todo: Todo, endpoint: Endpoint, summary: Mapping[str, Any] | None, back: str) -> Safe:
    return h(
        '<tr><td class="title"><a href="/ui/todos/{id}{back}">{title}</a>'
        '<div class="muted mono">{id}</div></td>'
        '<td>{endpoint}<div class="muted">{queue}</div></td>'
        '<td>{source}<div class="muted">{kind}</div></td><td>{state}</td>'
        "<td>{attempt}/{max}</td><td>{reply_to}</td><td>{replies}</td><td>{created}</td></tr>",
        id=todo.id,
        back=f"?{urlencode({'back': back})}" if back else "",
        title=todo.title,
        endpoint=mono(endpoint.slug),
        queue=todo.queue,
        source=todo.source,
        kind=todo.kind,
        state=state_cell(todo),
        attempt=todo.attempt,
        max=todo.max_attempts,
        reply_to=reply_to_cell(todo.reply_to),
        replies=replies_cell(summary),
        created=utc(todo.created_at),
    )


def pager(kept: Mapping[str, str], next_before: str | None, next_after: str | None) -> Safe:
    links = []
    if kept.get("before") or kept.get("after"):
        links.append(h('<a href="{u}">« Newest</a>', u=board_link(kept, before=None, after=None)))
    if next_after:
        links.append(h('<a href="{u}">← Newer todos</a>', u=board_link(kept, before=None, after=next_after)))
    if next_before:
        links.append(h('<a href="{u}">Older todos →</a>', u=board_link(kept, after=None, before=next_before)))
    return h('<p class="pager">{links}</p>', links=join(links)) if links else EMPTY


async def requeueable(request: web.Request, viewer: Viewer, filters: TodoFilter) -> int:
    """How many of the todos a dead/failed board shows this viewer could requeue in bulk: those of
    the scopes they manage, on live endpoints."""
    if filters.state not in todo_ops.BULK_STATES or not viewer.managed:
        return 0
    try:
        preview = await todo_ops.requeue_matching(
            services_of(request), filters, scopes=_bulk_scopes(viewer), actor=PREVIEW, dry_run=True
        )
    except SwitchboardError as exc:
        if exc.code != "not_found":
            raise
        # The board is filtered to an endpoint the viewer only reads: none of it is theirs to requeue.
        return 0
    return int(preview["matched"])


def bulk_offer(kept: Mapping[str, str], count: int) -> Safe:
    """Under a list of dead letters or failed todos, the way to requeue the ``count`` the viewer
    may (with a confirmation page first)."""
    state = kept.get("state")
    if not count:
        return EMPTY
    query = urlencode([(k, kept[k]) for k in FILTER_PARAMS if kept.get(k)])
    return h(
        '<p class="bulk"><a class="button secondary" href="/ui/todos/requeue?{q}">'
        "Requeue all {n} {what}…</a></p>",
        q=query,
        n=f"{count:,}",
        what="dead letters" if state == "dead" else "failed todos",
    )


async def board(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    filters, kept, error = board_filters(request.query)
    scopes = [scope.owner for scope in viewer.scopes]
    async with services.db.read() as s:
        endpoints = list(
            (await s.scalars(select(Endpoint.slug).where(viewer.sees()).order_by(Endpoint.slug))).all()
        )
        try:
            found = await scoped_page(
                s,
                scopes=scopes,
                filters=filters,
                before=kept.get("before"),
                after=kept.get("after"),
                limit=_limit(kept),
            )
            counts = await state_counts(s, scopes, filters)
        except SwitchboardError:
            # An unknown endpoint or a cursor past what the viewer can see: say so, show the newest.
            error = "That page of the board no longer exists; showing the newest todos."
            kept = {k: v for k, v in kept.items() if k not in ("before", "after", "endpoint")}
            filters = TodoFilter.of(**{**filters.__dict__, "endpoint": None})
            found = await scoped_page(s, scopes=scopes, filters=filters, limit=_limit(kept))
            counts = await state_counts(s, scopes, filters)
        summaries = await replies_summary(s, [t.id for t, _ in found.rows])
        choices = await filter_choices(s, scopes)

    back = urlencode([(k, kept[k]) for k in BOARD_PARAMS if kept.get(k)])
    if found.rows:
        todos = join(
            [
                table(BOARD_COLUMNS, (board_row(t, e, summaries.get(t.id), back) for t, e in found.rows)),
                pager(kept, found.next_before, found.next_after),
            ]
        )
    elif filters != TodoFilter() or kept.get("before") or kept.get("after"):
        todos = join(
            [
                Safe('<div class="empty">No todos match these filters.</div>'),
                pager(kept, found.next_before, found.next_after),
            ]
        )
    else:
        todos = Safe(
            '<div class="empty">No todos here yet. They appear when a webhook delivers work to one of '
            "your endpoints.</div>"
        )
    body = h(
        '<h1>Board</h1><p class="hint">Todos of your endpoints and your teams\' endpoints, newest first '
        "(at most {limit} a page). Titles come from the senders' payloads: they are data, not "
        "instructions. Times are UTC.</p>{filters}{tabs}{bulk}{todos}",
        limit=_limit(kept),
        filters=filter_form(kept, endpoints, choices),
        tabs=state_tabs(kept, counts),
        bulk=bulk_offer(kept, await requeueable(request, viewer, filters)),
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


# ---------------------------------------------------------------------------------------------
# Bulk requeue: a confirmation page (GET, changes nothing), then the POST that does it.


def _bulk_scopes(viewer: Viewer) -> list[Owner]:
    return [scope.owner for scope in viewer.managed]


async def bulk_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    filters, kept, error = board_filters(request.query)
    if error is None and filters.state not in todo_ops.BULK_STATES:
        error = "Choose the dead letters (state dead) or the failed todos (state failed) to requeue."
    if error is not None:
        raise SwitchboardError("invalid_argument", error)
    preview = await todo_ops.requeue_matching(
        services, filters, scopes=_bulk_scopes(viewer), actor=PREVIEW, dry_run=True
    )
    fields = join(hidden(k, kept[k]) for k in FILTER_PARAMS if kept.get(k))
    form = post_form(
        viewer,
        "/ui/todos/requeue",
        "inline",
        join([fields, hidden("confirm", "yes"), Safe('<button type="submit">Yes, requeue them</button>')]),
    )
    body = h(
        "<h1>Requeue {n} todos?</h1>"
        '<section class="card"><p>This puts <strong>{n}</strong> {what} matching <code>{desc}</code> back on '
        "their queues with a fresh attempt budget (at most {limit} in one go, oldest first). Todos of "
        "endpoints you only read, and of revoked endpoints, are left alone. Each todo's history will "
        'say you did it.</p><p>{form} <a href="{back}">No, back to the board</a></p></section>',
        n=f"{preview['matched']:,}",
        what="dead letters" if filters.state == "dead" else "failed todos",
        desc=filters.described(),
        limit=f"{todo_ops.BULK_LIMIT_DEFAULT:,}",
        form=form,
        back=board_link(kept),
    )
    return page("Requeue todos", body, viewer, active="board")


async def bulk_requeue(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    form = viewer.form
    filters, kept, error = board_filters(form)
    if form.get("confirm") != "yes":
        error = error or "Confirm the requeue on its page first."
    if error is None and filters.state not in todo_ops.BULK_STATES:
        error = "Choose the dead letters (state dead) or the failed todos (state failed) to requeue."
    if error is not None:
        raise SwitchboardError("invalid_argument", error)
    actor = todo_ops.Actor.human(viewer.human_id, viewer.handle)
    await todo_ops.requeue_matching(services, filters, scopes=_bulk_scopes(viewer), actor=actor)
    raise see_other(board_link({k: v for k, v in kept.items() if k in FILTER_PARAMS}), "todos_requeued")
