"""``complete``'s statements: finish a todo the caller holds and close its open attempt.

On PostgreSQL the completes of one endpoint that arrive together are ONE statement (data-modifying
CTEs over arrays, ``batching.complete_row`` combines them), run in autocommit on asyncpg directly;
on SQLite a complete is the todo's ``UPDATE … RETURNING`` and its attempt's, in one hand-off to the
writer's thread. Like the claims' (``statements``), each returns what ``todo_row`` shows (``VIEW``)
and the todo's replies summary.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    Select,
    String,
    Text,
    Update,
    bindparam,
    cast,
    column,
    func,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY

from switchboard.db import Database, PostgreSQLRun, SQLiteRun
from switchboard.sanitize import json_text
from switchboard.todos.statements import (
    ATTEMPTS,
    CLAIMED,
    PRIOR,
    STRINGS,
    TODOS,
    VIEW,
    A,
    Claimed,
    T,
    open_attempt,
    param,
    replies_of,
    summary_columns,
    summary_of,
)


def _held_by_caller() -> ColumnElement[bool]:
    """The todo is the endpoint's and the caller holds its claim: ``lifecycle._held`` in SQL (claimed,
    the lease not expired, the token the claim's: both absent, or the same hash)."""
    return (
        (T.id == param("p_todo_id", T.id))
        & (T.endpoint_id == param("p_endpoint_id", T.endpoint_id))
        & (T.state == CLAIMED)
        & (T.lease_expires_at > param("p_now", T.lease_expires_at))
        & T.lease_token_hash.is_not_distinct_from(param("p_token_hash", T.lease_token_hash))
    )


_DONE_VALUES: dict[str, Any] = {
    "state": "done",
    # None stays SQL NULL, as the ORM stored it (a plain JSON bind would store the JSON 'null').
    "result": bindparam("p_result", type_=JSON(none_as_null=True)),
    "lease_expires_at": None,
    # The finishing claim's token hash stays: a reply in the grace window is fenced as the claim
    # was (reply_checks.check_state), so a superseded worker cannot answer for this claim's work.
    "next_ring_at": None,
    "finished_at": param("p_now", T.finished_at),
    "finished_by": param("p_endpoint_id", T.finished_by),
    "updated_at": param("p_now", T.updated_at),
}
_CLOSED_VALUES: dict[str, Any] = {
    "outcome": "completed",
    "ended_at": param("p_now", A.ended_at),
    "summary": param("p_summary", A.summary),
    "error": None,
}


@functools.cache
def _complete_postgresql() -> Select[Any]:
    """Many completes of one endpoint in one statement: the n-th todo id, token hash, result and
    summary of the arrays are one caller's, and each row is checked as ``_held_by_caller`` checks
    one. The output names each finished todo's ``n`` (1-based); a caller without a row is refused."""
    given = (
        func.unnest(
            bindparam("p_todo_ids", type_=STRINGS),
            bindparam("p_token_hashes", type_=STRINGS),
            # Each result as its JSON text (``complete_postgresql``), made JSON again below: an array
            # of JSON values read a result that is itself a list as a further dimension of the array,
            # which ``unnest`` flattens (the todo kept the list's first item, and completes combined
            # in one statement were handed one another's items).
            bindparam("p_results", type_=ARRAY(Text)),
            bindparam("p_summaries", type_=ARRAY(Text)),
        )
        .table_valued(
            column("todo_id", String),
            column("token_hash", String),
            column("result", Text),
            column("summary", Text),
            with_ordinality="n",
        )
        .render_derived(name="given")
    )
    # The attempt closed below is read from the statement's snapshot. A todo whose lease ran out and
    # that the same endpoint claimed again (unfenced) while the statement waited for its row passes
    # every check above on its newest version, but its open attempt is one the snapshot does not
    # see. So the row must be as the snapshot has it (``seen``; every write of a todo, a claim
    # first, moves ``updated_at``): a row changed meanwhile is refused, and
    # ``batching.complete_row`` runs the complete again, with a new snapshot. (Not the attempt
    # counter: a release gives its number back, so a release and a claim meanwhile would leave it
    # as it was.)
    seen = TODOS.alias("seen")
    as_seen = select(seen.c.updated_at).where(seen.c.id == T.id).scalar_subquery()
    finished = (
        update(TODOS)
        .where(
            T.id == given.c.todo_id,
            T.endpoint_id == param("p_endpoint_id", T.endpoint_id),
            T.state == CLAIMED,
            T.lease_expires_at > param("p_now", T.lease_expires_at),
            T.lease_token_hash.is_not_distinct_from(given.c.token_hash),
            T.updated_at == as_seen,
        )
        .values(**{**_DONE_VALUES, "result": cast(given.c.result, JSON)})
        .returning(*VIEW, given.c.summary, given.c.n)
        .cte("finished")
    )
    its_attempt = (
        select(PRIOR.c.id)
        .where(PRIOR.c.todo_id == finished.c.id, PRIOR.c.ended_at.is_(None))
        .order_by(PRIOR.c.number.desc())
        .limit(1)
        .correlate(finished)
        .scalar_subquery()
    )
    closed = (
        update(ATTEMPTS)
        .where(A.todo_id == finished.c.id, A.id == its_attempt)
        .values(**{**_CLOSED_VALUES, "summary": finished.c.summary})
        .cte("attempt_closed")
    )
    count, state, permalink = summary_columns(finished.c.id)
    return select(
        *(finished.c[c.name] for c in VIEW),
        count.label("reply_count"),
        state.label("reply_state"),
        permalink.label("reply_permalink"),
        finished.c.n,
    ).add_cte(closed)


