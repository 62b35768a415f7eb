"""The quarantine's operations (``switchboard.quarantine``) on held todos that real, signed GitHub
deliveries (octokit's payloads) made through ingest over HTTP: the listing and its pages, the
webhook's count, release to a queue and with routing run again, trust-and-release making a normal
todo an agent claims over the real MCP client, discard with a reason, the expiry pass, and that no
other scope can see or touch any of it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fixtures.ingest_kit import cairn_body
from sqlalchemy import select, update

from switchboard import quarantine, tenancy
from switchboard.db import utcnow
from switchboard.errors import SwitchboardError
from switchboard.intake_config import Caller, set_rules, set_trust, trust_for_create
from switchboard.models import Endpoint, Event, Todo, TodoEvent, Webhook
from switchboard.services import Services
from switchboard.tenancy import Owner
from switchboard.testing import cairn_headers, connect, github_headers, post, todo_payload
from switchboard.todos.operator import Actor

FIXTURES = Path(__file__).parent / "fixtures" / "github"


class Hook:
    """A GitHub webhook on a fresh human's endpoint, and how to send it deliveries."""

    def __init__(self, services: Services, base_url: str, owner: Owner, endpoint: Endpoint) -> None:
        self.services, self.base_url, self.owner, self.endpoint = services, base_url, owner, endpoint
        self.token = self.secret = self.id = ""

    @property
    def caller(self) -> Caller:
        return Caller(Actor("human:test"), scopes=[self.owner])

    async def create(self, trust: dict[str, Any], queue: str = "default") -> Hook:
        new = await tenancy.create_webhook(
            self.services.db,
            self.services.vault,
            self.services.providers,
            endpoint_slug=self.endpoint.slug,
            source="github",
            queue=queue,
            trust=trust_for_create(self.services.providers, "github", trust),
        )
        assert new.secret is not None
        self.token, self.secret, self.id = new.ingest_token, new.secret, new.webhook.id
        return self

    async def deliver(self, name: str, *, sender: str = "Codertocat", **changes: Any) -> dict[str, Any]:
        """A fixture as GitHub sends it, from ``sender``; every body is its own delivery."""
        payload = json.loads((FIXTURES / name).read_bytes())
        payload["sender"]["login"] = sender
        payload.update(changes, switchboard_test=str(uuid.uuid4()))
        body = json.dumps(payload).encode()
        event = name.split("/")[0]
        status, answer, _ = await post(
            self.base_url, self.token, body, github_headers(self.secret, body, event, str(uuid.uuid4()))
        )
        assert status == 202, answer
        return answer


async def _human(services: Services, handle: str) -> tuple[Owner, Endpoint, str]:
    """A human and an endpoint of theirs granted ``default`` and ``triage``, with its token."""
    human, _ = await tenancy.add_human(services.db, handle)
    owner = Owner(human_id=human.id)
    endpoint, token = await tenancy.vend_endpoint(
        services.db, name=f"{handle}-agent", owner=owner, queues=["default", "triage"]
    )
    return owner, endpoint, token


@pytest.fixture
async def hook(services: Services, base_url: str) -> Hook:
    owner, endpoint, _ = await _human(services, "ada")
    return await Hook(services, base_url, owner, endpoint).create({"logins": ["octocat"]})


async def _held(hook: Hook, name: str = "issue_comment/created.payload.json", **changes: Any) -> str:
    answer = await hook.deliver(name, **changes)
    assert answer["disposition"] == "quarantined", answer
    page = await quarantine.list_held(hook.services.db, hook.caller, webhook_id=hook.id, limit=1)
    return str(page.rows[0]["id"])


async def _history(services: Services, todo_id: str) -> list[TodoEvent]:
    async with services.db.read() as s:
        return list(
            (
                await s.scalars(select(TodoEvent).where(TodoEvent.todo_id == todo_id).order_by(TodoEvent.id))
            ).all()
        )


async def _todo(services: Services, todo_id: str) -> Todo:
    async with services.db.read() as s:
        found = await s.get(Todo, todo_id)
    assert found is not None
    return found


