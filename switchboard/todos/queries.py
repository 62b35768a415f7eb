"""Reads for humans: the operator API, the web board and the CLI see every todo of the scopes they
may see (``scopes=None``: all of them, for the instance operator on the CLI).

Listings are cursor pages (``paging``), newest first, ordered by ``(created_at, id)`` so that they
walk the ``(endpoint_id, created_at)`` index; a cursor is a todo id, which must be one the caller can
see. The same ``TodoFilter`` narrows the board, ``GET /todos``, ``todo list`` and the bulk requeue,
so a listing previews exactly what a bulk requeue with the same filter would take.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select, true, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.db import Database, rfc3339
from switchboard.errors import invalid, not_found
from switchboard.models import Endpoint, Event, Todo, TodoEvent, Webhook
from switchboard.paging import Page, check_page
from switchboard.tenancy import Owner, scope_filter
from switchboard.todos.views import WITHOUT_BODIES, not_held, replies_summary, todo_detail, todo_row

OPERATOR_LIMIT_MAX = 1000
# The states a listing filters by: ``dead`` is the dead letters (failed, never retried again),
# ``failed`` every failed todo, dead letters included.
BOARD_STATES = ("pending", "claimed", "done", "failed", "dead", "cancelled")
SEARCH_MAX_CHARS = 200
# At most this many (source, kind) pairs are offered as filter choices.
CHOICES_MAX = 500


def parse_time(value: Any, name: str) -> datetime | None:
    """An RFC 3339 timestamp or a date (``2025-01-31``: its midnight UTC); a time without a zone is
    UTC."""
    if value is None:
        return None
    bad = f"{name} must be an RFC 3339 timestamp or a date (YYYY-MM-DD)"
    if isinstance(value, datetime):
        parsed = value
    elif not isinstance(value, str) or not 10 <= len(value) <= 40:
        raise invalid(bad)
    else:
        try:
            parsed = datetime.fromisoformat(value.replace("z", "Z"))
        except ValueError:
            raise invalid(bad) from None
    try:
        # One instant, in UTC: SQLite compares times as text, and would read another offset's
        # clock as UTC's.
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except OverflowError:
        raise invalid(f"{name} is outside the range of dates") from None


def _text(value: Any, name: str, limit: int = 300) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise invalid(f"{name} must be a string of at most {limit} characters")
    return value


@dataclass(frozen=True)
class TodoFilter:
    """What a listing (or a bulk requeue) is narrowed to; every field is optional."""

    endpoint: str | None = None  # an endpoint's slug
    state: str | None = None  # one of BOARD_STATES
    queue: str | None = None
    source: str | None = None
    kind: str | None = None
    search: str | None = None  # part of the title, in any case
    place: str | None = None  # a repository (owner/name) or a channel id, from the reply address
    since: datetime | None = None  # created at or after
    until: datetime | None = None  # created before

    @classmethod
    def of(cls, **values: Any) -> TodoFilter:
        """A filter from untrusted values (query strings, form fields, CLI options), checked."""
        state = _text(values.get("state"), "state")
        if state is not None and state not in BOARD_STATES:
            raise invalid(f"state {state!r} must be one of {', '.join(BOARD_STATES)}")
        return cls(
            endpoint=_text(values.get("endpoint"), "endpoint"),
            state=state,
            queue=_text(values.get("queue"), "queue"),
            source=_text(values.get("source"), "source"),
            kind=_text(values.get("kind"), "kind"),
            search=_text(values.get("search"), "search", SEARCH_MAX_CHARS),
            place=_text(values.get("place"), "place"),
            since=parse_time(values.get("since"), "since"),
            until=parse_time(values.get("until"), "until"),
        )

    def without_state(self) -> TodoFilter:
        return TodoFilter(**{**self.__dict__, "state": None})

    def described(self) -> str:
        """``state=dead queue=ci``: the filter in one line, for history rows and messages."""
        parts = []
        for name, value in self.__dict__.items():
            if value is not None:
                parts.append(f"{name}={rfc3339(value) if isinstance(value, datetime) else value}")
        return " ".join(parts) or "everything"


def visible(scopes: list[Owner] | None) -> ColumnElement[bool]:
    """SQL filter on the joined endpoint: inside ``scopes`` (None: everywhere)."""
    return scope_filter(scopes) if scopes is not None else true()


def _state_condition(state: str) -> ColumnElement[bool]:
    if state == "dead":
        return Todo.dead_letter.is_(True)
    return Todo.state == state


async def conditions(s: AsyncSession, scopes: list[Owner] | None, f: TodoFilter) -> list[ColumnElement[bool]]:
    """The WHERE clauses of ``f`` over ``todos JOIN endpoints``. An endpoint outside ``scopes`` is
    ``not_found``, exactly like one that does not exist. Held todos are left out: the quarantine
    list shows them (``BOARD_STATES`` has no ``held``)."""
    where = [visible(scopes), not_held()]
    if f.endpoint is not None:
        endpoint_id = await s.scalar(select(Endpoint.id).where(Endpoint.slug == f.endpoint, visible(scopes)))
        if endpoint_id is None:
            raise not_found(f"endpoint {f.endpoint!r}")
        where.append(Todo.endpoint_id == endpoint_id)
    if f.state is not None:
        where.append(_state_condition(f.state))
    for column, value in ((Todo.queue, f.queue), (Todo.source, f.source), (Todo.kind, f.kind)):
        if value is not None:
            where.append(column == value)
    if f.search is not None:
        where.append(Todo.title.icontains(f.search, autoescape=True))
    if f.place is not None:
        where.append(
            or_(
                Todo.reply_to["repo"].as_string() == f.place,
                Todo.reply_to["channel"].as_string() == f.place,
            )
        )
    if f.since is not None:
        where.append(Todo.created_at >= f.since)
    if f.until is not None:
        where.append(Todo.created_at < f.until)
    return where


def _joined(*columns: Any) -> Select[Any]:
    return select(*columns).select_from(Todo).join(Endpoint, Todo.endpoint_id == Endpoint.id)


async def _cursor_key(s: AsyncSession, scopes: list[Owner] | None, todo_id: str) -> tuple[Any, Any]:
    key = (
        await s.execute(_joined(Todo.created_at, Todo.id).where(Todo.id == todo_id, visible(scopes)))
    ).first()
    if key is None:
        raise not_found(f"todo {todo_id!r}")
    return key[0], key[1]


async def _exists(s: AsyncSession, where: list[ColumnElement[bool]]) -> bool:
    return (await s.scalar(_joined(Todo.id).where(*where).limit(1))) is not None


async def scoped_page(
    s: AsyncSession,
    *,
    scopes: list[Owner] | None,
    filters: TodoFilter | None = None,
    before: Any = None,
    after: Any = None,
    limit: Any = 50,
) -> Page[tuple[Todo, Endpoint]]:
    """Todos with their endpoints, newest first, one page (see the module docstring). A cursor
    outside ``scopes`` is ``not_found``, exactly like one that does not exist."""
    before, after, limit = check_page(before, after, limit, OPERATOR_LIMIT_MAX)
    where = await conditions(s, scopes, filters or TodoFilter())
    key = tuple_(Todo.created_at, Todo.id)
    query = _joined(Todo, Endpoint).options(*WITHOUT_BODIES).where(*where)
    if after is not None:
        cursor = tuple_(*await _cursor_key(s, scopes, after))
        found = (
            await s.execute(query.where(key > cursor).order_by(Todo.created_at, Todo.id).limit(limit + 1))
        ).all()
        rows = [(t, e) for t, e in found[:limit]][::-1]
        more_newer = len(found) > limit
    else:
        if before is not None:
            query = query.where(key < tuple_(*await _cursor_key(s, scopes, before)))
        found = (
            await s.execute(query.order_by(Todo.created_at.desc(), Todo.id.desc()).limit(limit + 1))
        ).all()
        rows = [(t, e) for t, e in found[:limit]]
        more_older = len(found) > limit
    # The far side of a cursor page (the one the walk came from) is asked once; with no cursor it
    # is the newest page, which has nothing newer.
    if rows and after is not None:
        more_older = await _exists(s, [*where, key < tuple_(rows[-1][0].created_at, rows[-1][0].id)])
    elif after is None:
        more_newer = (
            bool(rows)
            and before is not None
            and await _exists(s, [*where, key > tuple_(rows[0][0].created_at, rows[0][0].id)])
        )
    else:
        more_older = False
    return Page(
        rows,
        next_before=rows[-1][0].id if rows and more_older else None,
        next_after=rows[0][0].id if rows and more_newer else None,
    )


async def state_counts(s: AsyncSession, scopes: list[Owner] | None, filters: TodoFilter) -> dict[str, int]:
    """How many todos match ``filters`` in each of ``BOARD_STATES`` (its own state aside), and
    ``all``: one grouped query."""
    where = await conditions(s, scopes, filters.without_state())
    counts = dict.fromkeys(("all", *BOARD_STATES), 0)
    rows = await s.execute(
        _joined(Todo.state, Todo.dead_letter, func.count())
        .where(*where)
        .group_by(Todo.state, Todo.dead_letter)
    )
    for state, dead, count in rows:
        counts["all"] += count
        counts[state] = counts.get(state, 0) + count
        if dead:
            counts["dead"] += count
    return counts


async def filter_choices(s: AsyncSession, scopes: list[Owner] | None) -> dict[str, list[str]]:
    """The values the board offers as filters: the sources and kinds of the visible todos, and the
    queues granted to the visible endpoints."""
    pairs = (
        await s.execute(
            _joined(Todo.source, Todo.kind)
            .where(visible(scopes))
            .group_by(Todo.source, Todo.kind)
            .order_by(Todo.source, Todo.kind)
            .limit(CHOICES_MAX)
        )
    ).all()
    queues: set[str] = set()
    for granted in (await s.scalars(select(Endpoint.queues).where(visible(scopes)))).all():
        queues.update(granted or [])
    return {
        "sources": sorted({source for source, _ in pairs}),
        "kinds": sorted({kind for _, kind in pairs}),
        "queues": sorted(queues),
    }


def operator_row(todo: Todo, endpoint_slug: str, replies: dict[str, Any] | None = None) -> dict[str, Any]:
    """A todo as operators list it: the agent's row, its endpoint, why it is a dead letter and when
    it finished."""
    return {
        **todo_row(todo, replies),
        "endpoint": endpoint_slug,
        "dead_reason": todo.dead_reason,
        "finished_at": rfc3339(todo.finished_at),
    }


def history_view(event: TodoEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "action": event.action,
        "actor": event.actor,
        "from_state": event.from_state,
        "to_state": event.to_state,
        "detail": event.detail,
        "at": rfc3339(event.created_at),
    }


async def list_in_scopes(
    db: Database,
    *,
    scopes: list[Owner] | None,
    filters: TodoFilter | None = None,
    before: Any = None,
    after: Any = None,
    limit: Any = 50,
) -> Page[dict[str, Any]]:
    """One page of todo rows (no payloads), newest first, each with its endpoint's slug."""
    async with db.read() as s:
        page = await scoped_page(s, scopes=scopes, filters=filters, before=before, after=after, limit=limit)
        summaries = await replies_summary(s, [t.id for t, _ in page.rows])
    rows = [operator_row(t, e.slug, summaries.get(t.id)) for t, e in page.rows]
    return Page(rows, page.next_before, page.next_after)


