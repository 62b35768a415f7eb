"""How todos, their attempts and their replies look on every surface (docs/agents.md, "Tools").

MCP, the operator API, the web board and the CLI all show these dicts; nothing here writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, exists, func, literal_column, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased, defer

from switchboard.db import rfc3339
from switchboard.models import Attempt, Event, Reply, Todo

# A held todo is quarantined (docs/routing.md, "Quarantine"): the human's to release or discard.
# No agent verb lists, shows, claims or touches one, and the board keeps it to the quarantine list.
HELD = "held"


# For reads of many todos that are shown as ``todo_row``/``operator_row``, announced or only change
# state (lists, the board, the doorbell's rings and sweeps, the lease reaper, the retry scheduler):
# the payload (a webhook's body, often tens of KB) and the result stay in the database. Touching
# either on such a row raises, never loads.
WITHOUT_BODIES = (defer(Todo.payload, raiseload=True), defer(Todo.result, raiseload=True))


def payload_column() -> ColumnElement[bytes]:
    """SQL: a todo's stored payload, its own bytes or (``Todo.payload`` null) its event's raw body.
    Ingest keeps no copy of a body it read as it came (``SourceKind.payload_is_body``); an event is
    never deleted while a todo points at it. Named ``payload``, so a statement's row reads alike."""
    # The todo's column written out qualified: SQLite renders a ``RETURNING`` unqualified, inner
    # subqueries included (statements.summary_columns).
    body = _event_body(literal_column("todos.event_id")).scalar_subquery()
    return func.coalesce(Todo.payload, body).label("payload")


def _event_body(event_id: Any) -> Select[bytes]:
    return select(Event.body).where(Event.id == event_id)


async def stored_payload(s: AsyncSession, todo: Todo) -> bytes:
    """``payload_column`` of a todo already loaded: its own bytes, else its event's body."""
    if todo.payload is not None:
        return todo.payload
    body = await s.scalar(_event_body(todo.event_id))
    if body is None:  # the CHECK constraint and the event's foreign key rule this out
        raise LookupError(f"todo {todo.id} keeps its payload on event {todo.event_id}, which is gone")
    return body


def not_held() -> ColumnElement[bool]:
    """SQL filter: the todos agents (and the board's listings) may see."""
    return Todo.state != HELD


def subject_free() -> ColumnElement[bool]:
    """SQL filter: todos that may become pending without breaking one open todo per ``once``
    subject (``uq_todos_once`` holds only pending and claimed todos): no ``once`` key, or no other
    open todo about the same subject on the same endpoint and queue. A failed one waits until that
    other has ended (the retry scheduler, an operator's requeue)."""
    other = aliased(Todo)
    return or_(
        Todo.once_key.is_(None),
        ~exists().where(
            other.endpoint_id == Todo.endpoint_id,
            other.queue == Todo.queue,
            other.once_key == Todo.once_key,
            other.state.in_(("pending", "claimed")),
        ),
    )


T = TypeVar("T")


def first_per_subject(items: Iterable[T], todo_of: Callable[[T], Todo]) -> list[T]:
    """``items`` less any whose todo is about a ``once`` subject an earlier one is about. Two failed
    todos of one subject (ingest made the second while the first waited) both pass
    ``subject_free``: only the first may go back, the other waits for it, or the unique index
    refuses the whole batch (the retry scheduler, an operator's bulk requeue)."""
    subjects: set[tuple[str, str, str]] = set()
    kept: list[T] = []
    for item in items:
        todo = todo_of(item)
        if todo.once_key is not None:
            subject = (todo.endpoint_id, todo.queue, todo.once_key)
            if subject in subjects:
                continue
            subjects.add(subject)
        kept.append(item)
    return kept


def back_to_pending(todo: Todo, now: datetime) -> None:
    """Pending again (a retry, a release, an expired lease, an operator's requeue): no lease, no
    retry time, a doorbell schedule that starts over, and not finished any more (a failure's
    ``finished_at``, and the reply window it opened, end with the retry)."""
    todo.state = "pending"
    todo.finished_at, todo.finished_by = None, None
    todo.lease_expires_at = None
    todo.lease_token_hash = None
    todo.next_retry_at = None
    todo.ring_count = 0
    todo.next_ring_at = now
    todo.updated_at = now


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
    out: dict[str, dict[str, Any]] = {
        tid: {"count": 0, "last_state": None, "last_permalink": None} for tid in todo_ids
    }
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
    """A todo as MCP, the API and the CLI show it (docs/agents.md, "Tools"), without its payload. ``todo`` may
    also be a row a lifecycle statement returned (``statements.VIEW``): it is read by attribute."""
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


def payload_of(stored: bytes) -> Any:
    """A stored payload (``stored_payload``) as every surface shows it: its JSON, or its text."""
    try:
        return json.loads(stored)
    except ValueError:
        return stored.decode("utf-8", errors="replace")


def attempt_view(attempt: Attempt) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "endpoint_id": attempt.endpoint_id,
        "claimed_at": rfc3339(attempt.claimed_at),
        "lease_expires_at": rfc3339(attempt.lease_expires_at),
        "heartbeats": attempt.heartbeats,
        "last_heartbeat_at": rfc3339(attempt.last_heartbeat_at),
        "outcome": attempt.outcome,
        "summary": attempt.summary,
        "error": attempt.error,
        "ended_at": rfc3339(attempt.ended_at),
    }


def reply_view(reply: Reply) -> dict[str, Any]:
    """A reply row as MCP ``get_todo``, the API and the board list it: never the text (only its
    hash is kept), never a secret (the connection's fingerprint snapshot at most)."""
    return {
        "id": reply.id,
        "state": reply.state,
        "connection": {
            "id": reply.connection_id,
            "name": reply.connection_name,
            "fingerprint": reply.connection_fingerprint,
        },
        "address_kind": reply.address_kind,
        "display": reply.display,
        "text_hash": reply.text_hash,
        "provider_object_id": reply.provider_object_id,
        "permalink": reply.permalink,
        "error_class": reply.error_class,
        "error_code": reply.error_code,
        "created_at": rfc3339(reply.created_at),
        "updated_at": rfc3339(reply.updated_at),
    }


async def todo_detail(s: AsyncSession, todo: Todo) -> dict[str, Any]:
    """Row + ``payload``, ``result``, ``finished_at``, ``dead_reason``, ``attempts`` and the
    ``replies`` list (MCP ``get_todo``)."""
    attempts = (
        await s.scalars(select(Attempt).where(Attempt.todo_id == todo.id).order_by(Attempt.number))
    ).all()
    replies = (
        await s.scalars(select(Reply).where(Reply.todo_id == todo.id).order_by(Reply.created_at, Reply.id))
    ).all()
    row = todo_row(todo, (await replies_summary(s, [todo.id]))[todo.id])
    return {
        **row,
        "payload": payload_of(await stored_payload(s, todo)),
        "result": todo.result,
        "finished_at": rfc3339(todo.finished_at),
        # Why it is a dead letter (``attempts_exhausted``, ``lease_expired``, ``endpoint_revoked``).
        "dead_reason": todo.dead_reason,
        "attempts": [attempt_view(a) for a in attempts],
        "replies": [reply_view(r) for r in replies],
    }