async def _code(call: Any, code: str) -> str:
    with pytest.raises(SwitchboardError) as caught:
        await call
    assert caught.value.code == code, caught.value
    return caught.value.message


# ---------------------------------------------------------------------------------------------


async def test_an_untrusted_delivery_is_listed_with_its_verdict_and_counted(hook: Hook) -> None:
    held_id = await _held(hook)
    page = await quarantine.list_held(hook.services.db, hook.caller)
    assert [row["id"] for row in page.rows] == [held_id]
    row = page.rows[0]
    assert row["webhook"] == hook.id and row["endpoint"] == hook.endpoint.slug
    assert (row["source"], row["event"], row["reason"]) == (
        "github",
        "issue_comment.created",
        "untrusted_actor",
    )
    assert row["actor"]["trusted"] is False and row["actor"]["sender"] == "Codertocat"
    assert "Codertocat" in row["actor"]["why"] and row["rule"] is None and row["fault"] is None
    assert row["delivery"] and row["title"] and row["state"] == "held"
    todo = await _todo(hook.services, held_id)
    assert todo.queue == "quarantine" and todo.endpoint_id == hook.endpoint.id
    assert todo.hold_expires_at is not None
    assert timedelta(days=29) < todo.hold_expires_at - todo.created_at <= timedelta(days=30)
    assert await quarantine.quarantined_counts(hook.services.db, [hook.id, "wh_other"]) == {
        hook.id: 1,
        "wh_other": 0,
    }
    views = await quarantine.with_quarantined(hook.services.db, await tenancy.list_webhooks(hook.services.db))
    assert [(v["id"], v["quarantined"]) for v in views] == [(hook.id, 1)]
    # Trusted senders' deliveries are not held, and not counted.
    routed = await hook.deliver("issues/opened.payload.json", sender="octocat")
    assert routed["disposition"] == "routed"
    assert await quarantine.quarantined_counts(hook.services.db, [hook.id]) == {hook.id: 1}


async def test_the_listing_pages_newest_first(hook: Hook) -> None:
    ids = [await _held(hook) for _ in range(3)]
    db, caller = hook.services.db, hook.caller
    first = await quarantine.list_held(db, caller, limit=2)
    assert [r["id"] for r in first.rows] == [ids[2], ids[1]]
    assert first.next_after is None and first.next_before == ids[1]
    second = await quarantine.list_held(db, caller, before=first.next_before, limit=2)
    assert [r["id"] for r in second.rows] == [ids[0]]
    assert second.next_before is None and second.next_after == ids[0]
    back = await quarantine.list_held(db, caller, after=second.next_after, limit=2)
    assert [r["id"] for r in back.rows] == [ids[2], ids[1]]
    assert back.next_before == ids[1] and back.next_after is None
    for bad in ({"limit": 0}, {"before": "nonsense"}, {"before": ids[0], "after": ids[1]}):
        await _code(quarantine.list_held(db, caller, **bad), "invalid_argument")


