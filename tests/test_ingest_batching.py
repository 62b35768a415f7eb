"""Group commit: deliveries that arrive while the writer is busy are stored together, in one
transaction, and each is answered only after its rows have committed.

The tests hold the writer inside a transaction (``Gate``) so that the deliveries they send pile up
and are taken as one batch, as they do under load.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from fixtures.ingest_kit import fixture_bytes
from fixtures.intake_kit import ISSUE_1, SENDER, github_hook, set_rules
from sqlalchemy import select, text

from switchboard import deliveries, ingest_steps, tenancy
from switchboard.db import Database
from switchboard.ids import new_id
from switchboard.ingest import DECIDE_ATTEMPTS, INGEST_WRITER
from switchboard.ingest_statements import Rows
from switchboard.ingest_writer import IngestWriter
from switchboard.models import Event, Todo
from switchboard.sanitize import json_text
from switchboard.services import Services
from switchboard.testing import (
    ServeProcesses,
    counts,
    engine_name,
    github_headers,
    make_webhook,
    post,
    watch_statements,
)

UNREACHABLE = "postgresql+asyncpg://nobody@127.0.0.1:1/none"


class Gate:
    """Holds the writer at the start of its next transaction until ``open()``: everything sent
    while the gate is shut waits and is taken as the next batch (the writer stores one batch at a
    time)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = asyncio.Event()
        self._release = asyncio.Event()
        self._armed = True
        real = IngestWriter._transaction

        async def held(writer: IngestWriter, batch: Any) -> Any:
            if self._armed:
                self._armed = False
                self.entered.set()
                await self._release.wait()
            return await real(writer, batch)

        monkeypatch.setattr(IngestWriter, "_transaction", held)

    def open(self) -> None:
        self._release.set()


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out waiting")


def _generic(n: int | str, **extra: Any) -> tuple[bytes, dict[str, str]]:
    return json.dumps({"n": n, **extra}).encode(), {"X-Delivery-Id": f"d-{n}"}


Delivery = tuple[bytes, dict[str, str]]
Answer = tuple[int, dict[str, Any], dict[str, str]]


async def _held_batch(
    server: TestServer,
    gate: Gate,
    base_url: str,
    token: str,
    deliveries: list[Delivery],
    first_delivery: Delivery | None = None,
) -> tuple[Answer, list[Answer]]:
    """Send a first delivery and hold the writer in its transaction, send ``deliveries`` while it
    is held, then let it go: they are stored as one batch. (first answer, their answers)"""
    writer = server.app[INGEST_WRITER]
    first = asyncio.create_task(post(base_url, token, *(first_delivery or _generic("first"))))
    await asyncio.wait_for(gate.entered.wait(), 10)
    sent = [asyncio.create_task(post(base_url, token, body, headers)) for body, headers in deliveries]
    await _until(lambda: writer.waiting == len(deliveries))
    gate.open()
    return await first, list(await asyncio.gather(*sent))


