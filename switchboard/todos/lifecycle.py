"""The agent's verbs (docs/agents.md, "Tools" and "Leases, attempts, retries") and the background
passes that move todos without an agent.

Every verb takes the calling endpoint: a todo of another endpoint is ``not_found``, so existence is
never revealed across endpoints. The reaper and the retry scheduler (``lifecycle_pass``) return
expired and retry-due todos to ``pending``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.db import Database, utcnow
from switchboard.errors import SwitchboardError, conflict, invalid, not_found
from switchboard.ids import new_id, new_token, token_hash
from switchboard.models import Attempt, Endpoint, Todo
from switchboard.sanitize import json_text
from switchboard.services import Services
from switchboard.tenancy import MAX_LEASE_SECONDS, check_queue
from switchboard.todos.batching import claim_rows, complete_row
from switchboard.todos.statements import add_attempt, update_open_attempt
from switchboard.todos.views import (
    WITHOUT_BODIES,
    back_to_pending,
    first_per_subject,
    not_held,
    payload_of,
    replies_summary,
    stored_payload,
    subject_free,
    todo_detail,
    todo_row,
)

log = logging.getLogger("switchboard.todos")

STATES = ("pending", "claimed", "done", "failed", "cancelled")
LIST_LIMIT_DEFAULT = 50
LIST_LIMIT_MAX = 200
RETRY_BASE_SECONDS = 30
RETRY_MAX_SECONDS = 15 * 60
RESULT_MAX_BYTES = 1024 * 1024
SUMMARY_MAX_CHARS = 2000
ERROR_MAX_CHARS = 4000
# Background passes take at most this many rows per transaction, so one pass never holds locks long.
SWEEP_BATCH = 200
# claim_next's ``max``: at most this many todos per call.
CLAIM_MAX = 50
# ``complete`` runs again while the caller still holds a todo that changed under its write.
COMPLETE_ROUNDS = 5


def retry_delay(attempt: int) -> int:
    """Seconds before a failed todo is retried: 30 s doubling per attempt, at most 15 min."""
    # A shift, not ``2 ** n``: the same doubling, and typed int (a power with a variable exponent is not).
    return min(RETRY_BASE_SECONDS << max(attempt - 1, 0), RETRY_MAX_SECONDS)


def _lease_seconds(endpoint: Endpoint, lease_seconds: Any) -> int:
    if lease_seconds is None:
        return min(max(int(endpoint.default_lease_seconds or 300), 1), MAX_LEASE_SECONDS)
    if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, int):
        raise invalid("lease_seconds must be an integer")
    if not 1 <= lease_seconds <= MAX_LEASE_SECONDS:
        raise invalid(f"lease_seconds must be between 1 and {MAX_LEASE_SECONDS}")
    return lease_seconds


def _granted_queue(endpoint: Endpoint, queue: Any) -> str:
    if not isinstance(queue, str) or not queue:
        raise invalid("queue must be a non-empty string")
    check_queue(queue)
    if queue not in endpoint.queues:
        raise SwitchboardError("forbidden", f"queue {queue!r} is not granted to this endpoint")
    return queue


def _text(value: Any, name: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string")
    if len(value) > limit:
        raise invalid(f"{name} is longer than {limit} characters")
    return value


def _json_bytes(value: Any) -> int:
    """The size of ``value`` as JSON in UTF-8, as it is stored and sent (``json.dumps`` would count
    each non-ASCII character as a six-character escape: a result in Chinese met 1 MiB at 350 KB)."""
    try:
        return len(json_text(value).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError):
        raise invalid("result must be a JSON value") from None


def _check_token(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 200:
        raise invalid("lease_token must be a non-empty string")
    return value


def _check_todo_id(todo_id: Any) -> str:
    if not isinstance(todo_id, str) or not todo_id or len(todo_id) > 40:
        raise invalid("todo_id must be a todo id")
    return todo_id


async def _locked_todo(s: AsyncSession, endpoint: Endpoint, todo_id: Any) -> Todo:
    """The endpoint's todo, row-locked for this transaction (SQLite: the write lock is held)."""
    _check_todo_id(todo_id)
    todo = await s.scalar(
        select(Todo).where(Todo.id == todo_id, Todo.endpoint_id == endpoint.id, not_held()).with_for_update()
    )
    if todo is None:
        raise not_found(f"todo {todo_id!r}")
    return todo


