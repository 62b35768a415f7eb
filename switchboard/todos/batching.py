"""``claim_next`` and ``complete`` as the lifecycle verbs call them: one call, one answer; underneath,
concurrent calls share statements.

On PostgreSQL, claims of the same endpoint, queues and lease length that arrive while one of
theirs is running wait, and then go together as ONE claim statement (``statements.claim_postgresql``
with the sum of their ``max``); completes of one endpoint likewise as one complete statement
(``completes.complete_postgresql``). A call alone runs at once. Each caller still gets its own
todos, each with its own lease, token and attempt row, and is refused exactly as alone: the
statements check every todo as the single-call ones did (``SKIP LOCKED`` pick, state, lease, token).
Sixteen agents claiming from one endpoint then cost a few statements per round instead of
sixteen, which is what PgQueuer's workers get by dequeuing in batches.

On SQLite each call is its own transaction; ``Database.run_sqlite`` already runs the writes that
queue behind the writer together, in one hand-off to its thread.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy.exc import DBAPIError

from switchboard.db import Database, is_unavailable, utcnow
from switchboard.direct import Combiner, Outcome
from switchboard.todos.completes import complete_postgresql, complete_sqlite
from switchboard.todos.statements import Claimed, claim_postgresql, claim_sqlite, claimable_postgresql

# Rows one combined statement claims or completes at most: a bigger batch waits for the next one.
STATEMENT_ROWS = 100
# Seconds an empty claim waits before each try again while a pending todo was skipped (claim_rows).
EMPTY_CLAIM_RETRY_WAITS = (0.0, 0.005, 0.02, 0.05)
# Claims that meet an attempt number taken meanwhile run again this many times before the last try,
# whose error is the caller's (_submit_claim); the unique (todo_id, number) of attempts, by its name
# in the schema (migration 0001).
NUMBER_TAKEN_RETRIES = 3
ATTEMPT_NUMBER_CONSTRAINT = "uq_attempts_todo_id"


class _ClaimKey(NamedTuple):
    db: Database
    endpoint_id: str
    queues: tuple[str, ...]
    lease: timedelta


class _Claim(NamedTuple):
    token_hashes: list[str | None]
    attempt_ids: list[str]


class _CompleteKey(NamedTuple):
    db: Database
    endpoint_id: str


class _Complete(NamedTuple):
    todo_id: str
    token_hash: str | None
    result: Any
    summary: str | None


def _chunks(sizes: Sequence[int]) -> list[range]:
    """Consecutive index ranges whose sizes add up to at most ``STATEMENT_ROWS`` (one at least)."""
    out: list[range] = []
    start = total = 0
    for i, size in enumerate(sizes):
        if i > start and total + size > STATEMENT_ROWS:
            out.append(range(start, i))
            start, total = i, 0
        total += size
    out.append(range(start, len(sizes)))
    return out


async def _claim_batch(key: _ClaimKey, claims: list[_Claim]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for chunk in _chunks([len(c.attempt_ids) for c in claims]):
        mine = [claims[i] for i in chunk]
        # Where each caller's tokens and attempt ids start in the combined arrays.
        starts = [0]
        for claim in mine[:-1]:
            starts.append(starts[-1] + len(claim.attempt_ids))
        # The lease runs from when the statement runs, as a lone call's would.
        now = utcnow()
        rows = await claim_postgresql(
            key.db,
            endpoint_id=key.endpoint_id,
            queues=key.queues,
            now=now,
            lease_expires_at=now + key.lease,
            token_hashes=[h for c in mine for h in c.token_hashes],
            attempt_ids=[a for c in mine for a in c.attempt_ids],
        )
        got: list[list[Claimed]] = [[] for _ in mine]
        for rank, claimed in rows:
            got[bisect.bisect_right(starts, rank) - 1].append(claimed)
        outcomes += [(True, todos) for todos in got]
    return outcomes


async def _complete_batch(key: _CompleteKey, completes: list[_Complete]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for chunk in _chunks([1] * len(completes)):
        mine = [completes[i] for i in chunk]
        finished = await complete_postgresql(
            key.db,
            endpoint_id=key.endpoint_id,
            now=utcnow(),
            todo_ids=[c.todo_id for c in mine],
            token_hashes=[c.token_hash for c in mine],
            results=[c.result for c in mine],
            summaries=[c.summary for c in mine],
        )
        outcomes += [(True, finished.get(i)) for i in range(len(mine))]
    return outcomes


def _maybe_one_callers(exc: Exception) -> bool:
    """A combined statement that failed, not for an outage, may have failed for one caller's input
    (a summary PostgreSQL's text refuses, say): its callers then run again one by one."""
    return not is_unavailable(exc)


_CLAIMS: Combiner[_ClaimKey, _Claim] = Combiner(_claim_batch, _maybe_one_callers)
_COMPLETES: Combiner[_CompleteKey, _Complete] = Combiner(_complete_batch, _maybe_one_callers)


async def claim_rows(
    db: Database,
    *,
    endpoint_id: str,
    queues: Sequence[str],
    now: datetime,
    lease_expires_at: datetime,
    token_hashes: list[str | None],
    attempt_ids: list[str],
) -> list[Claimed]:
    """Claim up to ``len(attempt_ids)`` of the oldest pending todos: each gets the lease, its own
    token hash (``token_hashes``, in claim order; None unfenced) and an attempt row. Returns the
    claimed todos, oldest first: each row (``VIEW``, ``payload``, ``lease_token_hash``) with the
    todo's replies summary. Two claimers never get the same todo."""
    if db.is_sqlite:
        return await claim_sqlite(
            db,
            endpoint_id=endpoint_id,
            queues=queues,
            now=now,
            lease_expires_at=lease_expires_at,
            token_hashes=token_hashes,
            attempt_ids=attempt_ids,
        )
    # Checked here, in the caller's task: the combined statement runs in a task of its own.
    db.refuse_nested_write()
    key = _ClaimKey(db, endpoint_id, tuple(queues), lease_expires_at - now)
    claim = _Claim(token_hashes, attempt_ids)
    claimed = await _submit_claim(key, claim)
    # SKIP LOCKED also passes over a pending todo that someone other than a claimer holds for a
    # moment: the doorbell moving its ring count, an operator's edit. Answering "empty" then would
    # send an agent away from work that is there, so an empty claim looks without a lock and, while
    # a todo waits, tries again after a short wait; a few times at most, so it never hangs on a
    # lock someone keeps. (A claim that got some of what it asked for keeps what it got.)
    for wait in EMPTY_CLAIM_RETRY_WAITS:
        if claimed or not await claimable_postgresql(db, endpoint_id=endpoint_id, queues=queues):
            break
        await asyncio.sleep(wait)
        claimed = await _submit_claim(key, claim)
    return claimed


async def _submit_claim(key: _ClaimKey, claim: _Claim) -> list[Claimed]:
    # A claim statement numbers its attempts from its snapshot: another agent's claim and release of
    # the same todo, both committed while the statement ran, leave a number it did not see, and the
    # unique (todo_id, number) refuses the whole statement, which then wrote nothing. Such a claim
    # runs again: a new statement has a new snapshot, and numbers after it.
    for _ in range(NUMBER_TAKEN_RETRIES):
        try:
            claimed: list[Claimed] = await _CLAIMS.submit(key, claim)
            return claimed
        except DBAPIError as exc:
            if getattr(exc.orig, "constraint_name", None) != ATTEMPT_NUMBER_CONSTRAINT:
                raise
    last: list[Claimed] = await _CLAIMS.submit(key, claim)
    return last


async def complete_row(
    db: Database,
    *,
    todo_id: str,
    endpoint_id: str,
    token_hash: str | None,
    now: datetime,
    result: Any,
    summary: str | None,
) -> Claimed | None:
    """Finish a todo the caller holds and close its open attempt; its ``VIEW`` row with its replies
    summary, or None when the caller does not hold it (nothing is written then)."""
    if db.is_sqlite:
        return await complete_sqlite(
            db,
            todo_id=todo_id,
            endpoint_id=endpoint_id,
            token_hash=token_hash,
            now=now,
            result=result,
            summary=summary,
        )
    db.refuse_nested_write()
    key, complete = _CompleteKey(db, endpoint_id), _Complete(todo_id, token_hash, result, summary)
    done: Claimed | None = await _COMPLETES.submit(key, complete)
    if done is None:
        # The statement refuses a todo that changed while it ran (completes._complete_postgresql:
        # its open attempt may be one its snapshot cannot see): once more, with a new snapshot. A
        # caller who does not hold the todo is refused again, having written nothing either time.
        done = await _COMPLETES.submit(key, complete)
    return done
