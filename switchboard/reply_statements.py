"""The statements behind ``reply``, in SQLAlchemy Core: no ORM unit of work on the reply path.

A reply writes twice around its dial, and each write is as few statements as its guarantees allow:

* **Before the dial**, one write transaction: ``CONTEXT`` reads, in one statement, everything the
  checks need (the todo, locked ``FOR UPDATE`` on PostgreSQL; the reply already made with this
  key; the todo's reply count; the endpoint's bucket; every connection of the owner scope, with its
  sealed secret). ``take_token`` spends the bucket token with a compare-and-set on the bucket's
  ``updated_at`` that also re-counts the todo's replies, and ``insert_pending`` writes the
  ``pending`` row; the commit comes before the dial.
* **After the dial**, ``record_outcome``: one ``UPDATE … RETURNING`` in autocommit on PostgreSQL.

Why the re-count and the compare-and-set: ``CONTEXT`` may have waited for the todo's lock held by
a concurrent reply of the same todo, and its subqueries then saw the database as it was before that
reply committed. The bucket is per endpoint, so replies on *other* todos of the endpoint race on it
without sharing the todo's lock. The take statement runs after the lock is held, so it sees both.
It is the only writer of a bucket besides the slow path (``take_token_locked``), which it falls
back to when the compare-and-set finds the bucket changed. On SQLite writers take turns, so the
first statement already saw the truth and the fallback never runs there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Float,
    Integer,
    Row,
    String,
    Table,
    bindparam,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

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
        B.tokens.label("bucket_tokens"),
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
    # Only the todo: concurrent replies of one todo take turns from here to the commit.
    .with_for_update(of=_TODOS)
)


async def read_context(conn: AsyncConnection, todo_id: str, key: str, scope: str) -> Context | None:
    rows = (await conn.execute(CONTEXT, {"todo_id": todo_id, "key": key, "scope": scope})).all()
    if not rows:
        return None
    first = rows[0]
    candidates = tuple(
        Candidate(*(row._mapping[f"c_{column.name}"] for column in _CANDIDATE))
        for row in rows
        if row._mapping["c_id"] is not None
    )
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


def tokens_now(tokens: float | None, at: datetime | None, now: datetime) -> float:
    """The bucket's tokens at ``now`` (a bucket never used is full)."""
    if tokens is None or at is None:
        return BUCKET_CAPACITY
    elapsed = max(0.0, (now - at).total_seconds())
    return min(BUCKET_CAPACITY, tokens + elapsed * BUCKET_REFILL_PER_SECOND)


def wait_for_token(tokens: float) -> int:
    """Whole seconds until a bucket holding ``tokens`` (< 1) has one."""
    return math.ceil((1.0 - tokens) / BUCKET_REFILL_PER_SECOND)


def _replies_of_todo() -> Any:
    return (
        select(func.count())
        .select_from(_REPLIES)
        .where(R.todo_id == bindparam("todo_id", type_=String))
        .scalar_subquery()
    )


def _take(dialect: Any) -> Any:
    """Spend a token: insert the bucket, or update it if it is still as ``seen`` (compare-and-set);
    either only while the todo has fewer than ``cap`` replies. Returns a row when it took one."""
    source = select(
        bindparam("bucket_of", type_=String),
        bindparam("new_tokens", type_=Float),
        bindparam("stamp", type_=UTCDateTime()),
    ).where(_replies_of_todo() < bindparam("cap", type_=Integer))
    statement = dialect.insert(_BUCKETS).from_select([B.endpoint_id, B.tokens, B.updated_at], source)
    return statement.on_conflict_do_update(
        index_elements=[B.endpoint_id],
        set_={"tokens": statement.excluded.tokens, "updated_at": statement.excluded.updated_at},
        # A bucket first seen missing has seen = NULL: a concurrent first use made it, so no match.
        where=B.updated_at == bindparam("seen", type_=UTCDateTime()),
    ).returning(B.endpoint_id)