async def test_release_to_a_named_queue(hook: Hook) -> None:
    held_id = await _held(hook)
    services, caller = hook.services, hook.caller
    await _code(quarantine.release(services, caller, held_id, queue="billing"), "not_granted")
    await _code(quarantine.release(services, caller, held_id, queue="quarantine"), "invalid_argument")
    await _code(quarantine.release(services, caller, held_id, queue="Not A Queue"), "invalid_argument")
    rung: list[list[str]] = []

    async def heard(ids: list[str]) -> None:
        rung.append(ids)

    services.todo_listeners.append(heard)
    answer = await quarantine.release(services, caller, held_id, queue="triage")
    [made] = answer["todos"]
    assert made["endpoint"] == hook.endpoint.slug and made["queue"] == "triage"
    assert answer["outcome"] == "routed" and answer["trusted"] == []
    assert answer["todo"]["state"] == "cancelled" and answer["event"]["action"] == "release"
    assert made["id"] in answer["event"]["detail"] and rung == [[made["id"]]]
    new, held = await _todo(services, made["id"]), await _todo(services, held_id)
    assert new.state == "pending" and new.queue == "triage" and new.hold_reason is None
    assert (await todo_payload(services, new.id), new.title, new.kind, new.event_id) == (
        await todo_payload(services, held_id),
        held.title,
        held.kind,
        held.event_id,
    )
    assert new.routing is not None and new.routing["by"] == "release"
    assert new.routing["action"] == {"type": "queue", "queue": "triage"}
    assert new.routing["actor"]["sender"] == "Codertocat"
    assert held.state == "cancelled" and held.finished_at is not None
    [event] = await _history(services, held_id)
    assert (event.action, event.from_state, event.to_state, event.actor) == (
        "release",
        "held",
        "cancelled",
        "human:test",
    )
    # Decided once: every second decision is a conflict.
    await _code(quarantine.release(services, caller, held_id, queue="triage"), "conflict")
    await _code(quarantine.release(services, caller, held_id), "conflict")
    await _code(quarantine.discard(services, caller, held_id, "late"), "conflict")
    assert await quarantine.quarantined_counts(services.db, [hook.id]) == {hook.id: 0}


async def test_release_runs_routing_again_with_trust_satisfied(hook: Hook) -> None:
    services, caller = hook.services, hook.caller
    held_id = await _held(hook)
    answer = await quarantine.release(services, caller, held_id)
    [made] = answer["todos"]
    assert (made["endpoint"], made["queue"]) == (hook.endpoint.slug, "default")
    assert answer["outcome"] == "routed" and answer["routing"]["by"] == "release"
    assert "released from quarantine by human:test" in answer["routing"]["why"]
    new = await _todo(services, made["id"])
    assert new.state == "pending" and new.routing is not None and new.routing["by"] == "release"
    # The actor was trusted for that delivery only: the webhook's trust is unchanged.
    async with services.db.read() as s:
        webhook = await s.get(Webhook, hook.id)
    assert webhook is not None and webhook.trust == {"logins": ["octocat"], "match": "sender"}
    assert (await hook.deliver("issues/opened.payload.json"))["disposition"] == "quarantined"


async def test_a_release_obeys_the_rules_which_may_drop_or_hold_it_again(hook: Hook) -> None:
    services, caller = hook.services, hook.caller
    dropped, held_again, routed = await _held(hook), await _held(hook), await _held(hook)
    rules = {
        "rules": [
            {
                "id": "hold",
                "expr": ".payload.switchboard_test == $params.hold",
                "action": {"type": "quarantine"},
            },
            {"id": "drop", "expr": ".payload.switchboard_test == $params.drop", "action": {"type": "drop"}},
            {"id": "triage", "expr": "true", "action": {"type": "queue", "queue": "triage"}},
        ],
        "params": {
            "hold": (await todo_payload(services, held_again))["switchboard_test"],
            "drop": (await todo_payload(services, dropped))["switchboard_test"],
        },
    }
    await set_rules(services, caller, hook.id, rules)
    answer = await quarantine.release(services, caller, dropped)
    assert (answer["outcome"], answer["todos"], answer["todo"]["state"]) == ("dropped", [], "cancelled")
    assert "rule drop matched" in answer["event"]["detail"] and "made no todo" in answer["event"]["detail"]
    answer = await quarantine.release(services, caller, held_again)
    assert (answer["outcome"], answer["todos"], answer["todo"]["state"]) == ("quarantined", [], "held")
    assert (answer["todo"]["reason"], answer["todo"]["rule"]) == ("rule", "hold")
    assert (answer["event"]["from_state"], answer["event"]["to_state"]) == ("held", "held")
    assert "held it again" in answer["event"]["detail"]
    answer = await quarantine.release(services, caller, routed)
    [made] = answer["todos"]
    assert (answer["outcome"], made["queue"], answer["routing"]["rule"]) == ("routed", "triage", "triage")
    # Still held, so still decided on by a human: to a queue now.
    assert [r["id"] for r in (await quarantine.list_held(services.db, caller)).rows] == [held_again]
    assert (await quarantine.release(services, caller, held_again, queue="default"))["outcome"] == "routed"