def _held(todo: Todo, lease_token: str | None, now: datetime) -> None:
    """Refuse a caller who no longer holds the claim (``conflict``), fenced or not."""
    if todo.state != "claimed":
        raise conflict(f"todo {todo.id} is {todo.state}, not claimed: the lease was lost")
    if todo.lease_expires_at is None or todo.lease_expires_at <= now:
        raise conflict(f"the lease on todo {todo.id} has expired")
    if todo.lease_token_hash is not None:
        if lease_token is None:
            raise conflict(f"todo {todo.id} is claimed with fencing: pass its lease_token")
        if token_hash(lease_token) != todo.lease_token_hash:
            raise conflict(f"lease_token does not match the current claim of todo {todo.id}")
    elif lease_token is not None:
        raise conflict(f"lease_token does not match the current claim of todo {todo.id}")


async def _open_attempt(s: AsyncSession, todo: Todo) -> Attempt | None:
    return await s.scalar(
        select(Attempt)
        .where(Attempt.todo_id == todo.id, Attempt.ended_at.is_(None))
        .order_by(Attempt.number.desc())
        .limit(1)
    )


async def _close_attempt(
    s: AsyncSession,
    todo: Todo,
    now: datetime,
    outcome: str,
    summary: str | None = None,
    error: str | None = None,
) -> None:
    attempt = await _open_attempt(s, todo)
    if attempt is not None:
        attempt.outcome, attempt.ended_at = outcome, now
        attempt.summary, attempt.error = summary, error


def _dead_letter(todo: Todo, now: datetime, reason: str) -> None:
    todo.state = "failed"
    todo.dead_letter = True
    todo.dead_reason = reason  # one of operator.DEAD_REASONS
    todo.next_retry_at = None
    todo.lease_expires_at = None
    todo.lease_token_hash = None
    todo.next_ring_at = None
    todo.updated_at = now


def _lease(todo: Todo, seconds: int, fence: bool, now: datetime) -> str | None:
    token = new_token("sbl") if fence else None
    todo.state = "claimed"
    todo.attempt += 1
    todo.lease_expires_at = now + timedelta(seconds=seconds)
    todo.lease_token_hash = token_hash(token) if token else None
    todo.next_retry_at = None
    todo.next_ring_at = None
    todo.updated_at = now
    return token


async def _attempt_closed(s: AsyncSession, todo: Todo, **values: Any) -> dict[str, Any]:
    """Close or update the todo's open attempt; the todo's replies summary (read separately when
    the todo has no open attempt)."""
    replies = await update_open_attempt(s, todo.id, **values)
    return replies if replies is not None else (await replies_summary(s, [todo.id]))[todo.id]


def _claimed_view(row: dict[str, Any], payload: bytes, token: str | None) -> dict[str, Any]:
    out = {**row, "payload": payload_of(payload)}
    if token is not None:
        # Shown once: only its hash is stored.
        out["lease_token"] = token
    return out


async def list_todos(
    db: Database, endpoint: Endpoint, *, queue: Any = None, state: Any = None, limit: Any = None
) -> list[dict[str, Any]]:
    """The endpoint's todos, newest first, without payloads."""
    query = select(Todo).options(*WITHOUT_BODIES).where(Todo.endpoint_id == endpoint.id, not_held())
    if queue is not None:
        query = query.where(Todo.queue == _granted_queue(endpoint, queue))
    if state is not None:
        if state not in STATES:
            raise invalid(f"state must be one of {', '.join(STATES)}")
        query = query.where(Todo.state == state)
    if limit is None:
        limit = LIST_LIMIT_DEFAULT
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIST_LIMIT_MAX:
        raise invalid(f"limit must be an integer between 1 and {LIST_LIMIT_MAX}")
    async with db.read() as s:
        todos = list(
            (await s.scalars(query.order_by(Todo.created_at.desc(), Todo.id.desc()).limit(limit))).all()
        )
        summaries = await replies_summary(s, [t.id for t in todos])
    return [todo_row(t, summaries[t.id]) for t in todos]