async def test_a_poison_delivery_is_answered_503_and_its_batch_neighbours_are_stored(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    real = ingest_steps.todo_rows

    def todo_rows(*args: Any) -> list[dict[str, Any]]:
        rows = real(*args)
        # As if its endpoint had been deleted between the lookup and the commit: the foreign key
        # refuses the todo, and with it the whole transaction of the batch.
        if b'"poison"' in args[1].encoded:  # the delivery's content: its stored payload
            for row in rows:
                row["endpoint_id"] = "ep_00000000000000000000000000"
        return rows

    monkeypatch.setattr(ingest_steps, "todo_rows", todo_rows)
    gate = Gate(monkeypatch)
    deliveries = (
        [_generic(n) for n in range(7)] + [_generic("bad", poison=True)] + [_generic(n) for n in range(7, 12)]
    )
    first, answers = await _held_batch(server, gate, base_url, token, deliveries)
    assert first[0] == 202
    statuses = [status for status, _, _ in answers]
    assert statuses == [202] * 7 + [503] + [202] * 5
    assert answers[7][1]["error"] == "unavailable"
    assert all(answer["created"] == 1 for status, answer, _ in answers if status == 202)
    # Everything but the poison delivery is stored; nothing of it is.
    assert await counts(services) == (13, 13)
    async with services.db.read() as s:
        keys = set((await s.scalars(select(Event.delivery_key))).all())
    assert "d-bad" not in keys and {f"d-{n}" for n in range(12)} <= keys
    # /metrics shows the group commit: the failed transactions of the split, and every stored
    # delivery in exactly one committed one.
    metrics = services.metrics
    assert metrics.value("switchboard_ingest_transactions_total", outcome="failed") >= 2
    committed = metrics.value("switchboard_ingest_transactions_total", outcome="committed")
    assert committed == server.app[INGEST_WRITER].batches >= 2
    text = metrics.render()
    assert f"switchboard_ingest_batch_deliveries_count {committed:g}\n" in text
    assert "switchboard_ingest_batch_deliveries_sum 13\n" in text
    assert f"switchboard_ingest_commit_seconds_count {committed:g}\n" in text


async def test_two_copies_in_one_batch_store_one_and_answer_the_other_as_its_duplicate(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    gate = Gate(monkeypatch)
    writer = server.app[INGEST_WRITER]
    body = json.dumps({"action": "opened", "issue": {"number": 3, "title": "t"}}).encode()
    copy = (body, github_headers(secret, body, "issues", "same-delivery"))
    other = (b'{"zen": "x"}', github_headers(secret, b'{"zen": "x"}', "ping", "another-delivery"))
    ping = b'{"zen": "first"}'
    first = (ping, github_headers(secret, ping, "ping", "first-delivery"))
    before = writer.batches
    _, answers = await _held_batch(server, gate, base_url, token, [copy, other, copy], first)
    # The held first delivery's batch, then one batch with all three.
    assert writer.batches == before + 2
    assert [status for status, _, _ in answers] == [202, 202, 202]
    assert answers[1][1]["disposition"] == "ignored"
    # Whichever copy reached the writer first is stored; the other is answered as its duplicate.
    stored, again = sorted((answers[0][1], answers[2][1]), key=lambda a: a["disposition"] != "routed")
    assert stored["disposition"] == "routed" and stored["created"] == 1
    assert again["disposition"] == "duplicate" and again["created"] == 0
    assert [t["id"] for t in again["todos"]] == [t["id"] for t in stored["todos"]]
    assert await counts(services) == (3, 1)


async def test_deliveries_that_arrive_while_a_batch_is_stored_wait_and_go_in_the_next_one(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    writer = server.app[INGEST_WRITER]
    gate = Gate(monkeypatch)
    first = asyncio.create_task(post(base_url, token, *_generic("first")))
    await asyncio.wait_for(gate.entered.wait(), 10)
    sent = [asyncio.create_task(post(base_url, token, *_generic(n))) for n in range(3)]
    # One batch at a time, on both engines: the next waits for the one being stored.
    await _until(lambda: writer.waiting == 3)
    await asyncio.sleep(0.2)
    assert writer.waiting == 3 and not any(task.done() for task in sent)
    batches = writer.batches
    gate.open()
    assert (await first)[0] == 202
    assert [status for status, _, _ in await asyncio.gather(*sent)] == [202] * 3
    assert writer.batches == batches + 2
    assert await counts(services) == (4, 4)


async def test_fifty_concurrent_deliveries_are_all_acknowledged_and_all_stored(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None

    async def one(n: int) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = json.dumps({"action": "opened", "issue": {"number": n, "title": f"issue {n}"}}).encode()
        return await post(base_url, token, body, github_headers(secret, body, "issues", f"delivery-{n}"))

    answers = await asyncio.gather(*(one(n) for n in range(50)))
    assert [status for status, _, _ in answers] == [202] * 50
    acked = {answer["todos"][0]["id"] for _, answer, _ in answers}
    async with services.db.read() as s:
        stored = set((await s.scalars(select(Todo.id))).all())
    assert acked == stored and len(stored) == 50


async def test_while_the_database_is_unreachable_every_waiting_delivery_is_answered_503(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    gate = Gate(monkeypatch)
    writer = server.app[INGEST_WRITER]
    first = asyncio.create_task(post(base_url, token, *_generic("first")))
    await asyncio.wait_for(gate.entered.wait(), 10)
    sent = [asyncio.create_task(post(base_url, token, *_generic(n))) for n in range(5)]
    await _until(lambda: writer.waiting == 5)
    real = services.db
    services.db = Database(UNREACHABLE)
    try:
        gate.open()
        answers = [await first, *await asyncio.gather(*sent)]
    finally:
        await services.db.dispose()
        services.db = real
    assert [(status, answer["error"]) for status, answer, _ in answers] == [(503, "unavailable")] * 6
    assert await counts(services) == (0, 0)
    transactions = "switchboard_ingest_transactions_total"
    assert services.metrics.value(transactions, outcome="unavailable") >= 1
    assert services.metrics.value(transactions, outcome="committed") == 0
    # The writer carries on once the database is back.
    status, answer, _ = await post(base_url, token, *_generic("again"))
    assert status == 202 and answer["created"] == 1


async def _routed_to_bob(services: Services) -> tuple[str, str]:
    """A generic webhook of ada's, routed to bob's endpoint too: (ingest token, webhook id)."""
    token, _, webhook_id = await make_webhook(services, "generic")
    await tenancy.add_human(services.db, "bob")
    bob = await tenancy.resolve_owner(services.db, human="bob")
    await tenancy.vend_endpoint(services.db, name="bob-agent", owner=bob)
    await tenancy.add_route(services.db, webhook_id, "bob-agent")
    return token, webhook_id


async def _one_waiting(
    server: TestServer, base_url: str, token: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[Gate, asyncio.Task[Answer], asyncio.Task[Answer]]:
    """A first delivery held in the writer's transaction and a second one decided and waiting for
    the writer: (the gate, the first's answer, the second's)."""
    gate = Gate(monkeypatch)
    first = asyncio.create_task(post(base_url, token, *_generic("first")))
    await asyncio.wait_for(gate.entered.wait(), 10)
    waiting = asyncio.create_task(post(base_url, token, *_generic("late")))
    await _until(lambda: server.app[INGEST_WRITER].waiting == 1)
    return gate, first, waiting


async def test_a_revocation_while_a_delivery_waits_to_be_stored_is_obeyed(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, _ = await _routed_to_bob(services)
    # Decided with bob as a target, waiting for the writer...
    gate, first, waiting = await _one_waiting(server, base_url, token, monkeypatch)
    # ...when bob's endpoint is revoked (and the revocation answered).
    await tenancy.revoke_endpoint(services.db, "bob-agent")
    gate.open()
    status, answer, _ = await waiting
    assert status == 202 and [t["endpoint"] for t in answer["todos"]] == ["ada-agent"]
    # The held delivery was decided before the revocation: it is stored before the revocation
    # commits or not at all (decided again), never after it with a todo for bob outside its reach.
    assert (await first)[0] == 202
    async with services.db.read() as s:
        for todo in (await s.scalars(select(Todo))).all():
            assert todo.state == "pending" or todo.dead_letter


# Changes made behind Switchboard's back (raw SQL: no process is told, so the cache keeps the
# configuration the delivery was decided on) while it waits for the writer: the database's
# ``config_version`` moves on (migration 0010), the writer sees it, and the delivery is decided again
# on the webhook as it is now. (statements, the answer's status, the endpoints given a todo)
BEHIND_ITS_BACK: dict[str, tuple[list[str], int, list[str]]] = {
    "bob's endpoint revoked": (
        ["UPDATE endpoints SET state = 'revoked' WHERE slug = 'bob-agent'"],
        202,
        ["ada-agent"],
    ),
    "bob's queue taken away": (
        ["UPDATE endpoints SET queues = '[]' WHERE slug = 'bob-agent'"],
        202,
        ["ada-agent"],
    ),
    "bob's route deleted": (["DELETE FROM routes WHERE webhook_id = '{webhook}'"], 202, ["ada-agent"]),
    "the secret awaited": (["UPDATE webhooks SET secret_state = 'awaiting' WHERE id = '{webhook}'"], 503, []),
    "the webhook deleted": (
        ["DELETE FROM routes WHERE webhook_id = '{webhook}'", "DELETE FROM webhooks WHERE id = '{webhook}'"],
        404,
        [],
    ),
}


@pytest.mark.parametrize("change", list(BEHIND_ITS_BACK))
async def test_a_change_made_with_raw_sql_while_a_delivery_waits_is_obeyed(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    statements, status, endpoints = BEHIND_ITS_BACK[change]
    token, webhook_id = await _routed_to_bob(services)
    # Served from the cache from here on (a first delivery reads the configuration into it).
    assert (await post(base_url, token, *_generic("warm")))[0] == 202
    gate, first, waiting = await _one_waiting(server, base_url, token, monkeypatch)
    async with services.db.write() as s:
        for sql in statements:
            await s.execute(text(sql.format(webhook=webhook_id)))
    gate.open()
    for answer in (await first, await waiting):
        assert answer[0] == status, answer
        assert [t["endpoint"] for t in answer[1].get("todos", [])] == endpoints
    # The warm-up delivery's event and two todos, and the two deliveries' only if they were accepted.
    stored = 2 if status == 202 else 0
    assert await counts(services) == (1 + stored, 2 + stored * len(endpoints))


async def test_a_cancelled_request_does_not_break_the_writer(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    writer = server.app[INGEST_WRITER]
    captured: list[Rows] = []
    real_submit = IngestWriter.submit

    async def submit(self: IngestWriter, rows: Rows) -> Any:
        captured.append(rows)
        return await real_submit(self, rows)

    monkeypatch.setattr(IngestWriter, "submit", submit)
    status, _, _ = await post(base_url, token, *_generic("template"))
    assert status == 202

    def copy(key: str) -> Rows:
        rows = captured[0]
        event = {**rows.event, "id": new_id("ev"), "delivery_key": key}
        todos = [{**todo, "id": new_id("td"), "event_id": event["id"]} for todo in rows.todos]
        return dataclasses.replace(rows, event=event, todos=todos)

    gate = Gate(monkeypatch)
    taken = asyncio.create_task(real_submit(writer, copy("taken")))
    await asyncio.wait_for(gate.entered.wait(), 10)
    # One request gives up while its rows are in the batch being stored, another before its rows
    # were taken: the first is stored (a retry would be its duplicate), the second is not.
    dropped = asyncio.create_task(real_submit(writer, copy("dropped")))
    await _until(lambda: writer.waiting == 1)
    taken.cancel()
    dropped.cancel()
    gate.open()
    for task in (taken, dropped):
        with pytest.raises(asyncio.CancelledError):
            await task
    status, answer, _ = await post(base_url, token, *_generic("after"))
    assert status == 202 and answer["created"] == 1
    async with services.db.read() as s:
        keys = set((await s.scalars(select(Event.delivery_key))).all())
    assert keys == {"d-template", "taken", "d-after"}


async def test_closing_the_writer_stores_what_was_handed_in_first(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    gate = Gate(monkeypatch)
    writer = server.app[INGEST_WRITER]
    first = asyncio.create_task(post(base_url, token, *_generic("first")))
    await asyncio.wait_for(gate.entered.wait(), 10)
    sent = [asyncio.create_task(post(base_url, token, *_generic(n))) for n in range(4)]
    await _until(lambda: writer.waiting == 4)
    closing = asyncio.create_task(writer.close())
    gate.open()
    answers = [await first, *await asyncio.gather(*sent)]
    await closing
    assert [status for status, _, _ in answers] == [202] * 5
    assert await counts(services) == (5, 5)
    # Once closed, nothing more is taken in: the sender is told to retry.
    status, answer, _ = await post(base_url, token, *_generic("late"))
    assert status == 503 and answer["error"] == "unavailable"


@pytest.mark.skipif(
    engine_name() != "postgresql", reason="several processes share one database only on PostgreSQL"
)
async def test_two_processes_storing_the_same_delivery_store_it_once(
    services: Services, switchboard_serve: ServeProcesses
) -> None:
    servers = [switchboard_serve.new({"log_level": "WARNING"}, name=name) for name in ("a", "b")]
    for server in servers:
        await server.launch()
    for server in servers:
        await server.ready()
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    body = json.dumps({"action": "opened", "issue": {"number": 9, "title": "twice"}}).encode()
    headers = github_headers(secret, body, "issues", "one-delivery-two-processes")

    async def send(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
        async with http.post(f"{url}/webhooks/{token}", data=body, headers=headers) as resp:
            return resp.status, await resp.json()

    async with aiohttp.ClientSession() as http:
        answers = await asyncio.gather(*(send(http, s.base_url) for s in servers for _ in range(10)))
    assert {status for status, _ in answers} == {202}
    assert sorted(a["disposition"] for _, a in answers) == ["duplicate"] * 19 + ["routed"]
    assert len({a["todos"][0]["id"] for _, a in answers}) == 1
    assert await counts(services) == (1, 1)
    for server in servers:
        server.check_log()


async def test_a_batch_is_one_hand_off_on_sqlite_and_one_statement_on_postgresql(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    gate = Gate(monkeypatch)
    # The request's own configuration lookup is a read; the batch is the write.
    with watch_statements(services.db, reads=False) as seen:
        first, answers = await _held_batch(server, gate, base_url, token, [_generic(n) for n in range(5)])
    assert [first[0], *(status for status, _, _ in answers)] == [202] * 6
    assert await counts(services) == (6, 6)
    # Two batches: the held first delivery, then the five.
    if engine_name() == "sqlite":
        # Per batch the webhook's configuration version, then the events and the todos in
        # multi-row inserts (five rows: four, then one), all on the writer's thread.
        reads = ["SELECT WEBHOOKS.ID, WEBHOOKS.CONFIG_VERSION"]
        first_batch = [*reads, "INSERT INTO EVENTS", "INSERT INTO TODOS"]
        assert seen.direct == first_batch + reads + ["INSERT INTO EVENTS"] * 2 + ["INSERT INTO TODOS"] * 2
        inserts = [sql for sql in seen.direct_sql if sql.startswith("INSERT")]
        assert [len(sql.split("), (")) for sql in inserts] == [1, 1, 4, 1, 4, 1]
        assert seen.through_sqlalchemy == []
        return
    # Each batch one statement that is its own transaction (the versions share-locked, the events
    # and the todos inserted, the other processes notified of the todos: no publish of its own).
    assert seen.direct == ["WITH VERSIONS AS"] * 2
    batches = [sql for sql in seen.direct_sql if sql.startswith("WITH versions AS MATERIALIZED")]
    assert len(batches) == 2 and all(
        "INSERT INTO events" in sql and "INSERT INTO todos" in sql and "pg_notify(" in sql for sql in batches
    )
    # Nothing written through SQLAlchemy (the first delivery's configuration is read through it).
    assert [sql for sql in seen.through_sqlalchemy if not sql.lstrip().startswith("SELECT")] == []


async def test_a_redelivery_batched_with_other_deliveries_keeps_its_link_to_the_original(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, _, webhook_id = await make_webhook(services, "generic")
    status, _, _ = await post(base_url, token, *_generic("original"))
    assert status == 202
    async with services.db.read() as s:
        original = await s.scalar(select(Event.id).where(Event.delivery_key == "d-original"))
    assert original is not None
    writer = server.app[INGEST_WRITER]
    gate = Gate(monkeypatch)
    first = asyncio.create_task(post(base_url, token, *_generic("first")))
    await asyncio.wait_for(gate.entered.wait(), 10)
    # A delivery and a redelivery wait for the same batch: their event rows go in together.
    plain = asyncio.create_task(post(base_url, token, *_generic("plain")))
    again = asyncio.create_task(deliveries.redeliver(services, writer, webhook_id, original, by="ada"))
    await _until(lambda: writer.waiting == 2)
    gate.open()
    assert (await first)[0] == 202 and (await plain)[0] == 202
    made = await again
    async with services.db.read() as s:
        links = dict((await s.execute(select(Event.id, Event.redelivery_of))).all())
    assert links[made.event_id] == original
    assert sorted(link for link in links.values() if link is not None) == [original]


async def test_once_keys_in_one_batch_make_one_todo_and_fold_the_rest_into_it(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four deliveries about issue #1 wait for one batch (its rows go in one multi-row insert on
    # SQLite, one statement from arrays on PostgreSQL): the first makes the open todo, the other
    # three are folded into it, each answered and traced with that todo's id.
    hook = await github_hook(services, trust={"logins": [SENDER]})
    await set_rules(
        services,
        hook.webhook_id,
        {"rules": [{"id": "once", "expr": "true", "action": {"type": "queue", "once": True}}]},
    )
    names = [
        "issue_comment/created",
        "issue_comment/created.1",
        "issues/opened",
        "issue_comment/edited",
    ]

    def signed(name: str) -> Delivery:
        body = fixture_bytes(f"github/{name}.payload.json")
        return body, github_headers(hook.secret, body, name.split("/")[0], delivery=str(uuid.uuid4()))

    gate = Gate(monkeypatch)
    first, answers = await _held_batch(
        server,
        gate,
        base_url,
        hook.token,
        [signed(name) for name in names],
        first_delivery=signed("pull_request/opened"),
    )
    assert first[0] == 202 and first[1]["created"] == 1
    assert [status for status, _, _ in answers] == [202] * 4
    made = [answer for _, answer, _ in answers if answer["created"] == 1]
    folded = [answer for _, answer, _ in answers if answer["created"] == 0]
    assert len(made) == 1 and len(folded) == 3, answers
    open_id = made[0]["todos"][0]["id"]
    assert all(answer["todos"] == [{**made[0]["todos"][0], "created": False}] for answer in folded)
    async with services.db.read() as s:
        rows = (await s.execute(select(Todo.id, Todo.once_key).where(Todo.once_key == ISSUE_1))).all()
        traces = (await s.scalars(select(Event.routing).where(Event.webhook_id == hook.webhook_id))).all()
    assert [row.id for row in rows] == [open_id]
    assert sum(1 for trace in traces if f"once: open todo {open_id} exists" in trace["why"]) == 3


async def test_a_batch_stores_its_json_columns_as_they_were_built(services: Services, base_url: str) -> None:
    # The writer sends the JSON columns as text (``sanitize.json_text``, orjson) on PostgreSQL;
    # what is read back is what was built: the headers, the routing trace, the reply address, and
    # None as JSON null (not SQL NULL), as SQLAlchemy's JSON type writes it on both engines.
    token, secret, _ = await make_webhook(services, "github")
    body = fixture_bytes("github/issue_comment/created.payload.json")
    headers = {**github_headers(secret, body, "issue_comment"), "User-Agent": 'hook/1 \\ "q" {x}'}
    status, _, _ = await post(base_url, token, body, headers)
    assert status == 202
    generic, _, _ = await make_webhook(services, "generic")
    assert (await post(base_url, generic, b'{"n": 1}', {"X-Delivery-Id": "d-1"}))[0] == 202
    async with services.db.read() as s:
        events = {e.source: e for e in (await s.scalars(select(Event))).all()}
        todos = {t.source: t for t in (await s.scalars(select(Todo))).all()}
        raw = (await s.execute(text("SELECT reply_to IS NULL FROM todos WHERE source = 'generic'"))).scalar()
    assert events["github"].headers["User-Agent"] == 'hook/1 \\ "q" {x}'
    assert events["github"].headers["X-Hub-Signature-256"] == "[redacted]"
    assert events["github"].routing == todos["github"].routing | {
        "targets": events["github"].routing["targets"]
    }
    assert todos["github"].reply_to is not None and todos["github"].reply_to["provider"] == "github"
    assert todos["generic"].reply_to is None and raw == 0  # false: JSON null, not SQL NULL


def test_the_writers_json_text_means_what_the_standard_library_writes() -> None:
    for value in (
        None,
        {"a": "b", "n": 1, "f": 0.5, "ok": True, "none": None, "list": [1, "x", {"y": []}]},
        {"text": 'é ✓ \\ "q" \u2028', "emoji": "\U0001f600"},
        # What orjson refuses goes to the standard library: a lone surrogate, a big integer, a
        # non-string key, a subclass of str.
        ["\ud800"],
        {"big": 2**80},
        {1: "one"},
        {"s": type("Name", (str,), {})("ada")},
    ):
        assert json.loads(json_text(value)) == json.loads(json.dumps(value))


async def test_a_webhook_changing_on_every_attempt_to_store_is_503_and_stores_nothing(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery whose webhook changes between every decision and the writer's check of it (each
    time answered ``stale`` and decided again): decided DECIDE_ATTEMPTS times, then 503, nothing
    stored and no endless loop; the sender's retry is stored."""
    token, _, webhook_id = await make_webhook(services, "generic")
    assert (await post(base_url, token, b'{"warm": 1}', {"X-Delivery-Id": "warm"}))[0] == 202
    real = IngestWriter._transaction
    attempts: list[int] = []

    async def moving(writer: IngestWriter, batch: Any) -> Any:
        # A change committed between the decision and the writer's re-check, every time.
        attempts.append(len(batch))
        async with services.db.write() as s:
            await s.execute(text("UPDATE webhooks SET paused_at = NULL WHERE id = :id"), {"id": webhook_id})
        return await real(writer, batch)

    monkeypatch.setattr(IngestWriter, "_transaction", moving)
    status, answer, _ = await asyncio.wait_for(post(base_url, token, b'{"n": 1}', {"X-Delivery-Id": "d"}), 30)
    assert status == 503 and answer["error"] == "unavailable", answer
    assert attempts == [1] * DECIDE_ATTEMPTS
    assert await counts(services) == (1, 1)  # the warm-up only
    monkeypatch.setattr(IngestWriter, "_transaction", real)
    status, answer, _ = await post(base_url, token, b'{"n": 1}', {"X-Delivery-Id": "d"})
    assert status == 202 and answer["created"] == 1


async def test_one_batch_mixing_once_plain_held_and_generic_deliveries_of_four_webhooks(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Todo rows of every shape in ONE batch (a ``once`` todo, plain ones, a held one) from different
    webhooks and sources: one transaction, no split. On PostgreSQL the ``once`` todo sends the whole
    batch down ``ingest_statements.transaction`` instead of ``pg_batch``; every row must set the
    same columns (``_columns`` would refuse the batch otherwise, and it would be split)."""
    once_hook = await github_hook(services, trust={"logins": [SENDER]}, handle="olive")
    await set_rules(
        services,
        once_hook.webhook_id,
        {"rules": [{"id": "once", "expr": "true", "action": {"type": "queue", "once": True}}]},
    )
    plain_hook = await github_hook(services, trust={"logins": [SENDER]}, handle="pat")
    held_hook = await github_hook(services, trust={"logins": ["nobody"]}, handle="quinn")
    generic, _, _ = await make_webhook(services, "generic")

    def signed(hook: Any, name: str) -> tuple[str, bytes, dict[str, str]]:
        body = fixture_bytes(f"github/{name}.payload.json")
        return hook.token, body, github_headers(hook.secret, body, name.split("/")[0], str(uuid.uuid4()))

    # Each GitHub webhook is bound to its instance by its first verified delivery (a change of its
    # configuration, which would send the batch's other deliveries of it round again): done first.
    for hook in (once_hook, plain_hook, held_hook):
        assert (await post(base_url, *signed(hook, "pull_request/opened")))[0] == 202
    writer = server.app[INGEST_WRITER]
    failed_before = services.metrics.value("switchboard_ingest_transactions_total", outcome="failed")
    gate = Gate(monkeypatch)
    first = asyncio.create_task(post(base_url, generic, b'{"first": 1}', {"X-Delivery-Id": "first"}))
    await asyncio.wait_for(gate.entered.wait(), 10)
    batches = writer.batches
    sends = [
        signed(once_hook, "issues/opened"),
        signed(plain_hook, "issues/opened"),
        signed(held_hook, "issues/opened"),
        (generic, b'{"g": 1}', {"X-Delivery-Id": "g1"}),
        signed(plain_hook, "issue_comment/created"),
    ]
    tasks = [asyncio.create_task(post(base_url, t, b, h)) for t, b, h in sends]
    await _until(lambda: writer.waiting == len(sends))
    gate.open()
    assert (await first)[0] == 202
    answers = await asyncio.gather(*tasks)
    assert [a[0] for a in answers] == [202] * len(sends), answers
    assert [a[1]["disposition"] for a in answers] == ["routed", "routed", "quarantined", "routed", "routed"]
    # The held first delivery's batch, then all five in one, with no failed transaction (no split).
    assert writer.batches == batches + 2
    failed = services.metrics.value("switchboard_ingest_transactions_total", outcome="failed")
    assert failed == failed_before
    async with services.db.read() as s:
        held = (await s.scalars(select(Todo).where(Todo.state == "held"))).all()
        once = (await s.scalars(select(Todo).where(Todo.once_key.is_not(None)))).all()
    # The warm-ups' (one held, one ``once``) and the batch's.
    assert len(held) == 2 and len(once) == 2
    assert await counts(services) == (3 + 1 + len(sends), 3 + 1 + len(sends))
