"""The statements behind ``reply``, in SQLAlchemy Core, run on the driver directly (no ORM unit of
work, no per-statement SQLAlchemy execution on the reply path).

A reply writes twice around its dial, and each write is as few statements as its guarantees allow:

* **Before the dial**: ``CONTEXT`` reads, in one statement, everything the checks need (the todo;
  the reply already made with this key; the todo's reply count; the endpoint's bucket; every
  connection of the owner scope, with its sealed secret). ``take_and_insert`` then spends the
  bucket's token with a compare-and-set on its ``updated_at`` that also re-counts the todo's
  replies, and writes the ``pending`` row: one statement on PostgreSQL (a CTE), two on SQLite. It
  commits before the dial.
* **After the dial**, ``record_outcome``: one ``UPDATE … RETURNING`` (autocommit on PostgreSQL).

On SQLite writers take turns, so the read is the truth until the commit: all of it is one write
transaction in one hand-off to the writer. On PostgreSQL a reply first runs without a transaction
or a lock: the read, then the take in autocommit, two round trips. The take writes only if nothing
it relies on changed since the read: the bucket is as seen (the compare-and-set: every reply
row is inserted together with a take from its endpoint's bucket, so this also means no reply was
added to the todo since the read), the todo is still under its cap, and the todo row is as the
checks saw it (state, lease, fence, finisher). A second identical call inserts the same (todo,
key) and fails on the unique index, which the caller answers with the first call's outcome. When
the take finds a change it writes nothing, and the reply runs again as one transaction that holds
the todo ``FOR NO KEY UPDATE`` from the read to the commit (``CONTEXT_LOCKED``); there the bucket may
still have moved (the bucket is per endpoint, so replies on *other* todos of the endpoint race on
it without sharing the todo's lock), and the caller decides from locked rows (``replies_now``,
``lock_bucket``, ``spend_locked``, ``insert_pending``).

The logic of a write is written once, as a generator of (statement, values) steps that receives
each statement's rows (``switchboard.direct.Steps``), run by ``Database.run_steps``: synchronously
on SQLite's writer thread (the whole transaction in one hand-off) and asynchronously on asyncpg.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Float,
    Integer,
    String,
    Table,
    bindparam,
    exists,
    func,
    insert,
    literal_column,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.sqltypes import NullType

from switchboard.direct import Rows, Steps
from switchboard.models import Connection, Reply, ReplyBucket, Todo, UTCDateTime

_TODOS = cast(Table, Todo.__table__)
_REPLIES = cast(Table, Reply.__table__)
_BUCKETS = cast(Table, ReplyBucket.__table__)
_CONNECTIONS = cast(Table, Connection.__table__)
T, R, B, C = _TODOS.c, _REPLIES.c, _BUCKETS.c, _CONNECTIONS.c

# The per-endpoint token bucket: a burst of 30, then one reply every 2 seconds.
BUCKET_CAPACITY = 30.0
BUCKET_REFILL_PER_SECOND = 0.5


@dataclass(frozen=True, slots=True)
class Candidate:
    """One connection of the todo's owner scope as the reply's read saw it (sealed secret: the vault
    opens it only for the one connection chosen)."""

    id: str
    owner_human_id: str | None
    owner_team_id: str | None
    kind: str
    name: str
    account_key: str
    secret_ciphertext: bytes
    secret_key_id: str
    fingerprint: str
    targets: list[str] | None
    endpoints: list[str] | None
    blocked_until: datetime | None


@dataclass(frozen=True, slots=True)
class Context:
    """What the checks of one reply need, read in one statement."""

    endpoint_id: str
    state: str
    lease_expires_at: datetime | None
    lease_token_hash: str | None
    finished_by: str | None
    finished_at: datetime | None
    reply_to: dict[str, Any] | None
    existing: str | None
    replies: int
    bucket_tokens: float | None
    bucket_at: datetime | None
    candidates: tuple[Candidate, ...]


@dataclass(frozen=True, slots=True)
class Recorded:
    """A reply row as the caller's answer and the log line need it."""

    id: str
    todo_id: str
    state: str
    display: str
    permalink: str | None
    error_class: str | None
    error_code: str | None


