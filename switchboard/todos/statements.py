"""The statements behind the lifecycle verbs, in SQLAlchemy Core: no ORM unit of work on the hot path.

``claim_rows`` and ``complete_row`` are the two verbs every agent calls once per todo. On PostgreSQL
each is ONE statement (data-modifying CTEs), run in autocommit on asyncpg directly
(``Database.run_postgresql``), so it costs one round trip; on SQLite each is an ``UPDATE …
RETURNING`` plus the attempt row, the whole transaction run in one hand-off to the writer's thread
(``Database.run_sqlite``). Both are built in SQLAlchemy Core and compiled by it, once: the claims
here, the completes in ``completes`` (with what they share from here).
The other verbs (``claim`` by id, ``heartbeat``, ``fail``, ``release``) lock the todo through the
ORM and use ``add_attempt`` / ``update_open_attempt`` for their attempt row.

Every statement returns what ``todo_row`` shows (``VIEW``) and the todo's replies summary, so a
verb never reads again after writing.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    BindParameter,
    Column,
    ColumnElement,
    Insert,
    Integer,
    Select,
    String,
    Table,
    Update,
    any_,
    bindparam,
    func,
    insert,
    literal,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.sql.elements import Grouping

from switchboard.db import Database, PostgreSQLRun, SQLiteRun
from switchboard.models import Attempt, Reply, Todo
from switchboard.todos.views import payload_column

# Tables (the ORM types ``__table__`` as any FromClause; these are tables).
TODOS = cast(Table, Todo.__table__)
ATTEMPTS = cast(Table, Attempt.__table__)
_REPLIES = cast(Table, Reply.__table__)
T = TODOS.c
A = ATTEMPTS.c
R = _REPLIES.c
# Another attempts row, inside statements that write ``attempts`` themselves (an unaliased
# subquery would correlate to the row being written).
PRIOR = ATTEMPTS.alias("prior")
STRINGS = ARRAY(String)

# The columns ``todo_row`` shows: every verb's statement returns exactly these.
VIEW = (
    T.id,
    T.queue,
    T.source,
    T.kind,
    T.title,
    T.state,
    T.attempt,
    T.max_attempts,
    T.lease_expires_at,
    T.next_retry_at,
    T.dead_letter,
    T.created_at,
    T.updated_at,
    T.payload_size,
    T.reply_to,
)
# The state as a literal, so that even a generic (prepared) plan can use the partial indexes.
PENDING: ColumnElement[str] = literal_column("'pending'")
CLAIMED: ColumnElement[str] = literal_column("'claimed'")

Executor = AsyncConnection | AsyncSession
# A written todo as its statement returned it (a Row, read by attribute as ``todo_row`` reads a
# Todo), with its replies summary.
Claimed = tuple[Any, dict[str, Any]]


def summary_of(count: int | None, last_state: str | None, last_permalink: str | None) -> dict[str, Any]:
    """The same dict as ``views.replies_summary`` gives, from ``summary_columns`` values."""
    if not count:
        return {"count": 0, "last_state": None, "last_permalink": None}
    return {"count": count, "last_state": last_state, "last_permalink": last_permalink}


def summary_columns(todo_id: Any) -> tuple[Any, Any, Any]:
    """The replies summary of one todo as three scalar subqueries (count, last state, last
    permalink), so a write can return it instead of two more round trips. ``todo_id`` is the todo's
    id: a value, a CTE's column, or (in a SQLite ``RETURNING``) a column written out qualified,
    since SQLite renders ``RETURNING`` columns unqualified and a correlated subquery would then
    compare replies to themselves."""
    latest = select(R.state).where(R.todo_id == todo_id).order_by(R.created_at.desc(), R.id.desc()).limit(1)
    return (
        select(func.count()).select_from(_REPLIES).where(R.todo_id == todo_id).scalar_subquery(),
        latest.scalar_subquery(),
        latest.with_only_columns(R.permalink).scalar_subquery(),
    )


def _next_number(todo_id: Any) -> Any:
    """Attempts are numbered by claims, not by ``todo.attempt``: a release gives the attempt back but
    keeps its row in the history, so the number is the todo's highest one plus one. Run after the
    claim locked the todo, so it sees every earlier attempt."""
    return (
        select(func.coalesce(func.max(PRIOR.c.number), 0) + 1)
        .where(PRIOR.c.todo_id == todo_id)
        .scalar_subquery()
    )


def _attempt_values(
    attempt_id: Any, todo_id: Any, endpoint_id: str, now: datetime, lease_expires_at: datetime
) -> tuple[Any, ...]:
    return (
        attempt_id,
        todo_id,
        _next_number(todo_id),
        literal(endpoint_id, A.endpoint_id.type),
        literal(now, A.claimed_at.type),
        literal(lease_expires_at, A.lease_expires_at.type),
        literal(0, A.heartbeats.type),
    )


_ATTEMPT_COLUMNS = ["id", "todo_id", "number", "endpoint_id", "claimed_at", "lease_expires_at", "heartbeats"]


async def add_attempt(
    s: Executor, attempt_id: str, todo_id: str, endpoint_id: str, now: datetime, lease_expires_at: datetime
) -> dict[str, Any]:
    """Insert a claim's attempt row and return the todo's replies summary, in one statement."""
    numbered = select(
        *_attempt_values(
            literal(attempt_id, A.id.type),
            literal(todo_id, A.todo_id.type),
            endpoint_id,
            now,
            lease_expires_at,
        )
    )
    row = (
        await s.execute(
            insert(ATTEMPTS).from_select(_ATTEMPT_COLUMNS, numbered).returning(*summary_columns(todo_id))
        )
    ).one()
    return summary_of(*row)


def open_attempt(todo_id: Any) -> Any:
    """The todo's open attempt (its newest unended one)."""
    return (
        select(PRIOR.c.id)
        .where(PRIOR.c.todo_id == todo_id, PRIOR.c.ended_at.is_(None))
        .order_by(PRIOR.c.number.desc())
        .limit(1)
        .scalar_subquery()
    )