async def get_todo(db: Database, endpoint: Endpoint, todo_id: Any) -> dict[str, Any]:
    if not isinstance(todo_id, str) or not todo_id or len(todo_id) > 40:
        raise invalid("todo_id must be a todo id")
    async with db.read() as s:
        todo = await s.scalar(
            select(Todo).where(Todo.id == todo_id, Todo.endpoint_id == endpoint.id, not_held())
        )
        if todo is None:
            raise not_found(f"todo {todo_id!r}")
        return await todo_detail(s, todo)


async def claim(
    db: Database, endpoint: Endpoint, todo_id: Any, *, lease_seconds: Any = None, fence: Any = False
) -> dict[str, Any]:
    """Claim one pending todo by id: spends an attempt and sets a lease."""
    seconds = _lease_seconds(endpoint, lease_seconds)
    if not isinstance(fence, bool):
        raise invalid("fence must be a boolean")
    now = utcnow()
    async with db.write() as s:
        todo = await _locked_todo(s, endpoint, todo_id)
        if todo.state != "pending":
            detail = " (dead-lettered)" if todo.dead_letter else ""
            raise conflict(f"todo {todo.id} is {todo.state}{detail}, not pending")
        token = _lease(todo, seconds, fence, now)
        replies = await add_attempt(
            s, new_id("at"), todo.id, endpoint.id, now, now + timedelta(seconds=seconds)
        )
        return _claimed_view(todo_row(todo, replies), await stored_payload(s, todo), token)


async def claim_next(
    db: Database,
    endpoint: Endpoint,
    *,
    queue: Any = None,
    lease_seconds: Any = None,
    fence: Any = False,
    max: Any = None,
) -> dict[str, Any] | None:
    """Claim the oldest pending todo of the endpoint (optionally of one queue): the claimed view, or
    None. With ``max`` above 1, up to that many, oldest first, each with its own lease (and its own
    ``lease_token`` when fenced): ``{"todos": [...]}``, plus ``"empty": true`` when there were none.

    Two claimers never get the same todo, and the pick walks ``ix_todos_claimable`` so its cost does
    not grow with the backlog (``batching.claim_rows``).
    """
    many = _claim_max(max)
    claimed = await claim_many(
        db, endpoint, queue=queue, lease_seconds=lease_seconds, fence=fence, limit=many
    )
    if many == 1:
        return claimed[0] if claimed else None
    return {"todos": claimed, "empty": True} if not claimed else {"todos": claimed}


def _claim_max(value: Any) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= CLAIM_MAX:
        raise invalid(f"max must be an integer between 1 and {CLAIM_MAX}")
    return value


async def claim_many(
    db: Database,
    endpoint: Endpoint,
    *,
    queue: Any = None,
    lease_seconds: Any = None,
    fence: Any = False,
    limit: int = 1,
) -> list[dict[str, Any]]:
    """Claim up to ``limit`` of the oldest pending todos; their claimed views, oldest first."""
    seconds = _lease_seconds(endpoint, lease_seconds)
    if not isinstance(fence, bool):
        raise invalid("fence must be a boolean")
    queues = [_granted_queue(endpoint, queue)] if queue is not None else list(endpoint.queues)
    now = utcnow()
    # One token (fenced) and one attempt id per todo that may be claimed; the unused are dropped.
    tokens = [new_token("sbl") for _ in range(limit)] if fence else []
    hashes = {token_hash(t): t for t in tokens}
    rows = await claim_rows(
        db,
        endpoint_id=endpoint.id,
        queues=queues,
        now=now,
        lease_expires_at=now + timedelta(seconds=seconds),
        token_hashes=list(hashes) if fence else [None] * limit,
        attempt_ids=[new_id("at") for _ in range(limit)],
    )
    return [
        _claimed_view(
            todo_row(row, replies), row.payload, hashes.get(row.lease_token_hash) if fence else None
        )
        for row, replies in rows
    ]