_CANDIDATE = (
    C.id,
    C.owner_human_id,
    C.owner_team_id,
    C.kind,
    C.name,
    C.account_key,
    C.secret_ciphertext,
    C.secret_key_id,
    C.fingerprint,
    C.targets,
    C.endpoints,
    C.blocked_until,
)
# The bucket's tokens as the driver returns them (a float from REAL and from double precision).
# Read untyped: the direct runners take each column's result processor without the driver's type
# code, and asyncpg's one for floating-point columns needs it.
_TOKENS = type_coerce(B.tokens, NullType()).label("tokens")
# The scope of a connection, as the unique indexes spell it (ids carry their type prefix, so a
# human's and a team's never collide): the lookup can use uq_connections_scope_account.
_SCOPE = func.coalesce(C.owner_human_id, C.owner_team_id)

CONTEXT = (
    select(
        T.endpoint_id,
        T.state,
        T.lease_expires_at,
        T.lease_token_hash,
        T.finished_by,
        T.finished_at,
        T.reply_to,
        select(R.id)
        .where(R.todo_id == T.id, R.idempotency_key == bindparam("key", type_=String))
        .scalar_subquery()
        .label("existing"),
        select(func.count())
        .select_from(_REPLIES)
        .where(R.todo_id == T.id)
        .scalar_subquery()
        .label("replies"),
        _TOKENS.label("bucket_tokens"),
        B.updated_at.label("bucket_at"),
        *(column.label(f"c_{column.name}") for column in _CANDIDATE),
    )
    .select_from(
        _TODOS.outerjoin(_BUCKETS, B.endpoint_id == T.endpoint_id).outerjoin(
            _CONNECTIONS, _SCOPE == bindparam("scope", type_=String)
        )
    )
    .where(T.id == bindparam("todo_id", type_=String))
    .order_by(C.created_at, C.id)
)
# Only the todo: concurrent replies of one todo take turns from here to the commit, and so do its
# lifecycle updates. FOR NO KEY UPDATE, not FOR UPDATE: an unlocked reply's insert share-locks the
# todo for its foreign key after taking the endpoint's bucket, and FOR UPDATE would make it wait
# for this transaction while this one waits for the bucket (a deadlock, seen once in CI).
CONTEXT_LOCKED = CONTEXT.with_for_update(of=_TODOS, key_share=True)


# A row's candidate columns, in Candidate's field order.
_candidate_of = operator.attrgetter(*(f"c_{column.name}" for column in _CANDIDATE))


def _context_of(rows: Rows) -> Context | None:
    if not rows:
        return None
    first = rows[0]
    candidates = tuple(Candidate(*_candidate_of(row)) for row in rows if row.c_id is not None)
    return Context(
        endpoint_id=first.endpoint_id,
        state=first.state,
        lease_expires_at=first.lease_expires_at,
        lease_token_hash=first.lease_token_hash,
        finished_by=first.finished_by,
        finished_at=first.finished_at,
        reply_to=first.reply_to,
        existing=first.existing,
        replies=int(first.replies or 0),
        bucket_tokens=first.bucket_tokens,
        bucket_at=first.bucket_at,
        candidates=candidates,
    )


def read_context(todo_id: str, key: str, scope: str, *, lock: bool) -> Steps[Context | None]:
    """Everything the checks need, in one statement; None: no such todo. ``lock``: hold the todo's
    row until the commit (the locked retry on PostgreSQL; on SQLite it changes nothing)."""
    statement = CONTEXT_LOCKED if lock else CONTEXT
    return _context_of((yield statement, {"todo_id": todo_id, "key": key, "scope": scope}))


def tokens_now(tokens: float | None, at: datetime | None, now: datetime) -> float:
    """The bucket's tokens at ``now`` (a bucket never used is full)."""
    if tokens is None or at is None:
        return BUCKET_CAPACITY
    elapsed = max(0.0, (now - at).total_seconds())
    return min(BUCKET_CAPACITY, tokens + elapsed * BUCKET_REFILL_PER_SECOND)


def wait_for_token(tokens: float) -> int:
    """Whole seconds until a bucket holding ``tokens`` (< 1) has one."""
    return math.ceil((1.0 - tokens) / BUCKET_REFILL_PER_SECOND)


# The todo as the checks saw it (PostgreSQL's take, which may run without the todo's lock). A
# column whose value the read found NULL must still be NULL: IS NOT DISTINCT FROM.
_TODO_AS_SEEN = exists().where(
    T.id == bindparam("for_todo", type_=String),
    T.endpoint_id == bindparam("seen_endpoint", type_=String),
    T.state == bindparam("seen_state", type_=String),
    T.lease_expires_at.is_not_distinct_from(bindparam("seen_lease", type_=UTCDateTime())),
    T.lease_token_hash.is_not_distinct_from(bindparam("seen_fence", type_=String)),
    T.finished_by.is_not_distinct_from(bindparam("seen_finisher", type_=String)),
    T.finished_at.is_not_distinct_from(bindparam("seen_finished", type_=UTCDateTime())),
)