@functools.cache
def _complete_sqlite() -> tuple[Update, Update, Select[Any]]:
    todo_id = param("p_todo_id", A.todo_id)
    return (
        update(TODOS).where(_held_by_caller()).values(**_DONE_VALUES).returning(*VIEW),
        update(ATTEMPTS)
        .where(A.id == open_attempt(todo_id))
        .values(**_CLOSED_VALUES)
        .returning(*summary_columns(todo_id)),
        select(*summary_columns(todo_id)),
    )


async def complete_postgresql(
    db: Database,
    *,
    endpoint_id: str,
    now: datetime,
    todo_ids: list[str],
    token_hashes: list[str | None],
    results: list[Any],
    summaries: list[str | None],
) -> dict[int, Claimed]:
    """Finish the todos the callers hold and close their open attempts, in ONE statement (the
    lists are one entry per caller). Returns, by caller index (0-based), the finished todo's
    ``VIEW`` row with its replies summary; a caller who does not hold its todo has no entry (nothing
    of it is written)."""
    params = {
        "p_endpoint_id": endpoint_id,
        "p_now": now,
        "p_todo_ids": todo_ids,
        "p_token_hashes": token_hashes,
        # SQL NULL stays NULL (no result), as ``_DONE_VALUES`` stores it.
        "p_results": [None if result is None else json_text(result) for result in results],
        "p_summaries": summaries,
    }
    statement = _complete_postgresql()

    async def one_statement(run: PostgreSQLRun) -> list[Any]:
        return await run(statement, params)

    # By key (the todo ids): a kept generic plan serves it (Database.run_postgresql).
    rows = await db.run_postgresql(one_statement, generic_plans=True)
    return {r.n - 1: (r, replies_of(r)) for r in rows}


async def complete_sqlite(
    db: Database,
    *,
    todo_id: str,
    endpoint_id: str,
    token_hash: str | None,
    now: datetime,
    result: Any,
    summary: str | None,
) -> Claimed | None:
    """Finish a todo the caller holds and close its open attempt (the todo's ``UPDATE …
    RETURNING`` and the attempt's, in the writer's transaction); its ``VIEW`` row with its replies
    summary, or None when the caller does not hold it (nothing is written then)."""
    params = {
        "p_todo_id": todo_id,
        "p_endpoint_id": endpoint_id,
        "p_token_hash": token_hash,
        "p_now": now,
        "p_result": result,
        "p_summary": summary,
    }
    done, close, summarise = _complete_sqlite()

    def transaction(run: SQLiteRun) -> Claimed | None:
        rows = run(done, params)
        if not rows:
            return None
        closed = run(close, params)
        # No open attempt (every claim opens one, but a row edited by hand may lack it): read the
        # summary.
        replies = closed[0] if closed else run(summarise, params)[0]
        return rows[0], summary_of(*replies)

    return await db.run_sqlite(transaction)