_TAKE = {"postgresql": _take(postgresql), "sqlite": _take(sqlite)}


def _next_stamp(seen: datetime | None, now: datetime) -> datetime:
    # The compare-and-set needs every take to leave a stamp other than the one it saw.
    return now if seen is None or now != seen else now + timedelta(microseconds=1)


async def take_token(
    conn: AsyncConnection,
    dialect: str,
    *,
    endpoint_id: str,
    todo_id: str,
    cap: int,
    tokens: float,
    seen: datetime | None,
    now: datetime,
) -> bool:
    """One statement: the bucket keeps ``tokens - 1`` if nobody took a token since it was read
    (``seen``) and the todo is still under its cap. False: fall back to ``take_token_locked``."""
    params = {
        "bucket_of": endpoint_id,
        "new_tokens": tokens - 1.0,
        "stamp": _next_stamp(seen, now),
        "todo_id": todo_id,
        "cap": cap,
        "seen": seen,
    }
    return (await conn.execute(_TAKE[dialect], params)).first() is not None


_LOCK_BUCKET = (
    select(B.tokens, B.updated_at).where(B.endpoint_id == bindparam("bucket_of")).with_for_update()
)
_COUNT = select(func.count()).select_from(_REPLIES).where(R.todo_id == bindparam("todo_id"))
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


async def replies_now(conn: AsyncConnection, todo_id: str) -> int:
    return int((await conn.execute(_COUNT, {"todo_id": todo_id})).scalar_one())


async def take_token_locked(conn: AsyncConnection, dialect: str, endpoint_id: str, now: datetime) -> float:
    """The slow path: lock the bucket (creating it full on first use) and read its tokens at ``now``;
    the caller refuses below 1 or spends one with ``spend_locked``."""
    await conn.execute(_CREATE_BUCKET[dialect], {"bucket_of": endpoint_id, "stamp": now})
    row = (await conn.execute(_LOCK_BUCKET, {"bucket_of": endpoint_id})).one()
    return tokens_now(row.tokens, row.updated_at, now)


async def spend_locked(conn: AsyncConnection, endpoint_id: str, tokens: float, now: datetime) -> None:
    await conn.execute(_SET_BUCKET, {"bucket_of": endpoint_id, "new_tokens": tokens - 1.0, "stamp": now})


_INSERT_PENDING = insert(_REPLIES)


async def insert_pending(conn: AsyncConnection, values: Mapping[str, Any]) -> None:
    """The ``pending`` row (unique on todo and key: of two identical calls one raises
    ``IntegrityError`` here)."""
    await conn.execute(_INSERT_PENDING, dict(values))


_PENDING: ColumnElement[str] = literal_column("'pending'")
_RECORDED = (R.id, R.todo_id, R.state, R.display, R.permalink, R.error_class, R.error_code)
# "unknown" too: if the sweeper gave up on a slow dial, the real outcome still wins.
_RECORD = (
    update(_REPLIES)
    .where(
        R.id == bindparam("reply_id"), R.state.in_((literal_column("'pending'"), literal_column("'unknown'")))
    )
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
_READ = select(*_RECORDED).where(R.id == bindparam("reply_id"))


def _recorded(row: Row[*tuple[Any, ...]] | None) -> Recorded | None:
    if row is None:
        return None
    return Recorded(
        row.id, row.todo_id, row.state, row.display, row.permalink, row.error_class, row.error_code
    )


async def record_outcome(conn: AsyncConnection, reply_id: str, values: Mapping[str, Any]) -> Recorded | None:
    """Write the dial's outcome; None when the row is no longer open (then read it)."""
    result = await conn.execute(_RECORD, {"reply_id": reply_id, **values})
    return _recorded(result.first())


async def read_recorded(conn: AsyncConnection, reply_id: str) -> Recorded | None:
    return _recorded((await conn.execute(_READ, {"reply_id": reply_id})).first())
