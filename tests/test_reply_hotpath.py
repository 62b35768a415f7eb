"""The lean reply path (issue 12): one read statement and one write transaction before the dial, one
statement after it, and the guarantees that leanness must keep: the pending row committed before the
dial, the per-todo cap and the endpoint's bucket exact under concurrent calls (the compare-and-set
and its locked fallback), and an outcome even when the row is gone. On whichever engine the run uses.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy import bindparam, delete, func, literal_column, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url

from switchboard import connections as conn
from switchboard import reply
from switchboard import reply_statements as statements
from switchboard.db import utcnow
from switchboard.errors import SwitchboardError
from switchboard.hookspecs import hookimpl
from switchboard.ids import token_hash
from switchboard.models import Reply, ReplyBucket, Todo
from switchboard.provider import Address, CheckResult, ConnectionCheck, ConnectionKind, PostResult, ReplyPost
from switchboard.testing import (
    FakeProvider,
    claimed_todo,
    engine_name,
    human_and_endpoint,
    slack_address,
    watch_statements,
)

SLACK_SECRET = "slack-test-bot-credential-" + "Hp4Ns2"


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    return {**fake_api_settings, "reply_todo_cap": 3}


class Witness:
    """A provider whose post looks at the database from another connection before it answers: what
    it sees is what was committed before the dial."""

    KIND = "witness"

    def __init__(self) -> None:
        self.services: Any = None
        self.seen: list[tuple[str, str | None]] = []

    @hookimpl
    def register_kinds(self, register: Callable[[Any], None]) -> None:
        async def check(c: ConnectionCheck) -> CheckResult:
            return CheckResult(ok=True)

        async def post(p: ReplyPost) -> PostResult:
            async with self.services.db.read() as s:
                state = await s.scalar(select(Reply.state).where(Reply.id == p.reply_id))
            self.seen.append((p.reply_id, state))
            return PostResult(state="sent", object_id=f"w-{len(self.seen)}")

        register(
            ConnectionKind(
                self.KIND,
                normalize_account_key=lambda key: key.strip(),
                account_matches=lambda key, address: address.fields.get("room") is not None,
                target_of=lambda address: str(address.fields.get("room")),
                text_limit=1000,
                test=check,
                post=post,
            )
        )


@pytest.fixture
def witness() -> Witness:
    return Witness()


@pytest.fixture
def extra_providers(witness: Witness) -> list[object]:
    return [witness]


def witness_address(room: str = "r1") -> Address:
    return Address(kind="witness_room", provider="witness", display=f"witness {room}", fields={"room": room})


async def slack_world(services: Any, db: Any) -> Any:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="slack", name="slack", account_key="T0TEST", secret=SLACK_SECRET
    )
    return endpoint


async def codes(calls: list[Any]) -> list[str]:
    """Each call's state, or its refusal's code, in order."""
    out = []
    for result in await asyncio.gather(*calls, return_exceptions=True):
        if isinstance(result, SwitchboardError):
            out.append(result.code)
        elif isinstance(result, BaseException):
            raise result
        else:
            out.append(result["state"])
    return out


async def bucket_of(db: Any, endpoint_id: str) -> ReplyBucket:
    async with db.read() as s:
        bucket: ReplyBucket | None = await s.get(ReplyBucket, endpoint_id)
    assert bucket is not None
    return bucket


async def set_bucket(db: Any, endpoint_id: str, tokens: float) -> None:
    async with db.write() as s:
        await s.execute(
            update(ReplyBucket)
            .where(ReplyBucket.endpoint_id == endpoint_id)
            .values(tokens=tokens, updated_at=utcnow())
        )


def stale_context(monkeypatch: pytest.MonkeyPatch, **changes: Any) -> None:
    """The reply's one read sees ``changes`` instead of the table: what a read that raced a
    concurrent reply (another process, or one waiting on the todo's lock) would have seen."""
    real = statements.read_context

    def stale(*args: Any, **kwargs: Any) -> statements.Steps[statements.Context | None]:
        ctx = yield from real(*args, **kwargs)
        return None if ctx is None else dataclasses.replace(ctx, **changes)

    monkeypatch.setattr(statements, "read_context", stale)


# ---------------------------------------------------------------------------------------------


async def test_the_pending_row_is_committed_before_the_dial(
    services: Any, db: Any, guarded: Any, witness: Witness
) -> None:
    witness.services = services
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="witness", name="w", account_key="w", secret="w-secret"
    )
    todo = await claimed_todo(db, endpoint, witness_address())
    result = await reply.send_reply(services, endpoint, todo.id, "hello")
    # Another connection saw the row, pending, while the provider held the post.
    assert witness.seen == [(result["reply_id"], "pending")]
    async with db.read() as s:
        row = await s.get(Reply, result["reply_id"])
    assert row is not None and (row.state, row.provider_object_id) == ("sent", "w-1")


