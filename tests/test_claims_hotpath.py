"""The claim hot path (issue 12): batch claims (``claim_next`` with ``max``), the lean ``claim_next``
and ``complete`` statements, SQLite's single writer, and the nested-write guard; on whichever engine
the run uses (the engine-specific tests skip on the other)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import pytest
from sqlalchemy import event, func, insert, select, text
from sqlalchemy.exc import OperationalError

from switchboard import todos
from switchboard.db import Database, NestedWrite, PostgreSQLRun
from switchboard.errors import SwitchboardError
from switchboard.models import Attempt, Endpoint, Human, Todo
from switchboard.testing import add_todo, connect, vend

T = TypeVar("T")


async def _code(coro: Any) -> str:
    with pytest.raises(SwitchboardError) as err:
        await coro
    return err.value.code


async def _attempts(db: Database, todo_id: str) -> list[Attempt]:
    async with db.read() as s:
        query = select(Attempt).where(Attempt.todo_id == todo_id).order_by(Attempt.number)
        return list((await s.scalars(query)).all())


# ---------------------------------------------------------------------------------------------
# Batch claims


async def test_claim_next_max_5_returns_five_distinct_todos_each_with_its_own_lease(db: Database) -> None:
    ep, _ = await vend(db)
    ids = [(await add_todo(db, ep, title=f"t{i}", payload={"i": i})).id for i in range(7)]
    answer = await todos.claim_next(db, ep, max=5, fence=True, lease_seconds=120)
    assert answer is not None and set(answer) == {"todos"}
    got = answer["todos"]
    # The five oldest, oldest first, each claimed with its payload and its own one-time token.
    assert [t["id"] for t in got] == ids[:5]
    assert [t["payload"] for t in got] == [{"i": i} for i in range(5)]
    assert all(t["state"] == "claimed" and t["attempt"] == 1 and t["lease_expires_at"] for t in got)
    tokens = [t["lease_token"] for t in got]
    assert len(set(tokens)) == 5 and all(t.startswith("sbl_") for t in tokens)
    for todo in got:
        [attempt] = await _attempts(db, todo["id"])
        assert (attempt.number, attempt.endpoint_id, attempt.ended_at) == (1, ep.id, None)
    # Each token is its own todo's: another todo's token is refused, its own completes it.
    assert await _code(todos.complete(db, ep, got[0]["id"], lease_token=tokens[1])) == "conflict"
    for todo, token in zip(got, tokens, strict=True):
        assert (await todos.complete(db, ep, todo["id"], lease_token=token))["state"] == "done"
    # Fewer left than asked for: what there is; then none, said the same way.
    rest = await todos.claim_next(db, ep, max=5)
    assert rest is not None and [t["id"] for t in rest["todos"]] == ids[5:]
    assert all("lease_token" not in t for t in rest["todos"])
    assert await todos.claim_next(db, ep, max=5) == {"todos": [], "empty": True}


async def test_max_1_or_absent_answers_exactly_as_before(db: Database) -> None:
    ep, _ = await vend(db)
    first, second = await add_todo(db, ep), await add_todo(db, ep)
    one = await todos.claim_next(db, ep, max=1)
    plain = await todos.claim_next(db, ep)
    assert one is not None and plain is not None
    assert (one["id"], plain["id"]) == (first.id, second.id)
    assert set(one) == set(plain) and "todos" not in one
    assert await todos.claim_next(db, ep, max=1) is None


@pytest.mark.parametrize("bad", [0, 51, -1, "5", 2.0, True])
async def test_max_out_of_range_is_refused_and_claims_nothing(db: Database, bad: Any) -> None:
    ep, _ = await vend(db)
    todo = await add_todo(db, ep)
    assert await _code(todos.claim_next(db, ep, max=bad)) == "invalid_argument"
    assert (await todos.get_todo(db, ep, todo.id))["state"] == "pending"


async def test_two_concurrent_batch_claimers_get_disjoint_todos(db: Database) -> None:
    ep, _ = await vend(db)
    for i in range(50):
        await add_todo(db, ep, title=f"t{i}")

    async def drain() -> list[str]:
        got: list[str] = []
        while True:
            answer = await todos.claim_next(db, ep, max=5)
            assert answer is not None
            if answer.get("empty"):
                return got
            assert 1 <= len(answer["todos"]) <= 5
            got += [t["id"] for t in answer["todos"]]

    first, second = await asyncio.gather(drain(), drain())
    assert not set(first) & set(second)
    assert len(first) + len(second) == 50 and len(set(first + second)) == 50


@contextlib.asynccontextmanager
async def _open_transaction(
    db: Database, todo_id: str, statements: str | Sequence[str], **params: str
) -> AsyncIterator[asyncio.Event]:
    """Run ``statements`` (``:id``: the todo's id; ``params`` the rest) in one transaction of another
    connection and keep it open: its row locks held, as the doorbell holds a todo for a moment when
    it moves its ring count (``UPDATE``) and an insert that refers to the todo does (``FOR KEY
    SHARE``, PostgreSQL's foreign key check); its rows not yet committed. Yields an event that
    commits when set; the block's end commits at the latest."""
    held, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        other = Database(db.url)
        try:
            async with other.engine.connect() as conn:
                for statement in [statements] if isinstance(statements, str) else statements:
                    await conn.execute(text(statement), {"id": todo_id, **params})
                held.set()
                await release.wait()
                await conn.commit()
        finally:
            await other.dispose()

    holder = asyncio.create_task(hold())
    waiting = asyncio.create_task(held.wait())
    await asyncio.wait([holder, waiting], return_when=asyncio.FIRST_COMPLETED)
    if holder.done():
        waiting.cancel()
        holder.result()  # the lock could not be taken: its error, not a hang
    try:
        yield release
    finally:
        release.set()
        await holder


async def _one_pending(db: Database) -> tuple[Endpoint, Todo]:
    """An endpoint whose claims' connection is open and warm, and one pending todo of it. PostgreSQL
    only: these tests are about its row locks and snapshots; SQLite's writer takes turns."""
    if db.is_sqlite:
        pytest.skip("PostgreSQL's row locks and snapshots")
    ep, _ = await vend(db)
    assert await todos.claim_next(db, ep) is None
    return ep, await add_todo(db, ep)


async def _meeting(
    db: Database,
    todo_id: str,
    statements: str | Sequence[str],
    verb: Callable[[], Awaitable[T]],
    **params: str,
) -> T:
    """``verb()`` while another transaction that ran ``statements`` is open (``_open_transaction``).
    That transaction commits 20 ms after the verb's first statement is sent: a round trip is well
    under that, so the statement has met what the transaction holds or wrote by then."""
    async with _open_transaction(db, todo_id, statements, **params) as commit:
        sent = asyncio.Event()
        db.statement_taps.append(lambda _sql, _args: sent.set())
        try:
            call = asyncio.create_task(verb())
            await sent.wait()
            await asyncio.sleep(0.02)
            commit.set()
        finally:
            db.statement_taps.clear()
    return await call


async def test_a_claim_does_not_pass_over_a_todo_the_doorbell_holds_for_a_moment(db: Database) -> None:
    ep, todo = await _one_pending(db)
    ring = "UPDATE todos SET ring_count = ring_count + 1 WHERE id = :id"
    claimed = await _meeting(db, todo.id, ring, lambda: todos.claim_next(db, ep))
    # The todo was pending the whole time: the agent gets it, not "empty".
    assert claimed is not None and claimed["id"] == todo.id


@pytest.mark.parametrize(
    ("lock", "while_held"),
    [
        # Someone who keeps a todo locked as an update would: the claim does not wait for them.
        ("SELECT id FROM todos WHERE id = :id FOR NO KEY UPDATE", None),
        # What a transaction inserting a row that refers to the todo holds until it commits: no
        # reason to pass the todo over.
        ("SELECT id FROM todos WHERE id = :id FOR KEY SHARE", "claimed"),
    ],
    ids=["locked-as-for-an-update", "referred-to-by-a-new-row"],
)
async def test_a_claim_while_another_transaction_holds_the_todo(
    db: Database, lock: str, while_held: str | None
) -> None:
    ep, todo = await _one_pending(db)
    async with _open_transaction(db, todo.id, lock):
        claimed = await asyncio.wait_for(todos.claim_next(db, ep), 1.0)
        assert (claimed and claimed["state"]) == while_held
    if claimed is None:
        # Once let go, it is claimed.
        claimed = await todos.claim_next(db, ep)
    assert claimed is not None and claimed["id"] == todo.id


async def test_a_claim_numbers_its_attempt_after_one_committed_while_it_ran(db: Database) -> None:
    ep, todo = await _one_pending(db)
    # Attempt 1 of the todo, committed after the claim's statement has begun: its snapshot does not
    # see it, as when another agent claimed and released the todo while the statement ran. (Its
    # insert of the same number waits for this one, then finds the number taken.)
    attempt = (
        "INSERT INTO attempts (id, todo_id, number, endpoint_id, claimed_at, lease_expires_at,"
        " heartbeats, outcome, ended_at)"
        " VALUES ('at_meanwhile', :id, 1, 'ep_other', now(), now(), 0, 'released', now())"
    )
    claimed = await _meeting(db, todo.id, attempt, lambda: todos.claim_next(db, ep))
    # Not an error: claimed, its attempt numbered after the one committed meanwhile.
    assert claimed is not None and claimed["id"] == todo.id and claimed["state"] == "claimed"
    numbered = [(a.id == "at_meanwhile", a.number) for a in await _attempts(db, todo.id)]
    assert numbered == [(True, 1), (False, 2)]


# What another agent of the same endpoint leaves when the todo changes hands under a holder's
# ``complete`` (attempt 1 ends, the todo is claimed again unfenced: attempt 2), as the lease reaper
# or an operator's release and then ``claim_next`` write it, in one transaction here so that the
# complete's statement meets all of it at once.
_CLAIMED_AGAIN = (
    "UPDATE todos SET lease_expires_at = now() + interval '300 seconds', updated_at = now() WHERE id = :id",
    "INSERT INTO attempts (id, todo_id, number, endpoint_id, claimed_at, lease_expires_at, heartbeats)"
    " VALUES ('at_again', :id, 2, :ep, now(), now() + interval '300 seconds', 0)",
)


@pytest.mark.parametrize(
    "ended",
    [
        # The lease ran out (the reaper), and the todo was claimed again: attempt counter 2.
        ("expired", "UPDATE todos SET attempt = attempt + 1 WHERE id = :id"),
        # An operator released it (which gives its attempt back) and it was claimed again: the
        # attempt counter is 1 again, as the complete's snapshot has it.
        ("released", "UPDATE todos SET attempt = 1 WHERE id = :id"),
    ],
    ids=["expired", "released"],
)
async def test_a_complete_that_meets_a_new_claim_closes_the_new_attempt(
    db: Database, ended: tuple[str, str]
) -> None:
    outcome, counter = ended
    ep, todo = await _one_pending(db)
    assert await todos.claim_next(db, ep) is not None
    changed_hands = [
        f"UPDATE attempts SET outcome = '{outcome}', ended_at = now() WHERE todo_id = :id AND number = 1",
        counter,
        *_CLAIMED_AGAIN,
    ]
    # Unfenced, the same endpoint's new claim is the one completed (docs/agents.md).
    done = await _meeting(
        db, todo.id, changed_hands, lambda: todos.complete(db, ep, todo.id, summary="finished"), ep=ep.id
    )
    assert done["state"] == "done"
    history = [(a.number, a.outcome, a.ended_at is not None) for a in await _attempts(db, todo.id)]
    # The ended attempt keeps its outcome, and the done todo has no attempt left open.
    assert history == [(1, outcome, True), (2, "completed", True)]


async def test_a_complete_that_meets_its_own_heartbeat_completes_the_claim(db: Database) -> None:
    ep, todo = await _one_pending(db)
    assert await todos.claim_next(db, ep) is not None
    heartbeat = [
        "UPDATE attempts SET heartbeats = heartbeats + 1 WHERE todo_id = :id AND number = 1",
        "UPDATE todos SET lease_expires_at = now() + interval '600 seconds', updated_at = now()"
        " WHERE id = :id",
    ]
    # The holder's heartbeat, committed while its complete waited for the row: the same claim.
    done = await _meeting(db, todo.id, heartbeat, lambda: todos.complete(db, ep, todo.id, summary="finished"))
    assert done["state"] == "done"
    history = [(a.number, a.outcome, a.heartbeats) for a in await _attempts(db, todo.id)]
    assert history == [(1, "completed", 1)]


async def test_batch_claims_over_mcp(db: Database, base_url: str) -> None:
    ep, token = await vend(db)
    ids = [(await add_todo(db, ep, title=f"t{i}")).id for i in range(3)]
    async with connect(base_url, token, ep) as agent:
        [tool] = [t for t in (await agent.client.list_tools()).tools if t.name == "claim_next"]
        assert tool.input_schema["properties"]["max"] == {
            **tool.input_schema["properties"]["max"],
            "type": "integer",
            "minimum": 1,
            "maximum": 50,
        }
        for bad in (0, 51, "2"):
            assert (await agent.error("claim_next", max=bad))["error"] == "invalid_argument"
        single = await agent.ok("claim_next", max=1)
        assert set(single) == {"todo"} and single["todo"]["id"] == ids[0]
        batch = await agent.ok("claim_next", max=5, fence=True)
        assert set(batch) == {"todos"} and [t["id"] for t in batch["todos"]] == ids[1:]
        assert all(t["lease_token"].startswith("sbl_") for t in batch["todos"])
        assert await agent.ok("claim_next", max=5) == {"todos": [], "empty": True}
        assert await agent.ok("claim_next") == {"empty": True}
        done = await agent.ok("complete", todo_id=ids[1], lease_token=batch["todos"][0]["lease_token"])
        assert done["state"] == "done"


# ---------------------------------------------------------------------------------------------
# The lean statements return what every other path shows


async def test_claim_next_and_complete_show_the_same_row_as_a_read(db: Database) -> None:
    ep, _ = await vend(db)
    todo = await add_todo(db, ep, payload={"x": [1, 2]})
    claimed = await todos.claim_next(db, ep)
    assert claimed is not None
    [listed] = await todos.list_todos(db, ep)
    assert {k: v for k, v in claimed.items() if k != "payload"} == listed
    assert claimed["payload"] == {"x": [1, 2]}
    done = await todos.complete(db, ep, todo.id, result={"ok": True}, summary="merged")
    [listed] = await todos.list_todos(db, ep)
    assert done == listed
    detail = await todos.get_todo(db, ep, todo.id)
    assert detail["result"] == {"ok": True} and detail["finished_at"] is not None
    assert [(a["outcome"], a["summary"]) for a in detail["attempts"]] == [("completed", "merged")]


async def test_complete_refuses_with_the_reason_and_writes_nothing(db: Database) -> None:
    ep, _ = await vend(db)
    other, _ = await vend(db)
    todo = await add_todo(db, ep)
    assert await _code(todos.complete(db, ep, todo.id)) == "conflict"  # pending, never claimed
    assert await _code(todos.complete(db, other, todo.id)) == "not_found"
    assert await _code(todos.complete(db, ep, "td_missing")) == "not_found"
    assert await _code(todos.complete(db, ep, "")) == "invalid_argument"
    claimed = await todos.claim_next(db, ep, fence=True)
    assert claimed is not None
    with pytest.raises(SwitchboardError, match="pass its lease_token"):
        await todos.complete(db, ep, todo.id)
    assert (await todos.get_todo(db, ep, todo.id))["state"] == "claimed"
    assert [a.outcome for a in await _attempts(db, todo.id)] == [None]


async def test_claim_next_and_complete_are_one_autocommit_statement_on_postgresql(db: Database) -> None:
    if db.is_sqlite:
        pytest.skip("PostgreSQL's round trips; SQLite has none to save")
    ep, _ = await vend(db)
    todo = await add_todo(db, ep)
    direct: list[str] = []
    through_sqlalchemy: list[str] = []

    def grab(_conn: Any, _cursor: Any, statement: str, _params: Any, _ctx: Any, _many: bool) -> None:
        through_sqlalchemy.append(statement)

    db.statement_taps.append(lambda sql, _args: direct.append(sql.split()[0].upper()))
    event.listen(db.write_engine.sync_engine, "before_cursor_execute", grab)
    try:
        await todos.claim_next(db, ep)
        await todos.complete(db, ep, todo.id, result={"ok": True})
    finally:
        event.remove(db.write_engine.sync_engine, "before_cursor_execute", grab)
        db.statement_taps.clear()
    # One statement each, sent on asyncpg directly outside any transaction block: no BEGIN and no
    # COMMIT round trip (SQLAlchemy sent nothing at all).
    assert direct == ["WITH", "WITH"] and through_sqlalchemy == []


async def test_a_dropped_postgresql_connection_is_replaced_without_an_error(db: Database) -> None:
    if db.is_sqlite:
        pytest.skip("PostgreSQL's pooled connections")
    ep, _ = await vend(db)
    for _ in range(4):
        await add_todo(db, ep)
    # Both pools now hold a live connection: the claims' and the key-addressed writes'.
    claimed = await todos.claim_next(db, ep)
    assert claimed is not None
    await todos.complete(db, ep, claimed["id"])
    killer = Database(db.url)
    try:
        async with killer.engine.connect() as conn:
            killed = await conn.scalar(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
    finally:
        await killer.dispose()
    assert killed
    await asyncio.sleep(0.3)  # asyncpg hears the server hang up
    # No ping per checkout, yet the closed connections are replaced rather than used.
    claimed = await todos.claim_next(db, ep)
    assert claimed is not None
    assert (await todos.complete(db, ep, claimed["id"]))["state"] == "done"
    assert (await todos.claim_next(db, ep, max=5))["todos"]  # type: ignore[index]


async def test_other_statements_are_planned_per_call_and_the_hot_writes_may_keep_a_plan(db: Database) -> None:
    if db.is_sqlite:
        pytest.skip("PostgreSQL's plan cache")
    setting = select(func.current_setting("plan_cache_mode").label("mode"))

    async def mode(run: PostgreSQLRun) -> str:
        return str((await run(setting, {}))[0].mode)

    # A statement whose best plan depends on the data is planned on every call. The hot writes
    # (claims, completes, replies, ingest's batches) run where PostgreSQL's default keeps a plan:
    # they walk their indexes whatever the statistics, which tests/test_kept_plans.py holds them
    # to (claims since migration 0011, with and without statistics).
    assert await db.run_postgresql(mode) == "force_custom_plan"
    assert await db.run_postgresql(mode, generic_plans=True) == "auto"


# ---------------------------------------------------------------------------------------------
# SQLite: one writer, no busy handler; reads cannot write


async def test_twenty_concurrent_sqlite_writers_never_meet_a_locked_database(db: Database) -> None:
    if not db.is_sqlite:
        pytest.skip("SQLite's writer")
    ep, _ = await vend(db)

    # No busy handler at all: a writer that met another connection's write lock would fail at once
    # with "database is locked" instead of sleeping, so every write below must have taken its turn.
    def no_busy_handler(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.close()

    for engine in (db.engine, db.write_engine):
        await engine.dispose()
        event.listen(engine.sync_engine, "connect", no_busy_handler)
    for i in range(20):
        await add_todo(db, ep, title=f"seed {i}")

    async def worker(n: int) -> int:
        done = 0
        for round_ in range(5):
            await todos.push(db, endpoint_slug=ep.slug, title=f"w{n} r{round_}")
            answer = await todos.claim_next(db, ep, max=2 if n % 2 else None)
            claimed = answer["todos"] if answer is not None and "todos" in answer else [answer]
            for todo in claimed:
                if todo is not None:
                    await todos.complete(db, ep, todo["id"], summary=f"by {n}")
                    done += 1
            await todos.list_todos(db, ep, limit=5)
        return done

    results = await asyncio.wait_for(asyncio.gather(*(worker(n) for n in range(20))), 120)
    async with db.read() as s:
        total = await s.scalar(select(func.count()).select_from(Todo))
        finished = await s.scalar(select(func.count()).select_from(Todo).where(Todo.state == "done"))
    assert total == 120 and finished == sum(results) and sum(results) >= 100


async def test_a_sqlite_read_session_cannot_write(db: Database) -> None:
    if not db.is_sqlite:
        pytest.skip("SQLite's read connections are query-only")
    with pytest.raises(OperationalError, match="readonly"):
        async with db.read() as s:
            await s.execute(
                insert(Human).values(
                    id="hu_x", handle="x", token_hash="h", token_display="d", created_at=func.now()
                )
            )


async def test_a_burst_of_sqlite_reads_reuses_its_connections(db: Database) -> None:
    # A burst of concurrent reads (an echo check per comment delivery under load) is served by
    # connections kept open: opening one costs a thread, the file, its PRAGMAs and the schema, more
    # than the read. Five bursts of 32 open at most 32 connections, once.
    if not db.is_sqlite:
        pytest.skip("SQLite's read pool")
    opened = 0

    def count(_dbapi_connection: Any, _record: Any) -> None:
        nonlocal opened
        opened += 1

    await db.engine.dispose()
    event.listen(db.engine.sync_engine, "connect", count)

    async def read() -> int:
        async with db.read() as s:
            found = await s.scalar(select(func.count()).select_from(Todo))
            await asyncio.sleep(0.01)  # held a moment, as a request holds its session
            return int(found or 0)

    try:
        for _ in range(5):
            assert await asyncio.wait_for(asyncio.gather(*(read() for _ in range(32))), 30) == [0] * 32
    finally:
        event.remove(db.engine.sync_engine, "connect", count)
    assert 1 <= opened <= 32


# ---------------------------------------------------------------------------------------------
# Nested writes fail at once instead of waiting for themselves


async def test_a_nested_write_is_refused_at_once(db: Database) -> None:
    ep, _ = await vend(db)
    todo = await add_todo(db, ep)

    async def nested_session() -> None:
        async with db.write() as s:
            await s.execute(select(1))
            async with db.write():
                pass

    async def verb_inside_a_write() -> None:
        async with db.write():
            await todos.claim_next(db, ep)

    async def through_a_child_task() -> None:
        async with db.writing():
            await asyncio.wait_for(todos.complete(db, ep, todo.id), 5)

    for attempt in (nested_session, verb_inside_a_write, through_a_child_task):
        with pytest.raises(NestedWrite):
            await asyncio.wait_for(attempt(), 10)
    # Nothing was left held: writes go on, and the todo was never claimed.
    assert (await todos.claim_next(db, ep)) is not None


async def test_a_task_spawned_in_a_write_writes_once_that_write_is_over(db: Database) -> None:
    ep, _ = await vend(db)
    await add_todo(db, ep)
    later: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def after() -> None:
        await later
        later_result.append(await todos.claim_next(db, ep))

    later_result: list[Any] = []
    async with db.write() as s:
        await s.execute(select(1))
        task = asyncio.create_task(after())
    later.set_result(None)
    await asyncio.wait_for(task, 10)
    assert later_result and later_result[0] is not None
