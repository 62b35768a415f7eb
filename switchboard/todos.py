"""Todos: minting them, reading them, and the rows every surface shows.

The lifecycle verbs (claim, heartbeat, complete, fail, release) and the background reaper and
retry scheduler live here too; MCP, the API and the CLI call these functions and never touch the
table themselves.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.db import Database, utcnow
from switchboard.errors import invalid, not_found
from switchboard.ids import new_id
from switchboard.models import Endpoint, Reply, Todo
from switchboard.tenancy import check_queue, endpoint_is_live

DEFAULT_MAX_ATTEMPTS = 5
MAX_PAYLOAD_BYTES = 5 * 1024 * 1024
TITLE_LIMIT = 300


def rfc3339(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_todo_row(
    *,
    endpoint_id: str,
    queue: str,
    source: str,
    kind: str,
    title: str,
    payload: Any,
    reply_to: dict[str, Any] | None = None,
    event_id: str | None = None,
    now: datetime | None = None,
) -> Todo:
    """A pending todo, ready to add to the caller's transaction (ingest mints these per target)."""
    now = now or utcnow()
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    flat_title = " ".join(str(title).split())[:TITLE_LIMIT] or "(untitled)"
    return Todo(
        id=new_id("td"),
        endpoint_id=endpoint_id,
        event_id=event_id,
        queue=queue,
        source=source,
        kind=kind[:100],
        title=flat_title,
        state="pending",
        attempt=0,
        max_attempts=DEFAULT_MAX_ATTEMPTS,
        dead_letter=False,
        payload=body,
        payload_size=len(body),
        reply_to=reply_to,
        ring_count=0,
        next_ring_at=now,
        created_at=now,
        updated_at=now,
    )


async def push(
    db: Database, *, endpoint_slug: str, title: str, queue: str | None = None, payload: Any = None
) -> Todo:
    """An operator-made todo (``todo push``): no event, no reply address."""
    if not isinstance(title, str) or not title.strip():
        raise invalid("title must not be empty")
    async with db.write() as s:
        endpoint = await s.scalar(select(Endpoint).where(Endpoint.slug == endpoint_slug))
        if endpoint is None:
            raise not_found(f"endpoint {endpoint_slug!r}")
        if not endpoint_is_live(endpoint):
            raise invalid(f"endpoint {endpoint_slug!r} is not active")
        queue = check_queue(queue or endpoint.queues[0])
        if queue not in endpoint.queues:
            raise invalid(f"queue {queue!r} is not granted to endpoint {endpoint_slug!r}")
        todo = new_todo_row(
            endpoint_id=endpoint.id,
            queue=queue,
            source="manual",
            kind="manual",
            title=title,
            payload=payload if payload is not None else {},
        )
        if todo.payload_size > MAX_PAYLOAD_BYTES:
            raise invalid("payload is larger than 5 MiB")
        s.add(todo)
    return todo


async def replies_summary(s: AsyncSession, todo_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{"count","last_state","last_permalink"}`` per todo, in two queries whatever the count."""
    if not todo_ids:
        return {}
    counts = dict(
        (
            await s.execute(
                select(Reply.todo_id, func.count()).where(Reply.todo_id.in_(todo_ids)).group_by(Reply.todo_id)
            )
        ).all()
    )
    out = {tid: {"count": 0, "last_state": None, "last_permalink": None} for tid in todo_ids}
    if counts:
        rows = await s.execute(
            select(Reply.todo_id, Reply.state, Reply.permalink, Reply.created_at, Reply.id)
            .where(Reply.todo_id.in_(list(counts)))
            .order_by(Reply.created_at, Reply.id)
        )
        for todo_id, state, permalink, _, _ in rows:
            out[todo_id].update(count=counts[todo_id], last_state=state, last_permalink=permalink)
    return out


def public_reply_to(reply_to: dict[str, Any] | None) -> dict[str, Any] | None:
    """The address as agents see it: kind, display and the non-secret fields (all of them are)."""
    return dict(reply_to) if reply_to else None


def todo_row(todo: Todo, replies: dict[str, Any] | None = None) -> dict[str, Any]:
    """A todo as MCP, the API and the CLI show it (SPEC §5.2), without its payload."""
    return {
        "id": todo.id,
        "queue": todo.queue,
        "source": todo.source,
        "kind": todo.kind,
        "title": todo.title,
        "state": todo.state,
        "attempt": todo.attempt,
        "max_attempts": todo.max_attempts,
        "lease_expires_at": rfc3339(todo.lease_expires_at),
        "next_retry_at": rfc3339(todo.next_retry_at),
        "dead_letter": todo.dead_letter,
        "created_at": rfc3339(todo.created_at),
        "updated_at": rfc3339(todo.updated_at),
        "payload_size": todo.payload_size,
        "reply_to": public_reply_to(todo.reply_to),
        "replies": replies or {"count": 0, "last_state": None, "last_permalink": None},
    }


def payload_of(todo: Todo) -> Any:
    try:
        return json.loads(todo.payload)
    except ValueError:
        return todo.payload.decode("utf-8", errors="replace")


def setup(app: web.Application) -> None:
    """Background lifecycle work (lease reaper, retry scheduler) is added here."""