def _take(dialect: Any, *, todo_as_seen: bool) -> Any:
    """Spend a token: insert the bucket, or update it if it is still as ``seen`` (compare-and-set);
    either only while the todo has fewer than ``cap`` replies (and, with ``todo_as_seen``, is
    still as the read saw it). Returns a row when it took one."""
    replies = (
        select(func.count())
        .select_from(_REPLIES)
        .where(R.todo_id == bindparam("for_todo", type_=String))
        .scalar_subquery()
    )
    source = select(
        bindparam("bucket_of", type_=String),
        bindparam("new_tokens", type_=Float),
        bindparam("stamp", type_=UTCDateTime()),
    ).where(replies < bindparam("cap", type_=Integer))
    if todo_as_seen:
        source = source.where(_TODO_AS_SEEN)
    statement = dialect.insert(_BUCKETS).from_select([B.endpoint_id, B.tokens, B.updated_at], source)
    return statement.on_conflict_do_update(
        index_elements=[B.endpoint_id],
        set_={"tokens": statement.excluded.tokens, "updated_at": statement.excluded.updated_at},
        # A bucket first seen missing has seen = NULL: a concurrent first use made it, so no match.
        where=B.updated_at == bindparam("seen", type_=UTCDateTime()),
    ).returning(B.endpoint_id)


_PENDING_COLUMNS = tuple(_REPLIES.c)
# SQLite's take runs inside the writer's turn, where nothing changes between the read and the take
# but this reply's own statements: the todo needs no second look.
_TAKE_SQLITE = _take(sqlite, todo_as_seen=False)
_INSERT_PENDING = insert(_REPLIES).values(
    {c: bindparam(f"r_{c.name}", type_=c.type) for c in _PENDING_COLUMNS}
)
# PostgreSQL: the take and the pending row in one statement; the row is inserted only if the take
# returned one (its CTE's row is the insert's FROM).
_TAKE_AND_INSERT_PG = (
    insert(_REPLIES)
    .from_select(
        list(_PENDING_COLUMNS),
        select(*(bindparam(f"r_{c.name}", type_=c.type) for c in _PENDING_COLUMNS)).select_from(
            _take(postgresql, todo_as_seen=True).cte("taken")
        ),
    )
    .returning(R.id)
)


def _next_stamp(seen: datetime | None, now: datetime) -> datetime:
    # The compare-and-set needs every take to leave a stamp other than the one it saw.
    return now if seen is None or now != seen else now + timedelta(microseconds=1)


def take_and_insert(
    dialect: str,
    *,
    endpoint_id: str,
    todo_id: str,
    cap: int,
    tokens: float,
    seen: datetime | None,
    todo: Context,
    now: datetime,
    pending: Mapping[str, Any],
) -> Steps[bool]:
    """Spend a token and insert the ``pending`` row, if nobody took a token since the bucket was
    read (``seen``), the todo is still under its cap and (PostgreSQL) still as the read saw it
    (``todo``): one statement on PostgreSQL, two on SQLite. False: nothing was written; the caller
    decides again (see the module docstring)."""
    take = {
        "bucket_of": endpoint_id,
        "new_tokens": tokens - 1.0,
        "stamp": _next_stamp(seen, now),
        "for_todo": todo_id,
        "cap": cap,
        "seen": seen,
    }
    if dialect == "postgresql":
        as_seen = {
            "seen_endpoint": todo.endpoint_id,
            "seen_state": todo.state,
            "seen_lease": todo.lease_expires_at,
            "seen_fence": todo.lease_token_hash,
            "seen_finisher": todo.finished_by,
            "seen_finished": todo.finished_at,
        }
        return bool((yield _TAKE_AND_INSERT_PG, {**take, **as_seen, **_pending_values(pending)}))
    if not (yield _TAKE_SQLITE, take):
        return False
    yield from insert_pending(pending)
    return True


def insert_pending(pending: Mapping[str, Any]) -> Steps[None]:
    """The ``pending`` row (unique on todo and key: of two identical calls one raises
    ``IntegrityError`` here)."""
    yield _INSERT_PENDING, _pending_values(pending)


