"""The todo lifecycle (SPEC §5.1) on the storage layer, on whichever engine the run uses."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from switchboard import todos
from switchboard.db import Database, utcnow
from switchboard.errors import SwitchboardError
from switchboard.ids import token_hash
from switchboard.models import Attempt, Todo
from switchboard.services import Services
from switchboard.testing import add_todo, vend, watch_statements


async def _todo(db: Database, todo_id: str) -> Todo:
    async with db.read() as s:
        todo = await s.get(Todo, todo_id)
        assert todo is not None
        return todo


async def _attempts(db: Database, todo_id: str) -> list[Attempt]:
    async with db.read() as s:
        return list(
            (
                await s.scalars(select(Attempt).where(Attempt.todo_id == todo_id).order_by(Attempt.number))
            ).all()
        )


async def _code(coro: object) -> str:
    with pytest.raises(SwitchboardError) as err:
        await coro  # type: ignore[misc]
    return err.value.code


async def test_claim_complete_records_the_attempt_and_who_finished(db: Database) -> None:
    ep, _ = await vend(db)
    todo = await add_todo(db, ep, payload={"pr": 7})
    claimed = await todos.claim(db, ep, todo.id)
    assert claimed["state"] == "claimed" and claimed["attempt"] == 1
    assert claimed["payload"] == {"pr": 7} and "lease_token" not in claimed
    done = await todos.complete(db, ep, todo.id, result={"ok": True}, summary="merged")
    assert done["state"] == "done" and done["lease_expires_at"] is None
    row = await _todo(db, todo.id)
    assert row.finished_by == ep.id and row.finished_at is not None and row.result == {"ok": True}
    [attempt] = await _attempts(db, todo.id)
    assert (attempt.number, attempt.outcome, attempt.summary, attempt.endpoint_id) == (
        1,
        "completed",
        "merged",
        ep.id,
    )
    detail = await todos.get_todo(db, ep, todo.id)
    assert detail["result"] == {"ok": True} and detail["attempts"][0]["outcome"] == "completed"
    assert detail["replies"] == []
    # Finished: no second verdict.
    assert await _code(todos.complete(db, ep, todo.id)) == "conflict"


async def test_lease_defaults_to_the_endpoints_and_is_capped(db: Database) -> None:
    ep, _ = await vend(db, default_lease_seconds=45)
    todo = await add_todo(db, ep)
    before = utcnow()
    await todos.claim(db, ep, todo.id)
    lease = (await _todo(db, todo.id)).lease_expires_at
    assert lease is not None and timedelta(seconds=44) < lease - before < timedelta(seconds=47)
    other = await add_todo(db, ep)
    assert await _code(todos.claim(db, ep, other.id, lease_seconds=24 * 3600 + 1)) == "invalid_argument"
    assert await _code(todos.claim(db, ep, other.id, lease_seconds=0)) == "invalid_argument"
    assert (await _todo(db, other.id)).state == "pending"


async def test_heartbeat_extends_the_lease_and_counts(db: Database) -> None:
    ep, _ = await vend(db)
    todo = await add_todo(db, ep)
    await todos.claim(db, ep, todo.id, lease_seconds=10)
    await todos.heartbeat(db, ep, todo.id, lease_seconds=600)
    lease = (await _todo(db, todo.id)).lease_expires_at
    assert lease is not None and lease - utcnow() > timedelta(seconds=590)
    [attempt] = await _attempts(db, todo.id)
    assert attempt.heartbeats == 1 and attempt.last_heartbeat_at is not None


async def test_fail_backs_off_doubling_then_dead_letters_on_the_last_attempt(db: Database) -> None:
    ep, _ = await vend(db)
    todo = await add_todo(db, ep)
    delays = []
    for attempt in range(1, 6):
        # The retry scheduler would do this once next_retry_at passes; jump the clock instead.
        async with db.write() as s:
            await s.execute(
                update(Todo).where(Todo.id == todo.id, Todo.state == "failed").values(next_retry_at=utcnow())
            )
        assert todo.id in await todos.schedule_retries(db) or attempt == 1
        await todos.claim(db, ep, todo.id)
        failed = await todos.fail(db, ep, todo.id, error=f"boom {attempt}")
        row = await _todo(db, todo.id)
        assert failed["state"] == "failed" and row.finished_by == ep.id
        if attempt < 5:
            assert row.next_retry_at is not None and not row.dead_letter
            delays.append(round((row.next_retry_at - row.updated_at).total_seconds()))
        else:
            assert failed["dead_letter"] is True and failed["next_retry_at"] is None
    assert delays == [30, 60, 120, 240]
    assert [a.outcome for a in await _attempts(db, todo.id)] == ["failed"] * 4 + ["dead_lettered"]
    assert todos.retry_delay(6) == 900 and todos.retry_delay(20) == 900
    # A dead letter is never retried.
    assert await todos.schedule_retries(db, utcnow() + timedelta(days=1)) == []


async def test_release_returns_to_pending_without_spending_the_attempt(db: Database) -> None:
    ep, _ = await vend(db)
    todo = await add_todo(db, ep)
    await todos.claim(db, ep, todo.id)
    released = await todos.release(db, ep, todo.id)
    assert released["state"] == "pending" and released["attempt"] == 0
    again = await todos.claim(db, ep, todo.id)
    assert again["attempt"] == 1
    assert [a.outcome for a in await _attempts(db, todo.id)] == ["released", None]


async def test_fencing_refuses_a_stale_holder(db: Database) -> None:
    ep, _ = await vend(db)
    todo = await add_todo(db, ep)
    first = await todos.claim(db, ep, todo.id, lease_seconds=1, fence=True)
    token = first["lease_token"]
    assert token.startswith("sbl_")
    row = await _todo(db, todo.id)
    assert row.lease_token_hash == token_hash(token) and token not in str(row.lease_token_hash)
    assert await _code(todos.heartbeat(db, ep, todo.id)) == "conflict"
    assert await _code(todos.complete(db, ep, todo.id, lease_token="sbl_wrong")) == "conflict"
    await asyncio.sleep(1.2)
    assert await todos.reap_leases(db) == [todo.id]
    second = await todos.claim(db, ep, todo.id, fence=True)
    # The first holder wakes up late: its token no longer names the claim.
    assert await _code(todos.complete(db, ep, todo.id, lease_token=token)) == "conflict"
    done = await todos.complete(db, ep, todo.id, lease_token=second["lease_token"])
    assert done["state"] == "done"


async def test_reaper_returns_expired_leases_and_dead_letters_the_last(db: Database) -> None:
    ep, _ = await vend(db)
    todo = await add_todo(db, ep)
    last = await add_todo(db, ep)
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == last.id).values(attempt=4))
    await todos.claim(db, ep, todo.id, lease_seconds=1)
    await todos.claim(db, ep, last.id, lease_seconds=1)
    # A lease that has run out is lost even before the reaper gets to it.
    await asyncio.sleep(1.2)
    assert await _code(todos.heartbeat(db, ep, todo.id)) == "conflict"
    assert sorted(await todos.reap_leases(db)) == [todo.id]
    assert (await _todo(db, todo.id)).state == "pending"
    dead = await _todo(db, last.id)
    assert (dead.state, dead.dead_letter, dead.next_retry_at) == ("failed", True, None)
    assert [a.outcome for a in await _attempts(db, todo.id)] == ["expired"]


async def test_other_endpoints_todos_do_not_exist_and_queues_are_granted(db: Database) -> None:
    ep, _ = await vend(db, queues=["default", "ops"])
    other, _ = await vend(db)
    todo = await add_todo(db, ep)
    for call in (
        todos.get_todo(db, other, todo.id),
        todos.claim(db, other, todo.id),
        todos.release(db, other, todo.id),
    ):
        assert await _code(call) == "not_found"
    assert await _code(todos.claim_next(db, ep, queue="billing")) == "forbidden"
    assert await _code(todos.list_todos(db, ep, queue="billing")) == "forbidden"
    assert await _code(todos.list_todos(db, ep, limit=201)) == "invalid_argument"
    assert await _code(todos.list_todos(db, ep, state="lost")) == "invalid_argument"
    assert await todos.claim_next(db, ep, queue="ops") is None
    assert (await todos.claim_next(db, ep))["id"] == todo.id  # type: ignore[index]


async def test_claim_next_takes_the_oldest_first(db: Database) -> None:
    ep, _ = await vend(db)
    ids = [(await add_todo(db, ep, title=f"t{i}")).id for i in range(3)]
    got = [(await todos.claim_next(db, ep))["id"] for _ in range(3)]  # type: ignore[index]
    assert got == ids
    assert await todos.claim_next(db, ep) is None


async def test_concurrent_claimers_never_share_a_todo(db: Database) -> None:
    ep, _ = await vend(db)
    for i in range(60):
        await add_todo(db, ep, title=f"t{i}")

    async def drain() -> list[str]:
        got = []
        while (row := await todos.claim_next(db, ep)) is not None:
            got.append(row["id"])
        return got

    results = await asyncio.gather(*(drain() for _ in range(4)))
    flat = [i for r in results for i in r]
    assert len(flat) == 60 and len(set(flat)) == 60


async def test_lifecycle_pass_requeues_and_rings(services: Services) -> None:
    db = services.db
    ep, _ = await vend(db)
    todo = await add_todo(db, ep)
    await todos.claim(db, ep, todo.id)
    await todos.fail(db, ep, todo.id)
    heard: list[list[str]] = []

    async def listener(ids: list[str]) -> None:
        heard.append(ids)

    services.todo_listeners.append(listener)
    await todos.lifecycle_pass(services)
    assert heard == []  # the retry is 30 s away
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(next_retry_at=utcnow()))
    await todos.lifecycle_pass(services)
    assert heard == [[todo.id]]
    row = await _todo(db, todo.id)
    assert (row.state, row.ring_count, row.next_retry_at) == ("pending", 0, None)


async def test_lists_and_the_background_passes_leave_payloads_and_results_in_the_database(
    db: Database,
) -> None:
    """The agent's list, the operators' list, the lease reaper and the retry scheduler show or move
    many todos at once and never a payload or a result: their reads name neither column (a payload
    is a webhook's body, often tens of KB; a list reads up to 200 rows)."""
    ep, _ = await vend(db)
    big = {"body": "x" * 50_000}
    listed = await add_todo(db, ep, payload=big)
    leased = await add_todo(db, ep, payload=big)
    retried = await add_todo(db, ep, payload=big)
    await todos.claim(db, ep, leased.id, lease_seconds=1)
    await todos.claim(db, ep, retried.id)
    await todos.fail(db, ep, retried.id, error="try again")
    later = utcnow() + timedelta(hours=1)
    with watch_statements(db) as seen:
        rows = await todos.list_todos(db, ep)
        page = await todos.list_in_scopes(db, scopes=None)
        assert await todos.reap_leases(db, later) == [leased.id]
        assert await todos.schedule_retries(db, later) == [retried.id]
    assert {r["id"] for r in rows} == {listed.id, leased.id, retried.id}
    assert {r["id"] for r in page.rows} == {listed.id, leased.id, retried.id}
    assert all(r["payload_size"] > 50_000 for r in rows)
    reads = [sql for sql in seen.through_sqlalchemy if "FROM todos" in sql]
    assert len(reads) >= 4
    assert not [sql for sql in reads if re.search(r"todos\.(payload|result)\b", sql)]
    # The bodies are still there for the reads that show them.
    detail = await todos.get_todo(db, ep, listed.id)
    assert detail["payload"] == big