async def heartbeat(
    db: Database, endpoint: Endpoint, todo_id: Any, *, lease_seconds: Any = None, lease_token: Any = None
) -> dict[str, Any]:
    """Extend the lease by ``lease_seconds`` from now (default: the endpoint's lease)."""
    seconds = _lease_seconds(endpoint, lease_seconds)
    token = _check_token(lease_token)
    now = utcnow()
    async with db.write() as s:
        todo = await _locked_todo(s, endpoint, todo_id)
        _held(todo, token, now)
        todo.lease_expires_at = now + timedelta(seconds=seconds)
        todo.updated_at = now
        replies = await _attempt_closed(
            s,
            todo,
            heartbeats=Attempt.heartbeats + 1,
            last_heartbeat_at=now,
            lease_expires_at=todo.lease_expires_at,
        )
        return todo_row(todo, replies)


async def complete(
    db: Database,
    endpoint: Endpoint,
    todo_id: Any,
    *,
    result: Any = None,
    summary: Any = None,
    lease_token: Any = None,
) -> dict[str, Any]:
    """Finish a todo the caller holds (``batching.complete_row``: one round trip on PostgreSQL)."""
    todo_id = _check_todo_id(todo_id)
    summary = _text(summary, "summary", SUMMARY_MAX_CHARS)
    token = _check_token(lease_token)
    if result is not None and _json_bytes(result) > RESULT_MAX_BYTES:
        raise invalid("result is larger than 1 MiB")
    # A statement that saw the todo change while it ran writes nothing (``complete_row``); the
    # caller may still hold it, the change a heartbeat of its own claim (its loop beside the work,
    # a parallel call). While the caller holds it, the complete runs again, a few rounds at most.
    for _ in range(COMPLETE_ROUNDS):
        now = utcnow()
        done = await complete_row(
            db,
            todo_id=todo_id,
            endpoint_id=endpoint.id,
            token_hash=token_hash(token) if token is not None else None,
            now=now,
            result=result,
            summary=summary,
        )
        if done is not None:
            row, replies = done
            return todo_row(row, replies)
        refusal = await _refusal(db, endpoint, todo_id, token, now)
        if refusal is not None:
            raise refusal
    # Held at every look, changed under every write: this caller's claim cannot be told apart.
    raise conflict(f"todo {todo_id} changed while this call ran: the lease was lost")


async def _refusal(
    db: Database, endpoint: Endpoint, todo_id: str, token: str | None, now: datetime
) -> SwitchboardError | None:
    """Why a verb that wrote nothing refused: the same error ``_held`` gives under the row lock;
    None when the caller holds the todo now (it changed while the write ran)."""
    async with db.read() as s:
        todo = await s.scalar(
            select(Todo).where(Todo.id == todo_id, Todo.endpoint_id == endpoint.id, not_held())
        )
    if todo is None:
        return not_found(f"todo {todo_id!r}")
    try:
        _held(todo, token, now)
    except SwitchboardError as exc:
        return exc
    return None


async def fail(
    db: Database,
    endpoint: Endpoint,
    todo_id: Any,
    *,
    error: Any = None,
    summary: Any = None,
    lease_token: Any = None,
) -> dict[str, Any]:
    """Fail the attempt: retry later (30 s doubling, at most 15 min) or dead-letter on the last."""
    error = _text(error, "error", ERROR_MAX_CHARS)
    summary = _text(summary, "summary", SUMMARY_MAX_CHARS)
    token = _check_token(lease_token)
    now = utcnow()
    async with db.write() as s:
        todo = await _locked_todo(s, endpoint, todo_id)
        _held(todo, token, now)
        last = todo.attempt >= todo.max_attempts
        replies = await _attempt_closed(
            s, todo, outcome="dead_lettered" if last else "failed", ended_at=now, summary=summary, error=error
        )
        # The failing claim's token hash stays, as a complete's does: a reply in the grace window
        # is fenced as the claim was (reply_checks.check_state). A retry clears it (back_to_pending).
        fenced = todo.lease_token_hash
        if last:
            _dead_letter(todo, now, "attempts_exhausted")
        else:
            todo.state = "failed"
            todo.next_retry_at = now + timedelta(seconds=retry_delay(todo.attempt))
            todo.lease_expires_at = None
            todo.next_ring_at = None
            todo.updated_at = now
        todo.finished_at, todo.finished_by = now, endpoint.id
        todo.lease_token_hash = fenced
        return todo_row(todo, replies)


