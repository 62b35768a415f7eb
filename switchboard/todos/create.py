"""Minting todos: the stored row (ingest mints one per target) and the operator's ``todo push``."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, ParamSpec

from sqlalchemy import select

from switchboard.db import Database, utcnow
from switchboard.errors import conflict, invalid, not_found
from switchboard.ids import new_id
from switchboard.models import Endpoint, Todo
from switchboard.tenancy import check_queue, endpoint_is_live

DEFAULT_MAX_ATTEMPTS = 5
MAX_PAYLOAD_BYTES = 5 * 1024 * 1024
TITLE_LIMIT = 300

P = ParamSpec("P")


def encode_payload(payload: Any) -> bytes:
    """A todo's stored payload: compact JSON, UTF-8."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def new_todo_values(
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
    encoded: bytes | None = None,
    in_event: bool = False,
    routing: dict[str, Any] | None = None,
    once_key: str | None = None,
    hold_reason: str | None = None,
    hold_detail: dict[str, Any] | None = None,
    hold_expires_at: datetime | None = None,
) -> dict[str, Any]:
    """A pending todo's column values, as ingest's multi-row insert takes them (``new_todo_row``
    for an ORM object). A plain dict, because ingest mints one per target per delivery and an ORM
    object's instrumented construction cost more than the rest of making the row (issue 12).

    ``encoded`` is ``encode_payload(payload)`` when the caller already has it: ingest encodes a
    delivery's payload once for all its targets instead of once per todo; with ``in_event`` those
    bytes are the event's raw body, which the todo then does not copy (``Todo.payload`` null: its
    readers take the event's). ``routing``: the trace of how intake decided it; ``once_key``: see
    ``uq_todos_once``. With ``hold_reason`` it is ``held`` (quarantined, docs/routing.md): never
    rung, listed or claimed for an agent.

    Every column intake may set is set, None or not, so rows of different kinds share one
    multi-row insert.
    """
    now = now or utcnow()
    body = encoded if encoded is not None else encode_payload(payload)
    if in_event and (event_id is None or encoded is None):
        raise ValueError("a payload kept on the event needs the event and its body")
    flat_title = " ".join(str(title).split())[:TITLE_LIMIT] or "(untitled)"
    return {
        "id": new_id("td"),
        "endpoint_id": endpoint_id,
        "event_id": event_id,
        "queue": queue,
        "source": source,
        "kind": kind[:100],
        "title": flat_title,
        "state": "pending" if hold_reason is None else "held",
        "attempt": 0,
        "max_attempts": DEFAULT_MAX_ATTEMPTS,
        "dead_letter": False,
        "payload": None if in_event else body,
        "payload_size": len(body),
        "reply_to": reply_to,
        "ring_count": 0,
        "next_ring_at": now if hold_reason is None else None,
        "created_at": now,
        "updated_at": now,
        "routing": routing,
        "once_key": once_key,
        "hold_reason": hold_reason,
        "hold_detail": hold_detail,
        "hold_expires_at": hold_expires_at,
    }


def _as_todo(values: Callable[P, dict[str, Any]]) -> Callable[P, Todo]:
    # Typed through ParamSpec, so a caller of ``new_todo_row`` is checked against the values' keywords.
    def make(*args: P.args, **kwargs: P.kwargs) -> Todo:
        return Todo(**values(*args, **kwargs))

    return make


# ``new_todo_values`` as a ``Todo``, ready to add to the caller's session (``todo push``, test worlds).
new_todo_row = _as_todo(new_todo_values)


async def push(
    db: Database, *, endpoint_slug: str, title: str, queue: str | None = None, payload: Any = None
) -> Todo:
    """An operator-made todo (``todo push``): no event, no reply address."""
    if not isinstance(title, str) or not title.strip():
        raise invalid("title must not be empty")
    if len(title) > TITLE_LIMIT:
        # A sender's title is cut to fit; an operator's is refused rather than cut without a word.
        raise invalid(f"title is longer than {TITLE_LIMIT} characters")
    async with db.write() as s:
        # Share-locked: a revocation committing now is waited for and seen. On an unlocked read the
        # todo was pushed onto an endpoint being revoked and stayed pending there, where nothing
        # may claim it (PostgreSQL; SQLite's writer holds the database).
        endpoint = await s.scalar(
            select(Endpoint).where(Endpoint.slug == endpoint_slug).with_for_update(read=True)
        )
        if endpoint is None:
            raise not_found(f"endpoint {endpoint_slug!r}")
        if not endpoint_is_live(endpoint):
            # As for a webhook on it: a conflict with the endpoint's state, not a bad argument.
            raise conflict(f"endpoint {endpoint_slug!r} is not active")
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
