"""An operator's hands on todos over the real API: requeue, release, cancel and the bulk requeue,
their refusals (another scope 404, a read-only member 403, a wrong state 409), the history rows
with who did it, the dead-letter reasons, and a requeued dead letter claimed by an agent over MCP.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from sqlalchemy import func, select, update

from switchboard import tenancy, todos
from switchboard.api import PREFIX
from switchboard.db import Database, utcnow
from switchboard.models import Attempt, Endpoint, Todo, TodoEvent
from switchboard.services import Services
from switchboard.testing import add_todo, connect


class Api:
    def __init__(self, http: aiohttp.ClientSession, base_url: str, token: str) -> None:
        self.http, self.base_url, self.token = http, base_url, token

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}"}
        data = json.dumps(body).encode() if body is not None else None
        async with self.http.request(
            method, f"{self.base_url}{PREFIX}{path}", data=data, headers=headers
        ) as r:
            assert r.content_type == "application/json"
            payload = await r.json()
            assert r.status < 500, payload
            return r.status, payload

    async def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        got, payload = await self.call(method, path, body)
        assert got == status, (method, path, got, payload)
        return payload

    async def error(self, method: str, path: str, body: Any = None, *, status: int, code: str) -> str:
        got, payload = await self.call(method, path, body)
        assert (got, payload["error"]) == (status, code), (method, path, payload)
        return str(payload["message"])


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _human(db: Database, http: aiohttp.ClientSession, base_url: str, handle: str) -> Api:
    _, token = await tenancy.add_human(db, handle)
    return Api(http, base_url, token)


@pytest.fixture
async def alice(db: Database, http: aiohttp.ClientSession, base_url: str) -> Api:
    return await _human(db, http, base_url, "alice")


@pytest.fixture
async def bob(db: Database, http: aiohttp.ClientSession, base_url: str) -> Api:
    return await _human(db, http, base_url, "bob")


async def _endpoint(db: Database, slug: str) -> Endpoint:
    return await tenancy.get_endpoint(db, slug)


async def _dead_letter(
    db: Database, endpoint: Endpoint, title: str = "dies", queue: str | None = None
) -> str:
    """A todo whose one attempt failed: a dead letter, ``attempts_exhausted``."""
    todo = await add_todo(db, endpoint, title=title, queue=queue)
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(max_attempts=1))
    await todos.claim(db, endpoint, todo.id)
    await todos.fail(db, endpoint, todo.id, error="boom")
    return todo.id


async def _events(db: Database, todo_id: str | None = None) -> list[TodoEvent]:
    async with db.read() as s:
        query = select(TodoEvent).order_by(TodoEvent.created_at, TodoEvent.id)
        if todo_id is not None:
            query = query.where(TodoEvent.todo_id == todo_id)
        return list((await s.scalars(query)).all())


async def _todo(db: Database, todo_id: str) -> Todo:
    async with db.read() as s:
        row = await s.get(Todo, todo_id)
    assert row is not None
    return row


async def test_a_requeued_dead_letter_is_rung_and_claimed_by_an_agent_over_mcp(
    alice: Api, services: Services, base_url: str
) -> None:
    vended = await alice.ok("POST", "/endpoints", {"name": "Live Bot"}, 201)
    endpoint = await _endpoint(services.db, "live-bot")
    pushed = (await alice.ok("POST", "/todos", {"endpoint": "live-bot", "title": "Flaky build"}, 201))["todo"]
    async with services.db.write() as s:
        await s.execute(update(Todo).where(Todo.id == pushed["id"]).values(max_attempts=1))
    async with connect(base_url, vended["token"], endpoint) as agent:
        await agent.ok("claim", todo_id=pushed["id"])
        failed = await agent.ok("fail", todo_id=pushed["id"], error="out of disk")
        assert failed["dead_letter"] is True and failed["state"] == "failed"
        while not await agent.listener.silence(0.2):
            pass  # the ring of the push, if it came

        shown = (await alice.ok("GET", f"/todos/{pushed['id']}"))["todo"]
        assert shown["dead_reason"] == "attempts_exhausted" and shown["finished_at"] is not None
        listed = (await alice.ok("GET", "/todos?state=dead"))["todos"]
        assert [(t["id"], t["dead_reason"]) for t in listed] == [(pushed["id"], "attempts_exhausted")]

        answer = await alice.ok("POST", f"/todos/{pushed['id']}/requeue")
        todo, event = answer["todo"], answer["event"]
        assert (todo["state"], todo["attempt"], todo["dead_letter"], todo["dead_reason"]) == (
            "pending",
            0,
            False,
            None,
        )
        assert todo["finished_at"] is None and todo["endpoint"] == "live-bot"
        assert (event["action"], event["actor"], event["from_state"], event["to_state"]) == (
            "requeue",
            "human:alice",
            "dead",
            "pending",
        )
        assert "1 of 1 were used" in event["detail"] and "its last attempt failed" in event["detail"]

        # The doorbell rings for it, and the agent takes it with a fresh attempt.
        ring = await agent.listener.next_ring(timeout=5)
        assert ring.meta["todo_id"] == pushed["id"]
        claimed = (await agent.ok("claim_next"))["todo"]
        assert claimed["id"] == pushed["id"] and claimed["attempt"] == 1 and claimed["state"] == "claimed"
        await agent.ok("complete", todo_id=pushed["id"], result={"fixed": True})

    detail = (await alice.ok("GET", f"/todos/{pushed['id']}"))["todo"]
    assert detail["state"] == "done" and detail["result"] == {"fixed": True}
    assert [a["number"] for a in detail["attempts"]] == [1, 2]  # numbered on across the requeue
    (history,) = detail["history"]
    assert history["actor"] == "human:alice" and history["action"] == "requeue"


async def test_refusals_change_nothing(alice: Api, bob: Api, services: Services) -> None:
    db = services.db
    await alice.ok("POST", "/teams", {"slug": "ops"}, 201)
    await alice.ok("PUT", "/teams/ops/members/bob", {"role": "member"})
    await alice.ok("POST", "/endpoints", {"name": "Mine"}, 201)
    await alice.ok("POST", "/endpoints", {"name": "Ops Bot", "team": "ops"}, 201)
    _, eve_token = await tenancy.add_human(db, "eve")
    eve = Api(alice.http, alice.base_url, eve_token)
    mine = await _endpoint(db, "mine")
    ops = await _endpoint(db, "ops-bot")
    pending = (await add_todo(db, mine, title="pending")).id
    dead = await _dead_letter(db, mine)
    team_dead = await _dead_letter(db, ops)

    # Another scope: 404, exactly like a todo that does not exist.
    for action in ("requeue", "release", "cancel"):
        for todo_id in (pending, dead, team_dead):
            await eve.error("POST", f"/todos/{todo_id}/{action}", status=404, code="not_found")
        await alice.error(
            "POST", f"/todos/td_00000000000000000000000000/{action}", status=404, code="not_found"
        )
    # A team member reads but may not act: 403.
    assert (await bob.ok("GET", f"/todos/{team_dead}"))["todo"]["dead_letter"] is True
    for action in ("requeue", "cancel"):
        await bob.error("POST", f"/todos/{team_dead}/{action}", status=403, code="forbidden")
    await bob.error("POST", "/todos/requeue", {"team": "ops"}, status=403, code="forbidden")
    await bob.error("POST", "/todos/requeue", {"endpoint": "ops-bot"}, status=403, code="forbidden")
    await eve.error("POST", "/todos/requeue", {"endpoint": "mine"}, status=404, code="not_found")
    # Bob's bulk requeue over everything he manages (his own scope) touches nothing of the team's.
    assert (await bob.ok("POST", "/todos/requeue", {}))["requeued"] == 0
    # Wrong states: 409.
    assert "only failed todos" in await alice.error(
        "POST", f"/todos/{pending}/requeue", status=409, code="conflict"
    )
    await alice.error("POST", f"/todos/{pending}/release", status=409, code="conflict")
    await alice.error("POST", f"/todos/{dead}/release", status=409, code="conflict")
    # Bad bulk input: 400.
    await alice.error("POST", "/todos/requeue", {"state": "pending"}, status=400, code="invalid_argument")
    await alice.error("POST", "/todos/requeue", {"since": "yesterday"}, status=400, code="invalid_argument")
    await alice.error("POST", "/todos/requeue", {"limit": 0}, status=400, code="invalid_argument")
    await alice.error("POST", f"/todos/{pending}/cancel", {"why": "x"}, status=400, code="invalid_argument")

    assert (await _todo(db, pending)).state == "pending"
    assert (await _todo(db, dead)).dead_letter and (await _todo(db, team_dead)).dead_letter
    assert await _events(db) == []

    # Cancelled is final: no requeue, no second cancel, no release.
    await alice.ok("POST", f"/todos/{pending}/cancel")
    for action in ("requeue", "cancel", "release"):
        await alice.error("POST", f"/todos/{pending}/{action}", status=409, code="conflict")
    # A revoked endpoint's dead letters cannot be requeued: nothing could claim them.
    await alice.ok("POST", "/endpoints/mine/revoke")
    assert "revoked" in await alice.error("POST", f"/todos/{dead}/requeue", status=409, code="conflict")
    assert len(await _events(db)) == 1


async def test_release_ends_the_agents_claim_and_gives_the_attempt_back(
    alice: Api, services: Services, base_url: str
) -> None:
    vended = await alice.ok("POST", "/endpoints", {"name": "Slow Bot"}, 201)
    endpoint = await _endpoint(services.db, "slow-bot")
    pushed = (await alice.ok("POST", "/todos", {"endpoint": "slow-bot", "title": "Long job"}, 201))["todo"]
    async with connect(base_url, vended["token"], endpoint) as agent:
        claimed = await agent.ok("claim", todo_id=pushed["id"], lease_seconds=86400, fence=True)
        answer = await alice.ok("POST", f"/todos/{pushed['id']}/release")
        assert answer["todo"]["state"] == "pending" and answer["todo"]["attempt"] == 0
        assert answer["todo"]["lease_expires_at"] is None
        assert (answer["event"]["from_state"], answer["event"]["to_state"]) == ("claimed", "pending")
        # The agent's claim is over: whatever it says now is refused.
        for verb, extra in (("complete", {"result": 1}), ("fail", {}), ("heartbeat", {})):
            refused = await agent.error(
                verb, todo_id=pushed["id"], lease_token=claimed["lease_token"], **extra
            )
            assert refused["error"] == "conflict", (verb, refused)
        again = await agent.ok("claim", todo_id=pushed["id"])
        assert again["attempt"] == 1
    async with services.db.read() as s:
        attempts = list(
            (
                await s.scalars(
                    select(Attempt).where(Attempt.todo_id == pushed["id"]).order_by(Attempt.number)
                )
            ).all()
        )
    assert [(a.number, a.outcome) for a in attempts] == [(1, "released"), (2, None)]
    assert attempts[0].error == "released by human:alice"


async def test_cancel_is_final_and_refuses_the_agent(alice: Api, services: Services, base_url: str) -> None:
    vended = await alice.ok("POST", "/endpoints", {"name": "Bot"}, 201)
    endpoint = await _endpoint(services.db, "bot")
    pushed = (await alice.ok("POST", "/todos", {"endpoint": "bot", "title": "Mistake"}, 201))["todo"]
    async with connect(base_url, vended["token"], endpoint) as agent:
        await agent.ok("claim", todo_id=pushed["id"])
        answer = await alice.ok("POST", f"/todos/{pushed['id']}/cancel")
        assert answer["todo"]["state"] == "cancelled" and answer["todo"]["finished_at"] is not None
        assert (answer["event"]["action"], answer["event"]["from_state"]) == ("cancel", "claimed")
        assert (await agent.error("fail", todo_id=pushed["id"]))["error"] == "conflict"
        assert (await agent.error("claim", todo_id=pushed["id"]))["error"] == "conflict"
        assert (await agent.ok("get_todo", todo_id=pushed["id"]))["state"] == "cancelled"
        assert [t["id"] for t in (await agent.ok("list_todos", state="cancelled"))["todos"]] == [pushed["id"]]
        assert await agent.ok("claim_next") == {"empty": True}  # nothing else to claim
    detail = (await alice.ok("GET", f"/todos/{pushed['id']}"))["todo"]
    assert detail["attempts"][0]["outcome"] == "cancelled"
    assert [t["id"] for t in (await alice.ok("GET", "/todos?state=cancelled"))["todos"]] == [pushed["id"]]


async def test_every_dead_letter_says_why(alice: Api, services: Services) -> None:
    db = services.db
    await alice.ok("POST", "/endpoints", {"name": "Bot"}, 201)
    await alice.ok("POST", "/endpoints", {"name": "Doomed"}, 201)
    bot, doomed = await _endpoint(db, "bot"), await _endpoint(db, "doomed")
    exhausted = await _dead_letter(db, bot)
    expired = (await add_todo(db, bot, title="lease runs out")).id
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == expired).values(max_attempts=1))
    await todos.claim(db, bot, expired, lease_seconds=1)
    await todos.reap_leases(db, utcnow() + timedelta(minutes=5))
    revoked = (await add_todo(db, doomed, title="orphaned")).id
    await alice.ok("POST", "/endpoints/doomed/revoke")

    reasons = {t["id"]: t["dead_reason"] for t in (await alice.ok("GET", "/todos?state=dead"))["todos"]}
    assert reasons == {exhausted: "attempts_exhausted", expired: "lease_expired", revoked: "endpoint_revoked"}
    for todo_id, reason in reasons.items():
        assert (await alice.ok("GET", f"/todos/{todo_id}"))["todo"]["dead_reason"] == reason
    live = (await alice.ok("POST", "/todos", {"endpoint": "bot", "title": "fine"}, 201))["todo"]
    assert live["dead_reason"] is None


async def test_bulk_requeue_by_filter(alice: Api, bob: Api, services: Services) -> None:
    db = services.db
    await alice.ok("POST", "/endpoints", {"name": "Bot", "queues": ["ci", "triage"]}, 201)
    await alice.ok("POST", "/endpoints", {"name": "Gone"}, 201)
    await bob.ok("POST", "/teams", {"slug": "bobs"}, 201)
    await bob.ok("PUT", "/teams/bobs/members/alice", {"role": "member"})
    await bob.ok("POST", "/endpoints", {"name": "Bob Bot", "team": "bobs"}, 201)
    bot, gone, bobs = await _endpoint(db, "bot"), await _endpoint(db, "gone"), await _endpoint(db, "bob-bot")
    ci = [await _dead_letter(db, bot, f"ci {n}", "ci") for n in range(3)]
    triage = await _dead_letter(db, bot, "triage", "triage")
    retrying = (await add_todo(db, bot, title="retrying", queue="ci")).id
    await todos.claim(db, bot, retrying)
    await todos.fail(db, bot, retrying)  # failed, waiting for its retry: not a dead letter
    gone_dead = await _dead_letter(db, gone)
    await alice.ok("POST", "/endpoints/gone/revoke")
    bobs_dead = await _dead_letter(db, bobs)  # a scope Alice only reads

    dry = await alice.ok("POST", "/todos/requeue", {"queue": "ci", "dry_run": True})
    assert dry == {"matched": 3, "requeued": 0, "todo_ids": [], "more": True, "dry_run": True}
    # The same filter on the listing previews exactly those.
    assert sorted(t["id"] for t in (await alice.ok("GET", "/todos?state=dead&queue=ci"))["todos"]) == sorted(
        ci
    )

    first = await alice.ok("POST", "/todos/requeue", {"queue": "ci", "limit": 2})
    assert first["requeued"] == 2 and first["more"] is True and first["todo_ids"] == ci[:2]  # oldest first
    rest = await alice.ok("POST", "/todos/requeue", {"queue": "ci", "state": "dead"})
    assert rest["todo_ids"] == ci[2:] and rest["more"] is False
    for todo_id in ci:
        row = await _todo(db, todo_id)
        assert (row.state, row.attempt, row.dead_letter) == ("pending", 0, False)
        (event,) = await _events(db, todo_id)
        assert event.actor == "human:alice" and "bulk requeue of state=dead queue=ci" in (event.detail or "")
    # state=failed takes the retrying todo too; revoked endpoints and read-only scopes stay as they are.
    every = await alice.ok("POST", "/todos/requeue", {"state": "failed"})
    assert sorted(every["todo_ids"]) == sorted([triage, retrying])
    assert (await _todo(db, gone_dead)).dead_letter and (await _todo(db, bobs_dead)).dead_letter
    await alice.error("POST", "/todos/requeue", {"team": "bobs"}, status=403, code="forbidden")
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(TodoEvent)) == 5


async def test_the_new_answers_match_the_openapi_document(
    alice: Api, services: Services, http: aiohttp.ClientSession, base_url: str
) -> None:
    from jsonschema import Draft202012Validator

    async with http.get(f"{base_url}{PREFIX}/openapi.json") as r:
        doc = await r.json()
    paths = doc["paths"]
    for path in ("/todos/requeue", "/todos/{id}/requeue", "/todos/{id}/release", "/todos/{id}/cancel"):
        assert "post" in paths[PREFIX + path], path
    assert "409" in paths[PREFIX + "/todos/{id}/cancel"]["post"]["responses"]
    listing = {p["name"] for p in paths[PREFIX + "/todos"]["get"]["parameters"]}
    assert {"before", "after", "limit", "source", "kind", "search", "place", "since", "until"} <= listing
    for path in ("/endpoints", "/webhooks", "/connections", "/teams", "/routes"):
        names = {p["name"] for p in paths[PREFIX + path]["get"]["parameters"]}
        assert {"before", "after", "limit"} <= names, path

    def check(template: str, method: str, status: int, payload: Any) -> None:
        schema = paths[PREFIX + template][method]["responses"][str(status)]["content"]["application/json"][
            "schema"
        ]
        Draft202012Validator({**schema, "components": doc["components"]}).validate(payload)

    await alice.ok("POST", "/endpoints", {"name": "Bot"}, 201)
    bot = await _endpoint(services.db, "bot")
    dead = await _dead_letter(services.db, bot)
    check("/todos", "get", 200, await alice.ok("GET", "/todos?state=dead&limit=1"))
    check("/todos/{id}", "get", 200, await alice.ok("GET", f"/todos/{dead}"))
    check("/todos/requeue", "post", 200, await alice.ok("POST", "/todos/requeue", {"dry_run": True}))
    check("/todos/{id}/requeue", "post", 200, await alice.ok("POST", f"/todos/{dead}/requeue"))
    claimed = (await add_todo(services.db, bot)).id
    await todos.claim(services.db, bot, claimed)
    check("/todos/{id}/release", "post", 200, await alice.ok("POST", f"/todos/{claimed}/release"))
    check("/todos/{id}/cancel", "post", 200, await alice.ok("POST", f"/todos/{claimed}/cancel"))
    _, error = await alice.call("POST", f"/todos/{claimed}/cancel")
    check("/todos/{id}/cancel", "post", 409, error)
    detail = await alice.ok("GET", f"/todos/{claimed}")
    check("/todos/{id}", "get", 200, detail)
    assert [e["action"] for e in detail["todo"]["history"]] == ["release", "cancel"]
    for path in ("/endpoints", "/teams", "/webhooks", "/connections", "/routes"):
        check(path, "get", 200, await alice.ok("GET", path))