async def release(
    db: Database, endpoint: Endpoint, todo_id: Any, *, lease_token: Any = None
) -> dict[str, Any]:
    """Give the todo back with no verdict: pending again, and the attempt is not spent."""
    token = _check_token(lease_token)
    now = utcnow()
    async with db.write() as s:
        todo = await _locked_todo(s, endpoint, todo_id)
        _held(todo, token, now)
        replies = await _attempt_closed(s, todo, outcome="released", ended_at=now, summary=None, error=None)
        todo.attempt = max(todo.attempt - 1, 0)
        back_to_pending(todo, now)
        return todo_row(todo, replies)


# ---------------------------------------------------------------------------------------------
# Background work. Each pass locks the rows it moves (PostgreSQL: FOR UPDATE SKIP LOCKED, so two
# processes split the work instead of doing it twice; SQLite: the BEGIN IMMEDIATE write lock) and
# re-checks the condition on the locked row.


async def _any(db: Database, query: Any) -> bool:
    async with db.read() as s:
        return (await s.scalar(query.limit(1))) is not None


async def reap_leases(db: Database, now: datetime | None = None) -> list[str]:
    """Expired leases: back to pending, or dead-lettered on the last attempt. Returns re-pended ids."""
    now = now or utcnow()
    repended: list[str] = []
    # A cheap read first: an idle instance never takes the write lock (SQLite) for nothing.
    if not await _any(db, select(Todo.id).where(Todo.state == "claimed", Todo.lease_expires_at <= now)):
        return repended
    async with db.write() as s:
        todos = (
            await s.scalars(
                select(Todo)
                .options(*WITHOUT_BODIES)
                .where(Todo.state == "claimed", Todo.lease_expires_at <= now)
                .order_by(Todo.lease_expires_at)
                .limit(SWEEP_BATCH)
                .with_for_update(skip_locked=True)
            )
        ).all()
        for todo in todos:
            if todo.attempt >= todo.max_attempts:
                await _close_attempt(s, todo, now, "dead_lettered", error="lease expired")
                _dead_letter(todo, now, "lease_expired")
            else:
                await _close_attempt(s, todo, now, "expired", error="lease expired")
                back_to_pending(todo, now)
                repended.append(todo.id)
    return repended


async def schedule_retries(db: Database, now: datetime | None = None) -> list[str]:
    """Failed todos whose retry time has come: back to pending. Returns their ids.

    A ``once`` todo waits while another todo about its subject is open: one open todo per subject
    (``uq_todos_once``) holds only pending and claimed todos, so ingest may have made one while
    this one waited, and making this one pending too would break the index (and roll back every
    other retry of the pass, on every pass). It is retried once that other todo has ended."""
    now = now or utcnow()
    due = (
        Todo.state == "failed",
        Todo.next_retry_at <= now,
        Todo.dead_letter.is_(False),
        subject_free(),
    )
    if not await _any(db, select(Todo.id).where(*due)):
        return []
    try:
        async with db.write() as s:
            todos = (
                await s.scalars(
                    select(Todo)
                    .options(*WITHOUT_BODIES)
                    .where(*due)
                    .order_by(Todo.next_retry_at)
                    .limit(SWEEP_BATCH)
                    .with_for_update(skip_locked=True)
                )
            ).all()
            moved = first_per_subject(todos, lambda todo: todo)
            for todo in moved:
                back_to_pending(todo, now)
    except IntegrityError:
        # An open todo about one of their subjects was made between the read and the commit
        # (PostgreSQL, another process's ingest): the next pass leaves that one out.
        log.info("retry scheduler: a subject's todo opened meanwhile; the batch waits for the next pass")
        return []
    return [t.id for t in moved]


async def lifecycle_pass(services: Services) -> None:
    """One pass of the lease reaper and the retry scheduler; re-pended todos ring the doorbell."""
    repended = await reap_leases(services.db)
    repended += await schedule_retries(services.db)
    if repended:
        services.metrics.inc("switchboard_todo_transitions_total", len(repended), verb="requeue")
        await services.todos_created(repended)