async def test_concurrent_replies_on_one_todo_never_pass_its_cap(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    endpoint = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    got = await codes([reply.send_reply(services, endpoint, todo.id, f"update {n}") for n in range(8)])
    assert sorted(got) == ["rate_limited"] * 5 + ["sent"] * 3
    assert len(fake_slack.posts()) == 3
    async with db.read() as s:
        assert len((await s.scalars(select(Reply.id).where(Reply.todo_id == todo.id))).all()) == 3


async def test_a_locked_reply_does_not_block_an_unlocked_one_on_the_same_todo(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    """PostgreSQL. The locked retry holds the todo from its read to its commit; an unlocked reply
    takes the endpoint's bucket, then inserts its row, whose foreign key share-locks the todo. Had
    the retry's lock conflicted with that share lock, the two would wait on each other as soon as
    the retry reached for the bucket: a deadlock (seen once in CI). The retry's lock must let the
    key check through while still making concurrent retries and lifecycle updates of the todo
    take turns."""
    if db.is_sqlite:
        pytest.skip("PostgreSQL's row locks (SQLite's writers take turns)")
    endpoint = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    # The lock clause the locked read takes, as PostgreSQL is sent it.
    locked_sql = str(statements.CONTEXT_LOCKED.compile(dialect=postgresql.asyncpg.dialect()))
    clause = locked_sql[locked_sql.rindex(" FOR ") :]
    dsn = make_url(db.url).set(drivername="postgresql").render_as_string(hide_password=False)
    holder, other = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        async with holder.transaction():
            await holder.execute(f"SELECT 1 FROM todos WHERE id = $1{clause}", todo.id)
            # While the todo is held as the locked retry holds it, an unlocked reply goes through.
            result = await asyncio.wait_for(reply.send_reply(services, endpoint, todo.id, "through"), 10)
            assert result["state"] == "sent"
            # And the lock still excludes another locked read of the todo.
            with pytest.raises(asyncpg.exceptions.LockNotAvailableError):
                async with other.transaction():
                    await other.execute(f"SELECT 1 FROM todos WHERE id = $1{clause} NOWAIT", todo.id)
    finally:
        await holder.close()
        await other.close()


async def test_concurrent_replies_on_many_todos_spend_the_bucket_exactly(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No refill while the test runs, however slow the machine: exactly the tokens held are spent.
    monkeypatch.setattr(statements, "BUCKET_REFILL_PER_SECOND", 1e-9)
    endpoint = await slack_world(services, db)
    first = await claimed_todo(db, endpoint, slack_address())
    await reply.send_reply(services, endpoint, first.id, "makes the bucket")
    await set_bucket(db, endpoint.id, 3.0)
    todos = [await claimed_todo(db, endpoint, slack_address(thread=f"17269900{n}.000100")) for n in range(8)]
    got = await codes([reply.send_reply(services, endpoint, t.id, "done") for t in todos])
    assert sorted(got) == ["rate_limited"] * 5 + ["sent"] * 3
    assert len(fake_slack.posts()) == 1 + 3
    assert (await bucket_of(db, endpoint.id)).tokens == pytest.approx(0.0, abs=1e-3)


async def test_a_bucket_changed_since_the_read_is_taken_from_its_locked_value(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    await reply.send_reply(services, endpoint, todo.id, "makes the bucket")
    await set_bucket(db, endpoint.id, 5.0)
    # The read saw a full bucket of an hour ago; the table holds 5 tokens taken just now.
    stale_context(monkeypatch, bucket_tokens=30.0, bucket_at=utcnow() - timedelta(hours=1))
    assert (await reply.send_reply(services, endpoint, todo.id, "second"))["state"] == "sent"
    assert (await bucket_of(db, endpoint.id)).tokens == pytest.approx(4.0, abs=0.1)
    # And when the table's bucket is empty, the stale full one does not let a reply through.
    await set_bucket(db, endpoint.id, 0.0)
    with pytest.raises(SwitchboardError) as err:
        await reply.send_reply(services, endpoint, todo.id, "third")
    assert (err.value.code, err.value.extra["retry_after"]) == ("rate_limited", 2)
    assert len(fake_slack.posts()) == 2
    async with db.read() as s:
        assert len((await s.scalars(select(Reply.id))).all()) == 2


async def test_a_cap_reached_since_the_read_is_refused(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    for n in range(3):
        await reply.send_reply(services, endpoint, todo.id, f"update {n}")
    stale_context(monkeypatch, replies=0)
    with pytest.raises(SwitchboardError) as err:
        await reply.send_reply(services, endpoint, todo.id, "one too many")
    assert (err.value.code, err.value.extra["retry_after"]) == ("rate_limited", None)
    assert "3 replies" in err.value.message
    assert len(fake_slack.posts()) == 3


async def test_a_row_gone_mid_dial_still_answers_the_dials_outcome(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    endpoint = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    fake_slack.delay = 0.3
    call = asyncio.create_task(reply.send_reply(services, endpoint, todo.id, "posting"))
    for _ in range(200):
        if fake_slack.posts():
            break
        await asyncio.sleep(0.01)
    assert fake_slack.posts(), "the dial never started"
    async with db.write() as s:
        await s.execute(delete(Reply))
    result = await call
    assert (result["state"], result["duplicate"], result["display"]) == (
        "sent",
        False,
        slack_address().display,
    )


async def test_a_reply_is_one_read_and_two_writes_around_the_dial(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    endpoint = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    await reply.send_reply(services, endpoint, todo.id, "warm")
    with watch_statements(db) as seen:
        assert (await reply.send_reply(services, endpoint, todo.id, "measured"))["state"] == "sent"
    # The take and the pending row: one statement on PostgreSQL (a CTE), two on SQLite; all of it
    # on the driver directly, nothing through SQLAlchemy's execution (no read, no ORM).
    take = (
        ["WITH TAKEN AS"]
        if db.dialect == "postgresql"
        else ["INSERT INTO REPLY_BUCKETS", "INSERT INTO REPLIES"]
    )
    assert seen.direct == ["SELECT TODOS.ENDPOINT_ID, TODOS.STATE,", *take, "UPDATE REPLIES SET"]
    assert seen.through_sqlalchemy == []


def stale_first_read(monkeypatch: pytest.MonkeyPatch, **changes: Any) -> list[bool]:
    """The reply's first read sees ``changes`` instead of the table (a read that ran before a
    concurrent change committed); later reads see the table. Returns each read's ``lock``."""
    real = statements.read_context
    locks: list[bool] = []

    def stale(*args: Any, lock: bool, **kwargs: Any) -> statements.Steps[statements.Context | None]:
        ctx = yield from real(*args, lock=lock, **kwargs)
        locks.append(lock)
        if len(locks) > 1 or ctx is None:
            return ctx
        return dataclasses.replace(ctx, **changes)

    monkeypatch.setattr(statements, "read_context", stale)
    return locks


@pytest.mark.skipif(
    engine_name() != "postgresql", reason="SQLite's writer takes turns: its read is the truth"
)
async def test_a_todo_taken_over_since_the_read_is_decided_again_under_its_lock(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    # In the table, another worker has taken the todo over with a fenced claim; the first read saw
    # the old, unfenced one (it ran just before the takeover committed).
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(lease_token_hash=token_hash("newer")))
    locks = stale_first_read(monkeypatch, lease_token_hash=None)
    with pytest.raises(SwitchboardError) as err:
        await reply.send_reply(services, endpoint, todo.id, "from the superseded worker")
    assert err.value.code == "conflict"
    assert locks == [False, True]
    assert fake_slack.posts() == []
    async with db.read() as s:
        assert (await s.scalars(select(Reply.id))).all() == []
    # With nothing changed since its read, a reply is decided by the first, unlocked read.
    locks.clear()
    monkeypatch.undo()
    other = await claimed_todo(db, endpoint, slack_address(thread="1726990099.000100"))
    locks = stale_first_read(monkeypatch)
    assert (await reply.send_reply(services, endpoint, other.id, "done"))["state"] == "sent"
    assert locks == [False]


@pytest.mark.skipif(engine_name() != "postgresql", reason="synchronous_commit is PostgreSQL's")
async def test_the_outcome_commits_without_waiting_for_its_flush_and_leaves_the_setting_alone(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    endpoint = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    result = await reply.send_reply(services, endpoint, todo.id, "posted")
    async with db.write() as s:
        await s.execute(update(Reply).where(Reply.id == result["reply_id"]).values(state="pending"))
    # The outcome's statement carries the quiet commit; one like it, asked what its own transaction
    # commits with, on a connection that is then asked again.
    assert "set_config('synchronous_commit', 'off', true)" in str(statements._RECORD["postgresql"])
    commits_with = func.current_setting("synchronous_commit").label("commits_with")
    table = Reply.__table__
    record = (
        update(table)
        .where(table.c.id == bindparam("reply_id"), statements._QUIET_COMMIT == literal_column("'off'"))
        .values(state="sent")
        .returning(commits_with)
    )

    async def work(run: Any) -> tuple[str, str]:
        inside = (await run(record, {"reply_id": result["reply_id"]}))[0].commits_with
        after = (await run(select(func.current_setting("synchronous_commit").label("now")), {}))[0].now
        return inside, after

    inside, after = await db.run_postgresql(work)
    assert (inside, after) == ("off", "on")
    async with db.read() as s:
        assert await s.scalar(select(Reply.state).where(Reply.id == result["reply_id"])) == "sent"