async def update_open_attempt(s: Executor, todo_id: str, **values: Any) -> dict[str, Any] | None:
    """Update the todo's open attempt and return the todo's replies summary, in one statement; None
    when it has no open attempt (every claim opens one, but a todo row edited by hand may lack it;
    the verbs never required one). Called after the todo is locked."""
    row = (
        await s.execute(
            update(ATTEMPTS)
            .where(A.id == open_attempt(todo_id))
            .values(**values)
            .returning(*summary_columns(todo_id))
        )
    ).first()
    return None if row is None else summary_of(*row)


# ---------------------------------------------------------------------------------------------
# claim_next and complete: each statement is built once per shape, with bind parameters, so a call
# pays neither for building it nor for SQLAlchemy's compilation (its cache key is memoized).


def param(name: str, column: Column[Any]) -> BindParameter[Any]:
    return bindparam(name, type_=column.type)


def _claimed_values(token_hash: Any) -> dict[str, Any]:
    return {
        "state": "claimed",
        "attempt": T.attempt + 1,
        "lease_expires_at": param("p_lease_expires_at", T.lease_expires_at),
        "lease_token_hash": token_hash,
        "next_retry_at": None,
        "next_ring_at": None,
        "updated_at": param("p_now", T.updated_at),
    }


def _pick(sqlite: bool, queues: int) -> Select[Any]:
    """The oldest pending todos of the endpoint (in its ``queues`` queues), walking
    ``ix_todos_claimable``."""
    if queues == 1:
        queue = T.queue == param("p_queue", T.queue)
    elif sqlite:
        # One bind per queue (``p_queue_0`` …), not an expanding IN: a direct statement's text is
        # fixed once compiled. One statement per number of queues an endpoint has.
        queue = T.queue.in_([param(f"p_queue_{i}", T.queue) for i in range(queues)])
    else:
        # PostgreSQL plans an IN list as exactly this; one array keeps the statement text fixed.
        queue = T.queue == any_(bindparam("p_queues", type_=STRINGS))
    return (
        select(T.id, T.created_at)
        .where(T.endpoint_id == param("p_endpoint_id", T.endpoint_id), T.state == PENDING, queue)
        .order_by(T.created_at)
        .limit(bindparam("p_limit", type_=Integer))
    )


def _attempt_columns(attempt_id: Any, todo_id: Any) -> Select[Any]:
    return select(
        attempt_id,
        todo_id,
        _next_number(todo_id),
        param("p_endpoint_id", A.endpoint_id),
        param("p_now", A.claimed_at),
        param("p_lease_expires_at", A.lease_expires_at),
        literal(0, A.heartbeats.type),
    )


