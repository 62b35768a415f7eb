"""An operator's hands on todos: requeue, release, cancel, and requeue in bulk by filter.

These are not agent verbs: the API, the web UI and the CLI call them for a human (or the instance
operator) who may manage the todo's owner scope. Each action runs in one transaction with the todo
row locked, writes a ``todo_events`` row saying who did what from which state, and re-pended todos
ring the doorbell.

* **requeue** (failed, dead letters included → pending): a fresh attempt budget, ``attempt`` back to
  0 of ``max_attempts`` (the earlier attempts stay in the history, numbered on). The dead-letter
  mark, its reason and the finish time are cleared. A todo of a revoked or expired endpoint cannot
  be requeued: nothing could claim it.
* **release** (claimed → pending): the lease ends now, whoever holds it; as with the agent's own
  ``release`` the attempt is given back. The agent's later ``heartbeat``, ``complete`` or ``fail``
  on that claim is ``conflict`` (with fencing, always; without, unless the same endpoint has
  claimed it again meanwhile).
* **cancel** (pending, claimed or failed → ``cancelled``): final, like ``done``; an open attempt
  ends ``cancelled`` and the todo's ``finished_at`` is now.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.db import utcnow
from switchboard.errors import conflict, invalid, not_found
from switchboard.ids import new_id
from switchboard.models import Attempt, Endpoint, Todo, TodoEvent
from switchboard.services import Services
from switchboard.tenancy import Owner, endpoint_is_live
from switchboard.todos.queries import TodoFilter, conditions, history_view, operator_row, visible
from switchboard.todos.views import back_to_pending, first_per_subject, replies_summary, subject_free

# Why a todo became a dead letter (``todos.dead_reason``), and how each surface says it.
DEAD_REASONS = {
    "attempts_exhausted": "its last attempt failed",
    "lease_expired": "the lease of its last attempt expired",
    "endpoint_revoked": "its endpoint was revoked",
}
ACTIONS = ("requeue", "release", "cancel")
# Bulk requeue: the states it takes, and how many todos one call may requeue.
BULK_STATES = ("dead", "failed")
BULK_LIMIT_DEFAULT = 1000
BULK_LIMIT_MAX = 10_000
# Rows per transaction in a bulk requeue, so it never holds the write lock long.
BULK_BATCH = 200

# Checks that the caller may change a todo of this owner scope; raises (``forbidden``) if not.
ManageCheck = Callable[[Owner], object]


@dataclass(frozen=True)
class Actor:
    """Who acts, as the history shows it: ``human:HANDLE`` (API, web UI) or ``cli:USER``."""

    label: str
    human_id: str | None = None

    @classmethod
    def human(cls, human_id: str, handle: str) -> Actor:
        return cls(f"human:{handle}", human_id)

    @classmethod
    def cli(cls) -> Actor:
        """The instance operator at the CLI, named by the OS account when there is one."""
        try:
            user = getpass.getuser()
        except (OSError, KeyError):
            return cls("cli")
        return cls(f"cli:{user[:90]}")


def board_state(todo: Todo) -> str:
    """The state as listings filter it: ``dead`` for a dead letter, else the stored state."""
    return "dead" if todo.dead_letter else todo.state


def dead_reason_text(reason: str | None) -> str:
    return DEAD_REASONS.get(reason or "", reason or "unknown")


async def _locked(s: AsyncSession, todo_id: Any, scopes: list[Owner] | None) -> tuple[Todo, Endpoint]:
    """The todo and its endpoint, the todo row locked (PostgreSQL; SQLite's writer holds the
    database); ``not_found`` outside ``scopes``."""
    if not isinstance(todo_id, str) or not todo_id or len(todo_id) > 40:
        raise not_found(f"todo {todo_id!r}")
    # The endpoint's row first, share-locked: a revocation committing now (it locks the endpoint,
    # then its todos) is waited for and seen, in the order it takes its locks. Judged on an
    # unlocked read, a dead letter requeued during a revocation was left pending on a revoked
    # endpoint (PostgreSQL; SQLite's writer holds the database).
    await _share_endpoints(s, select(Todo.endpoint_id).where(Todo.id == todo_id))
    found = (
        await s.execute(
            select(Todo, Endpoint)
            .join(Endpoint, Todo.endpoint_id == Endpoint.id)
            .where(Todo.id == todo_id, visible(scopes))
            .with_for_update(of=Todo)
        )
    ).first()
    if found is None:
        raise not_found(f"todo {todo_id!r}")
    return found[0], found[1]


async def _share_endpoints(s: AsyncSession, endpoint_ids: Select[Any]) -> None:
    """Share-lock the endpoints ``endpoint_ids`` names, in id order (PostgreSQL; SQLite renders no
    lock clause, its writer holding the whole database)."""
    locking = select(Endpoint.id).where(Endpoint.id.in_(endpoint_ids)).order_by(Endpoint.id)
    await s.execute(locking.with_for_update(read=True))


async def _close_open_attempt(s: AsyncSession, todo: Todo, now: datetime, outcome: str, error: str) -> None:
    attempt = await s.scalar(
        select(Attempt)
        .where(Attempt.todo_id == todo.id, Attempt.ended_at.is_(None))
        .order_by(Attempt.number.desc())
        .limit(1)
    )
    if attempt is not None:
        attempt.outcome, attempt.ended_at, attempt.error = outcome, now, error


def _record(
    s: AsyncSession, todo: Todo, actor: Actor, action: str, before: str, detail: str | None, now: datetime
) -> TodoEvent:
    event = TodoEvent(
        id=new_id("te"),
        todo_id=todo.id,
        action=action,
        actor=actor.label,
        human_id=actor.human_id,
        from_state=before,
        to_state=board_state(todo),
        detail=detail,
        created_at=now,
    )
    s.add(event)
    return event


def _requeue(
    s: AsyncSession, todo: Todo, endpoint: Endpoint, actor: Actor, now: datetime, note: str
) -> TodoEvent:
    if todo.state != "failed":
        raise conflict(
            f"todo {todo.id} is {board_state(todo)}: only failed todos and dead letters are requeued"
        )
    if not endpoint_is_live(endpoint, now):
        raise conflict(
            f"endpoint {endpoint.slug!r} is {endpoint.state}: nothing could claim todo {todo.id} again"
        )
    before = board_state(todo)
    detail = f"attempts reset ({todo.attempt} of {todo.max_attempts} were used)"
    if todo.dead_letter:
        detail += f"; it was a dead letter: {dead_reason_text(todo.dead_reason)}"
    back_to_pending(todo, now)
    todo.attempt = 0
    todo.dead_letter, todo.dead_reason = False, None
    todo.finished_at, todo.finished_by = None, None
    return _record(s, todo, actor, "requeue", before, f"{detail}{note}", now)


async def _answer(s: AsyncSession, todo: Todo, endpoint: Endpoint, event: TodoEvent) -> dict[str, Any]:
    replies = (await replies_summary(s, [todo.id]))[todo.id]
    return {"todo": operator_row(todo, endpoint.slug, replies), "event": history_view(event)}


async def _act(
    services: Services,
    action: str,
    todo_id: str,
    *,
    scopes: list[Owner] | None,
    actor: Actor,
    manage: ManageCheck | None,
) -> dict[str, Any]:
    now = utcnow()
    async with services.db.write() as s:
        todo, endpoint = await _locked(s, todo_id, scopes)
        if manage is not None:
            manage(Owner.of(endpoint))
        if action == "requeue":
            # The subject is asked of a failed todo only: any other is refused for its state (a
            # pending or claimed ``once`` todo is itself the open todo about its subject).
            if (
                todo.state == "failed"
                and todo.once_key is not None
                and not await s.scalar(
                    select(func.count()).select_from(Todo).where(Todo.id == todo.id, subject_free())
                )
            ):
                raise conflict(
                    f"todo {todo.id}: another todo about its subject is open;"
                    " it can be requeued once that one has ended"
                )
            event = _requeue(s, todo, endpoint, actor, now, "")
        elif action == "release":
            event = await _release(s, todo, actor, now)
        else:
            event = await _cancel(s, todo, actor, now)
        answer = await _answer(s, todo, endpoint, event)
    services.metrics.inc("switchboard_todo_transitions_total", verb=f"operator_{action}")
    if todo.state == "pending":
        await services.todos_created([todo.id])
    return answer


async def _release(s: AsyncSession, todo: Todo, actor: Actor, now: datetime) -> TodoEvent:
    if todo.state != "claimed":
        raise conflict(f"todo {todo.id} is {board_state(todo)}, not claimed: there is no lease to release")
    lease = todo.lease_expires_at
    await _close_open_attempt(s, todo, now, "released", f"released by {actor.label}")
    todo.attempt = max(todo.attempt - 1, 0)
    back_to_pending(todo, now)
    until = f" (its lease ran until {lease.isoformat(timespec='seconds')})" if lease else ""
    return _record(
        s, todo, actor, "release", "claimed", f"the claim ended{until}; the attempt is given back", now
    )


async def _cancel(s: AsyncSession, todo: Todo, actor: Actor, now: datetime) -> TodoEvent:
    if todo.state not in ("pending", "claimed", "failed"):
        raise conflict(
            f"todo {todo.id} is {board_state(todo)}: only pending, claimed and failed todos are cancelled"
        )
    before = board_state(todo)
    detail = f"it was a dead letter: {dead_reason_text(todo.dead_reason)}" if todo.dead_letter else None
    if todo.state == "claimed":
        await _close_open_attempt(s, todo, now, "cancelled", f"cancelled by {actor.label}")
    todo.state = "cancelled"
    todo.lease_expires_at = todo.lease_token_hash = todo.next_retry_at = todo.next_ring_at = None
    todo.dead_letter, todo.dead_reason = False, None
    # Finished, by no endpoint: no agent's reply window opens on an operator's cancel.
    todo.finished_at, todo.finished_by = now, None
    todo.updated_at = now
    return _record(s, todo, actor, "cancel", before, detail, now)


async def requeue(
    services: Services,
    todo_id: str,
    *,
    scopes: list[Owner] | None,
    actor: Actor,
    manage: ManageCheck | None = None,
) -> dict[str, Any]:
    """Failed or dead-lettered → pending with a fresh attempt budget: ``{"todo", "event"}``.
    ``not_found`` outside ``scopes``; ``manage`` refuses a caller who may only read the scope;
    ``conflict`` in any other state."""
    return await _act(services, "requeue", todo_id, scopes=scopes, actor=actor, manage=manage)


async def release(
    services: Services,
    todo_id: str,
    *,
    scopes: list[Owner] | None,
    actor: Actor,
    manage: ManageCheck | None = None,
) -> dict[str, Any]:
    """Claimed → pending: the holder's lease ends now (see the module docstring)."""
    return await _act(services, "release", todo_id, scopes=scopes, actor=actor, manage=manage)


