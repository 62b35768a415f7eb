"""Reads for humans: the operator API, the web board and the CLI see every todo of the scopes they
may see (``scopes=None``: all of them, for the instance operator on the CLI)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, true, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.db import Database
from switchboard.errors import invalid, not_found
from switchboard.models import Endpoint, Todo
from switchboard.tenancy import Owner, scope_filter
from switchboard.todos.views import replies_summary, todo_detail, todo_row

OPERATOR_LIMIT_MAX = 1000
BOARD_STATES = ("pending", "claimed", "done", "failed", "dead")


async def scoped_rows(
    s: AsyncSession,
    *,
    scopes: list[Owner] | None,
    endpoint_slug: str | None = None,
    state: str | None = None,
    queue: str | None = None,
    before: str | None = None,
    limit: int = 50,
) -> list[tuple[Todo, Endpoint]]:
    """Todos with their endpoints, newest first. ``state`` may also be ``dead`` (dead letters);
    ``before`` is a todo id to page past (keyset paging). An endpoint or cursor outside ``scopes``
    is ``not_found``, exactly like one that does not exist."""
    if state is not None and state not in BOARD_STATES:
        raise invalid(f"state {state!r} must be one of {', '.join(BOARD_STATES)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= OPERATOR_LIMIT_MAX:
        raise invalid(f"limit must be an integer between 1 and {OPERATOR_LIMIT_MAX}")
    visible = scope_filter(scopes) if scopes is not None else true()
    query = select(Todo, Endpoint).join(Endpoint, Todo.endpoint_id == Endpoint.id).where(visible)
    if endpoint_slug is not None:
        endpoint_id = await s.scalar(select(Endpoint.id).where(Endpoint.slug == endpoint_slug, visible))
        if endpoint_id is None:
            raise not_found(f"endpoint {endpoint_slug!r}")
        query = query.where(Todo.endpoint_id == endpoint_id)
    if state == "dead":
        query = query.where(Todo.dead_letter.is_(True))
    elif state is not None:
        query = query.where(Todo.state == state)
    if queue is not None:
        query = query.where(Todo.queue == queue)
    if before is not None:
        cursor = (
            await s.execute(
                select(Todo.created_at, Todo.id)
                .join(Endpoint, Todo.endpoint_id == Endpoint.id)
                .where(Todo.id == before, visible)
            )
        ).first()
        if cursor is None:
            raise not_found(f"todo {before!r}")
        query = query.where(tuple_(Todo.created_at, Todo.id) < tuple_(cursor[0], cursor[1]))
    rows = await s.execute(query.order_by(Todo.created_at.desc(), Todo.id.desc()).limit(limit))
    return [(todo, endpoint) for todo, endpoint in rows.all()]


async def list_in_scopes(db: Database, *, scopes: list[Owner] | None, **filters: Any) -> list[dict[str, Any]]:
    """Todo rows (no payloads), newest first, each with its endpoint's slug (see ``scoped_rows``)."""
    async with db.read() as s:
        rows = await scoped_rows(s, scopes=scopes, **filters)
        summaries = await replies_summary(s, [t.id for t, _ in rows])
    return [{**todo_row(t, summaries.get(t.id)), "endpoint": e.slug} for t, e in rows]


async def show_in_scopes(db: Database, todo_id: str, *, scopes: list[Owner] | None) -> dict[str, Any]:
    """One todo as ``get_todo`` shows it (payload, result, attempts, replies), plus its endpoint's
    slug and each attempt's endpoint slug; ``not_found`` outside ``scopes``."""
    async with db.read() as s:
        visible = scope_filter(scopes) if scopes is not None else true()
        found = (
            await s.execute(
                select(Todo, Endpoint.slug)
                .join(Endpoint, Todo.endpoint_id == Endpoint.id)
                .where(Todo.id == todo_id, visible)
            )
        ).first()
        if found is None:
            raise not_found(f"todo {todo_id!r}")
        todo, slug = found
        detail = await todo_detail(s, todo)
        attempt_endpoints = {a["endpoint_id"] for a in detail["attempts"]}
        slugs = dict(
            (
                await s.execute(select(Endpoint.id, Endpoint.slug).where(Endpoint.id.in_(attempt_endpoints)))
            ).all()
        )
    for attempt in detail["attempts"]:
        attempt["endpoint"] = slugs.get(attempt["endpoint_id"], attempt["endpoint_id"])
    return {**detail, "endpoint": slug}