@functools.cache
def _claim_postgresql(one_queue: bool) -> Select[Any]:
    # FOR NO KEY UPDATE (``key_share``), the lock the UPDATE below takes anyway: it excludes the
    # other claimers, while FOR UPDATE would also pass over a todo that a row being inserted refers
    # to (the foreign key check holds FOR KEY SHARE on it until that insert commits).
    pick = _pick(False, 1 if one_queue else 2)
    picked = pick.with_for_update(skip_locked=True, key_share=True).cte("picked")
    numbered = select(
        picked.c.id, func.row_number().over(order_by=(picked.c.created_at, picked.c.id)).label("rn")
    ).cte("numbered")
    # Arrays indexed by the claim's rank: the n-th claimed todo gets the n-th token hash and id.
    hashes = Grouping(bindparam("p_token_hashes", type_=STRINGS))
    ids = Grouping(bindparam("p_attempt_ids", type_=STRINGS))
    # No second ``state = 'pending'`` here: the pick locked each row (``FOR UPDATE``) after checking
    # that its newest version is pending, and nobody else can change a row this statement holds.
    # Written again, it let a plan kept without statistics join through a whole pending-only index
    # (``ix_todos_claimable``) instead of looking each id up: 103 ms a claim at 300,000 pending.
    claimed = (
        update(TODOS)
        .where(T.id == numbered.c.id)
        .values(**_claimed_values(hashes[numbered.c.rn]))
        .returning(*VIEW, payload_column(), T.lease_token_hash, numbered.c.rn)
        .cte("claimed")
    )
    # The attempt number reads the statement's snapshot. Only a claim and a release of the same todo
    # by someone else, both committed between this statement's start and its lock on the row, could
    # hide an attempt from it; the unique (todo_id, number) then refuses the whole claim (nothing
    # is written) rather than number two attempts alike, and ``batching`` runs it again.
    attempts = (
        insert(ATTEMPTS)
        .from_select(_ATTEMPT_COLUMNS, _attempt_columns(ids[claimed.c.rn], claimed.c.id))
        .cte("attempts_added")
    )
    count, state, permalink = summary_columns(claimed.c.id)
    return (
        select(
            *(claimed.c[c.name] for c in VIEW),
            claimed.c.payload,
            claimed.c.lease_token_hash,
            count.label("reply_count"),
            state.label("reply_state"),
            permalink.label("reply_permalink"),
            claimed.c.rn,
        )
        .order_by(claimed.c.rn)
        # Referenced by nothing, so added explicitly: PostgreSQL runs a data-modifying CTE anyway.
        .add_cte(attempts)
    )


@functools.cache
def _claim_sqlite(queues: int) -> tuple[Update, Insert]:
    picked = _pick(True, queues).subquery("picked")
    numbered = select(
        picked.c.id, func.row_number().over(order_by=(picked.c.created_at, picked.c.id)).label("rn")
    ).subquery("numbered")
    # SQLite has no arrays: the n-th token hash is the n-th element of a JSON list.
    token_hash = func.json_extract(
        bindparam("p_token_hashes", type_=String), func.printf("$[%d]", numbered.c.rn - 1)
    )
    claim = (
        update(TODOS)
        .where(T.id == numbered.c.id, T.state == PENDING)
        .values(**_claimed_values(token_hash))
        .returning(*VIEW, payload_column(), T.lease_token_hash)
    )
    # The attempt rows from a JSON list of [attempt id, todo id] pairs, so the statement is one
    # whatever their number. RETURNING names the new row's column qualified (see summary_columns).
    pair = func.json_each(bindparam("p_pairs", type_=String)).table_valued("value").alias("pair")
    todo_id = func.json_extract(pair.c.value, "$[1]")
    add = (
        insert(ATTEMPTS)
        .from_select(
            _ATTEMPT_COLUMNS,
            _attempt_columns(func.json_extract(pair.c.value, "$[0]"), todo_id).select_from(pair),
        )
        .returning(A.todo_id, *summary_columns(literal_column("attempts.todo_id")))
    )
    return claim, add


def _claim_params(
    sqlite: bool,
    endpoint_id: str,
    queues: Sequence[str],
    now: datetime,
    lease_expires_at: datetime,
    limit: int,
) -> dict[str, Any]:
    return {
        "p_endpoint_id": endpoint_id,
        "p_limit": limit,
        "p_now": now,
        "p_lease_expires_at": lease_expires_at,
        **_queue_params(sqlite, queues),
    }