async def cancel(
    services: Services,
    todo_id: str,
    *,
    scopes: list[Owner] | None,
    actor: Actor,
    manage: ManageCheck | None = None,
) -> dict[str, Any]:
    """Pending, claimed or failed → cancelled, for good."""
    return await _act(services, "cancel", todo_id, scopes=scopes, actor=actor, manage=manage)


async def _takeable(s: AsyncSession, where: list[ColumnElement[bool]]) -> int:
    """How many of the todos ``where`` matches a bulk requeue takes: every one without a ``once``
    key, and one per ``once`` subject (the batches below requeue the oldest; the others then wait
    while it is open), so the preview counts what the requeue does."""
    joined = select(func.count()).select_from(Todo).join(Endpoint, Todo.endpoint_id == Endpoint.id)
    plain = await s.scalar(joined.where(*where, Todo.once_key.is_(None)))
    subjects = (
        select(Todo.endpoint_id, Todo.queue, Todo.once_key)
        .join(Endpoint, Todo.endpoint_id == Endpoint.id)
        .where(*where, Todo.once_key.is_not(None))
        .distinct()
        .subquery()
    )
    once = await s.scalar(select(func.count()).select_from(subjects))
    return int(plain or 0) + int(once or 0)


def check_bulk(filters: TodoFilter, limit: Any) -> int:
    if filters.state not in BULK_STATES:
        raise invalid(f"a bulk requeue takes state {' or '.join(BULK_STATES)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= BULK_LIMIT_MAX:
        raise invalid(f"limit must be an integer between 1 and {BULK_LIMIT_MAX}")
    return limit


async def requeue_matching(
    services: Services,
    filters: TodoFilter,
    *,
    scopes: list[Owner] | None,
    actor: Actor,
    limit: Any = BULK_LIMIT_DEFAULT,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Requeue every todo in ``scopes`` matching ``filters`` (its state ``dead`` or ``failed``), at
    most ``limit``, oldest first, each with its own history row; todos of revoked or expired
    endpoints are left alone. ``{"matched", "requeued", "todo_ids", "more", "dry_run"}``:
    ``matched`` is how many it takes, counted before (one per ``once`` subject; a ``dry_run``
    changes nothing), ``more`` whether any still match after. Batches commit one by one: a failure
    part-way keeps what was done."""
    limit = check_bulk(filters, limit)
    now = utcnow()
    live = (
        Endpoint.state == "active",
        or_(Endpoint.expires_at.is_(None), Endpoint.expires_at > now),
        # A ``once`` todo whose subject has an open todo waits for it (views.subject_free).
        subject_free(),
    )
    note = f"; bulk requeue of {filters.described()}"
    async with services.db.read() as s:
        where = [*await conditions(s, scopes, filters), *live]
        matched = await _takeable(s, where)
    done: list[str] = []
    while not dry_run and len(done) < limit:
        async with services.db.write() as s:
            where = [*await conditions(s, scopes, filters), *live]
            # The batch's endpoints share-locked before its todos, as ``_locked`` does: the
            # liveness below is then read after any revocation of them has committed.
            await _share_endpoints(
                s,
                select(Todo.endpoint_id)
                .join(Endpoint, Todo.endpoint_id == Endpoint.id)
                .where(*where)
                .order_by(Todo.created_at, Todo.id)
                .limit(min(BULK_BATCH, limit - len(done))),
            )
            rows = (
                await s.execute(
                    select(Todo, Endpoint)
                    .join(Endpoint, Todo.endpoint_id == Endpoint.id)
                    .where(*where)
                    .order_by(Todo.created_at, Todo.id)
                    .limit(min(BULK_BATCH, limit - len(done)))
                    .with_for_update(of=Todo, skip_locked=True)
                )
            ).all()
            # Two of one ``once`` subject in a batch: only the oldest goes back (the other then waits).
            batch: list[str] = []
            for todo, endpoint in first_per_subject(rows, lambda row: row[0]):
                _requeue(s, todo, endpoint, actor, now, note)
                batch.append(todo.id)
        if not batch:
            break
        done += batch
        services.metrics.inc("switchboard_todo_transitions_total", len(batch), verb="operator_requeue")
        await services.todos_created(batch)
    async with services.db.read() as s:
        where = [*await conditions(s, scopes, filters), *live]
        more = (
            await s.scalar(
                select(Todo.id).join(Endpoint, Todo.endpoint_id == Endpoint.id).where(*where).limit(1)
            )
        ) is not None
    return {"matched": matched, "requeued": len(done), "todo_ids": done, "more": more, "dry_run": dry_run}