def _pending_values(pending: Mapping[str, Any]) -> dict[str, Any]:
    # Every column has its placeholder; the ones a reply leaves out start empty.
    return {f"r_{c.name}": pending.get(c.name) for c in _PENDING_COLUMNS}


_COUNT = select(func.count().label("n")).select_from(_REPLIES).where(R.todo_id == bindparam("for_todo"))
_LOCK_BUCKET = select(_TOKENS, B.updated_at).where(B.endpoint_id == bindparam("bucket_of")).with_for_update()
_SET_BUCKET = (
    update(_BUCKETS)
    .where(B.endpoint_id == bindparam("bucket_of"))
    .values(tokens=bindparam("new_tokens", type_=Float), updated_at=bindparam("stamp", type_=UTCDateTime()))
)


def _create_bucket(dialect: Any) -> Any:
    return (
        dialect.insert(_BUCKETS)
        .values(endpoint_id=bindparam("bucket_of"), tokens=BUCKET_CAPACITY, updated_at=bindparam("stamp"))
        .on_conflict_do_nothing(index_elements=[B.endpoint_id])
    )


_CREATE_BUCKET = {"postgresql": _create_bucket(postgresql), "sqlite": _create_bucket(sqlite)}


def replies_now(todo_id: str) -> Steps[int]:
    rows = yield _COUNT, {"for_todo": todo_id}
    return int(rows[0].n)


def lock_bucket(dialect: str, endpoint_id: str, now: datetime) -> Steps[float]:
    """The locked path: lock the bucket (creating it full on first use) and read its tokens at
    ``now``; the caller refuses below 1 or spends one with ``spend_locked``."""
    yield _CREATE_BUCKET[dialect], {"bucket_of": endpoint_id, "stamp": now}
    rows = yield _LOCK_BUCKET, {"bucket_of": endpoint_id}
    return tokens_now(rows[0].tokens, rows[0].updated_at, now)


def spend_locked(endpoint_id: str, tokens: float, now: datetime) -> Steps[None]:
    yield _SET_BUCKET, {"bucket_of": endpoint_id, "new_tokens": tokens - 1.0, "stamp": now}


_RECORDED = (R.id, R.todo_id, R.state, R.display, R.permalink, R.error_class, R.error_code)
# "unknown" too: if the sweeper gave up on a slow dial, the real outcome still wins.
_OPEN: tuple[ColumnElement[str], ...] = (literal_column("'pending'"), literal_column("'unknown'"))
_RECORD_ANY = (
    update(_REPLIES)
    .where(R.id == bindparam("reply_id"), R.state.in_(_OPEN))
    .values(
        state=bindparam("state", type_=String),
        provider_object_id=bindparam("provider_object_id", type_=String),
        permalink=bindparam("permalink", type_=String),
        error_class=bindparam("error_class", type_=String),
        error_code=bindparam("error_code", type_=String),
        updated_at=bindparam("updated_at", type_=UTCDateTime()),
    )
    .returning(*_RECORDED)
)
# PostgreSQL: the outcome's commit does not wait for its WAL flush (``synchronous_commit`` off for
# this statement's own transaction only: ``set_config(…, true)`` is local to it, so the pooled
# connection keeps the server's setting). What that risks is bounded: the server crashing within
# its WAL writer's delay loses the outcome, the row stays ``pending``, and the sweeper marks it
# ``unknown`` (never dialled again: the pending row, committed durably before the dial, holds the
# key). The dial itself happened either way; only the record of its answer waits.
_QUIET_COMMIT = func.set_config(
    literal_column("'synchronous_commit'"), literal_column("'off'"), literal_column("true")
)
_RECORD = {
    "sqlite": _RECORD_ANY,
    "postgresql": _RECORD_ANY.where(_QUIET_COMMIT == literal_column("'off'")),
}
_READ = select(*_RECORDED).where(R.id == bindparam("reply_id"))


def _recorded(rows: Rows) -> Recorded | None:
    if not rows:
        return None
    row = rows[0]
    return Recorded(
        row.id, row.todo_id, row.state, row.display, row.permalink, row.error_class, row.error_code
    )


def record_outcome(dialect: str, reply_id: str, values: Mapping[str, Any]) -> Steps[Recorded | None]:
    """Write the dial's outcome (one statement); None when the row is no longer open."""
    return _recorded((yield _RECORD[dialect], {"reply_id": reply_id, **values}))


def read_recorded(reply_id: str) -> Steps[Recorded | None]:
    return _recorded((yield _READ, {"reply_id": reply_id}))