async def todo_history(s: AsyncSession, todo_id: str) -> list[dict[str, Any]]:
    events = await s.scalars(
        select(TodoEvent).where(TodoEvent.todo_id == todo_id).order_by(TodoEvent.created_at, TodoEvent.id)
    )
    return [history_view(e) for e in events]


async def find_in_scopes(s: AsyncSession, todo_id: str, scopes: list[Owner] | None) -> tuple[Todo, Endpoint]:
    """The todo and its endpoint; ``not_found`` outside ``scopes``."""
    if not isinstance(todo_id, str) or not todo_id or len(todo_id) > 40:
        raise not_found(f"todo {todo_id!r}")
    found = (
        await s.execute(_joined(Todo, Endpoint).where(and_(Todo.id == todo_id, visible(scopes))))
    ).first()
    if found is None:
        raise not_found(f"todo {todo_id!r}")
    return found[0], found[1]


async def source_webhook(s: AsyncSession, event_id: str | None, scopes: list[Owner] | None) -> str | None:
    """The webhook whose delivery ``event_id`` is (``GET /webhooks/{webhook}/deliveries/{id}`` shows
    it), if its scope is one of ``scopes`` (None: every scope). A todo a route minted in another
    scope's endpoint is its reader's, the webhook is not: naming it would tell what the reader may
    not see (docs/api.md, "Routes")."""
    if event_id is None:
        return None
    found = (
        await s.execute(
            select(Event.webhook_id, Endpoint)
            .join(Webhook, Webhook.id == Event.webhook_id)
            .join(Endpoint, Endpoint.id == Webhook.endpoint_id)
            .where(Event.id == event_id)
        )
    ).first()
    if found is None or (scopes is not None and Owner.of(found[1]) not in scopes):
        return None
    return str(found[0])


async def show_in_scopes(db: Database, todo_id: str, *, scopes: list[Owner] | None) -> dict[str, Any]:
    """One todo as ``get_todo`` shows it (payload, result, attempts, replies), plus its endpoint's
    slug, each attempt's endpoint slug and the operators' actions on it (``history``);
    ``not_found`` outside ``scopes``."""
    async with db.read() as s:
        todo, endpoint = await find_in_scopes(s, todo_id, scopes)
        detail = await todo_detail(s, todo)
        attempt_endpoints = {a["endpoint_id"] for a in detail["attempts"]}
        slugs = dict(
            (
                await s.execute(select(Endpoint.id, Endpoint.slug).where(Endpoint.id.in_(attempt_endpoints)))
            ).all()
        )
        history = await todo_history(s, todo.id)
        webhook_id = await source_webhook(s, todo.event_id, scopes)
    for attempt in detail["attempts"]:
        attempt["endpoint"] = slugs.get(attempt["endpoint_id"], attempt["endpoint_id"])
    delivery = {"id": todo.event_id, "webhook": webhook_id} if todo.event_id and webhook_id else None
    return {**detail, "endpoint": endpoint.slug, "history": history, "delivery": delivery}