async def test_trust_and_release_makes_work_an_agent_claims(services: Services, base_url: str) -> None:
    owner, endpoint, token = await _human(services, "grace")
    hook = await Hook(services, base_url, owner, endpoint).create({"logins": ["octocat"]})
    async with connect(base_url, token, endpoint) as agent:
        held_id = await _held(hook)
        # No agent sees or hears of a held todo.
        assert (await agent.ok("list_todos"))["todos"] == []
        assert await agent.ok("claim_next") == {"empty": True}
        assert await agent.listener.silence(0.3)
        answer = await quarantine.release(services, hook.caller, held_id, trust=True)
        assert answer["trusted"] == ["Codertocat"] and answer["event"]["action"] == "trust_release"
        assert "trusted Codertocat" in answer["event"]["detail"]
        [made] = answer["todos"]
        await agent.listener.next_ring(5.0)
        claimed = (await agent.ok("claim_next"))["todo"]
        assert claimed["id"] == made["id"] and claimed["kind"] == "issue_comment.created"
        # The sender is trusted from now on: the next delivery is work at once.
        assert (await hook.deliver("issues/opened.payload.json"))["disposition"] == "routed"
    async with services.db.read() as s:
        webhook = await s.get(Webhook, hook.id)
    assert webhook is not None and webhook.trust == {"logins": ["Codertocat", "octocat"], "match": "sender"}


async def test_trust_and_release_where_there_is_nobody_to_trust(hook: Hook) -> None:
    services, caller = hook.services, hook.caller
    # Allow-all already trusts everyone: a rule held it, and trusting adds no one.
    await set_trust(services, caller, hook.id, {"allow_all": True})
    await set_rules(services, caller, hook.id, {"rules": [], "default_action": {"type": "quarantine"}})
    answer = await hook.deliver("issues/opened.payload.json")
    assert answer["disposition"] == "quarantined"
    page = await quarantine.list_held(services.db, caller, webhook_id=hook.id)
    row = page.rows[0]
    assert row["reason"] == "rule"
    released = await quarantine.release(services, caller, row["id"], trust=True, queue="triage")
    assert released["trusted"] == [] and "already trusted" in released["event"]["detail"]


async def test_discard_needs_a_reason(hook: Hook) -> None:
    services, caller = hook.services, hook.caller
    held_id = await _held(hook)
    for reason in (None, "", "   ", 7, "x" * 501, "two\u0000parts"):
        await _code(quarantine.discard(services, caller, held_id, reason), "invalid_argument")
    answer = await quarantine.discard(services, caller, held_id, "  spam,\n from a  stranger ")
    assert answer["todo"]["state"] == "cancelled"
    assert answer["event"]["action"] == "discard" and answer["event"]["detail"] == "spam, from a stranger"
    assert (await _todo(services, held_id)).state == "cancelled"
    await _code(quarantine.discard(services, caller, held_id, "again"), "conflict")
    assert (await quarantine.list_held(services.db, caller)).rows == []


async def test_held_todos_expire(hook: Hook) -> None:
    services = hook.services
    old, fresh = await _held(hook), await _held(hook)
    async with services.db.write() as s:
        await s.execute(
            update(Todo).where(Todo.id == old).values(hold_expires_at=utcnow() - timedelta(seconds=1))
        )
    # Two passes at once (two processes): each expired todo is ended once.
    done = await asyncio.gather(quarantine.expire_held(services), quarantine.expire_held(services))
    assert sum(done) == 1
    assert (await _todo(services, old)).state == "cancelled"
    assert (await _todo(services, fresh)).state == "held"
    [event] = await _history(services, old)
    assert (event.action, event.actor, event.from_state, event.to_state) == (
        "expire",
        "switchboard:expiry",
        "held",
        "cancelled",
    )
    assert await quarantine.expire_held(services) == 0
    assert await quarantine.expire_held(services, now=utcnow() + timedelta(days=31)) == 1
    assert await quarantine.quarantined_counts(services.db, [hook.id]) == {hook.id: 0}