def _queue_params(sqlite: bool, queues: Sequence[str]) -> dict[str, Any]:
    """The queue binds of ``_pick``."""
    if len(queues) == 1:
        return {"p_queue": queues[0]}
    if sqlite:
        return {f"p_queue_{i}": q for i, q in enumerate(queues)}
    return {"p_queues": list(queues)}


async def claim_postgresql(
    db: Database,
    *,
    endpoint_id: str,
    queues: Sequence[str],
    now: datetime,
    lease_expires_at: datetime,
    token_hashes: list[str | None],
    attempt_ids: list[str],
) -> list[tuple[int, Claimed]]:
    """Claim up to ``len(attempt_ids)`` of the oldest pending todos in ONE statement: each gets the
    lease, its own token hash (``token_hashes``, in claim order; None unfenced) and an attempt row
    (``attempt_ids``, same order). The pick skips rows another claimer has locked (``FOR NO KEY
    UPDATE SKIP LOCKED``), so two claimers never get the same todo. Returns the claimed todos, oldest
    first, each with its rank in claim order (0-based: the index of its token hash and attempt id)
    and its row (``VIEW``, ``payload``, ``lease_token_hash``) with the todo's replies summary."""
    params = _claim_params(False, endpoint_id, queues, now, lease_expires_at, len(attempt_ids))
    params.update(p_token_hashes=token_hashes, p_attempt_ids=attempt_ids)
    statement = _claim_postgresql(len(queues) == 1)

    async def one_statement(run: PostgreSQLRun) -> list[Any]:
        return await run(statement, params)

    # On the connections that keep plans: planning this statement was most of PostgreSQL's CPU a
    # claim (0.3-0.5 ms), and a kept plan stays an index walk at any size, statistics or none
    # (tests/test_kept_plans.py; migration 0011 and the UPDATE above made sure of it).
    claimed = await db.run_postgresql(one_statement, generic_plans=True)
    return [(r.rn - 1, (r, replies_of(r))) for r in claimed]


@functools.cache
def _claimable_postgresql(one_queue: bool) -> Select[Any]:
    return _pick(False, 1 if one_queue else 2)


async def claimable_postgresql(db: Database, *, endpoint_id: str, queues: Sequence[str]) -> bool:
    """Whether a pending todo waits in the endpoint's ``queues``: the claim's pick, without a lock
    (so it sees the todos a claim skipped because someone held them)."""
    params = {"p_endpoint_id": endpoint_id, "p_limit": 1, **_queue_params(False, queues)}
    statement = _claimable_postgresql(len(queues) == 1)

    async def one_statement(run: PostgreSQLRun) -> list[Any]:
        return await run(statement, params)

    return bool(await db.run_postgresql(one_statement, generic_plans=True))


async def claim_sqlite(
    db: Database,
    *,
    endpoint_id: str,
    queues: Sequence[str],
    now: datetime,
    lease_expires_at: datetime,
    token_hashes: list[str | None],
    attempt_ids: list[str],
) -> list[Claimed]:
    """``claim_postgresql`` on SQLite: the pick and the update are one ``UPDATE … FROM …
    RETURNING`` under the writer's ``BEGIN IMMEDIATE``, the attempt rows a second statement in the
    same transaction. Returns the claimed todos, oldest first."""
    params = _claim_params(True, endpoint_id, queues, now, lease_expires_at, len(attempt_ids))
    claim, add = _claim_sqlite(len(queues))
    params["p_token_hashes"] = json.dumps(token_hashes)

    def transaction(run: SQLiteRun) -> list[Claimed]:
        claimed = run(claim, params)
        if not claimed:
            return []
        # RETURNING comes in no particular order: claim order is age order, as the pick's.
        claimed.sort(key=lambda r: (r.created_at, r.id))
        pairs = json.dumps([[aid, r.id] for aid, r in zip(attempt_ids, claimed, strict=False)])
        added = run(add, {**params, "p_pairs": pairs})
        summaries = {a[0]: summary_of(*a[1:]) for a in added}
        return [(r, summaries[r.id]) for r in claimed]

    return await db.run_sqlite(transaction)


def replies_of(row: Any) -> dict[str, Any]:
    """The replies summary of a row a statement returned with ``summary_columns``."""
    return summary_of(row.reply_count, row.reply_state, row.reply_permalink)