async def test_no_other_scope_sees_or_touches_a_quarantine(hook: Hook) -> None:
    services = hook.services
    held_id = await _held(hook)
    mallory, _, _ = await _human(services, "mallory")
    other = Caller(Actor("human:mallory"), scopes=[mallory])
    assert (await quarantine.list_held(services.db, other)).rows == []
    await _code(quarantine.list_held(services.db, other, webhook_id=hook.id), "not_found")
    await _code(quarantine.release(services, other, held_id), "not_found")
    await _code(quarantine.release(services, other, held_id, queue="default"), "not_found")
    await _code(quarantine.release(services, other, held_id, trust=True), "not_found")
    await _code(quarantine.discard(services, other, held_id, "mine now"), "not_found")
    for missing in ("td_nope", "", None, "x" * 41):
        await _code(quarantine.discard(services, hook.caller, missing, "gone"), "not_found")

    def read_only(owner: Owner) -> None:
        raise SwitchboardError("forbidden", "only the team's owners and admins may change it")

    reader = Caller(Actor("human:reader"), scopes=[hook.owner], manage=read_only)
    assert [r["id"] for r in (await quarantine.list_held(services.db, reader)).rows] == [held_id]
    await _code(quarantine.release(services, reader, held_id, queue="default"), "forbidden")
    await _code(quarantine.release(services, reader, held_id, trust=True), "forbidden")
    await _code(quarantine.discard(services, reader, held_id, "no"), "forbidden")
    assert (await _todo(services, held_id)).state == "held"
    # The instance operator (CLI) sees every scope.
    assert [r["id"] for r in (await quarantine.list_held(services.db, Caller.cli())).rows] == [held_id]


async def test_a_held_cairn_delivery_is_released_long_after_it_arrived(
    services: Services, base_url: str
) -> None:
    """Cairn signs the time it sent a delivery into the body, and its verifier refuses one more than
    five minutes from its arrival: routing run again judges the stored body as of its arrival."""
    owner, endpoint, _ = await _human(services, "lin")
    new = await tenancy.create_webhook(
        services.db,
        services.vault,
        services.providers,
        endpoint_slug=endpoint.slug,
        source="cairn",
        trust=trust_for_create(services.providers, "cairn", {"actor_ids": ["usr_grace"]}),
    )
    assert new.secret is not None
    body = cairn_body("comment.created.json")
    status, answer, _ = await post(
        base_url, new.ingest_token, body, cairn_headers(new.secret, body, "evt_01jdq9b0b1c2d3e4f5g6h7j8k9")
    )
    assert (status, answer["disposition"]) == (202, "quarantined"), answer
    caller = Caller(Actor("human:lin"), scopes=[owner])
    [held] = (await quarantine.list_held(services.db, caller)).rows
    assert held["actor"]["sender"] == "usr_ada" and held["reason"] == "untrusted_actor"
    # As if it had arrived, and been held, an hour ago.
    an_hour_ago = utcnow() - timedelta(hours=1)
    payload = json.loads(body)
    payload["created_at"] = an_hour_ago.isoformat().replace("+00:00", "Z")
    async with services.db.write() as s:
        await s.execute(
            update(Event)
            .where(Event.id == held["delivery"])
            .values(body=json.dumps(payload).encode(), received_at=an_hour_ago)
        )
    answer = await quarantine.release(services, caller, held["id"], trust=True)
    assert answer["trusted"] == ["usr_ada"] and answer["outcome"] == "routed"
    [made] = answer["todos"]
    assert (await _todo(services, made["id"])).state == "pending"
    async with services.db.read() as s:
        webhook = await s.get(Webhook, new.webhook.id)
    assert webhook is not None and webhook.trust == {"actor_ids": ["usr_ada", "usr_grace"]}
