"""Trusted actors and the quarantine at ingest (docs/routing.md), over real HTTP with octokit's
payloads and real signatures: an untrusted delivery becomes one held todo on the webhook's own
endpoint that no agent lists, reads, claims or hears of; a trusted one is work as before; every
todo and event records the routing trace."""

from __future__ import annotations

from datetime import timedelta

import pytest
from aiohttp.test_utils import TestServer
from fixtures.intake_kit import (
    ISSUE_1,
    SENDER,
    deliver,
    fan_out,
    github_hook,
    listening,
    only_event,
    set_webhook,
    todos_of,
)

from switchboard import deliveries, reply, todos
from switchboard.errors import SwitchboardError
from switchboard.ingest import INGEST_WRITER
from switchboard.intake import HOLD_QUEUE
from switchboard.mcp import doorbell
from switchboard.services import Services
from switchboard.testing import connect, make_webhook, post, todo_payload
from switchboard.todos import TodoFilter


async def test_an_untrusted_commenter_is_quarantined_and_no_agent_sees_or_hears_of_it(
    services: Services, base_url: str, bell: doorbell.Doorbell
) -> None:
    hook = await github_hook(services, trust={"logins": ["octocat"]})
    routed, routed_token = await fan_out(services, hook, "olive-helper", ("default",))
    async with connect(base_url, hook.agent_token, hook.endpoint) as agent:
        await listening(bell, hook.endpoint)
        status, answer = await deliver(base_url, hook, "issue_comment/created")
        # The sender is the untrusted party: told the disposition, never the held todo's id.
        assert status == 202, answer
        assert answer == {
            "todos": [],
            "created": 0,
            "verified": True,
            "trust_mode": "signed",
            "disposition": "quarantined",
        }
        event = await only_event(services, hook.webhook_id)
        assert event.disposition == "quarantined"
        [held] = await todos_of(services, event.id)
        # One held todo, on the webhook's own endpoint only (never a fan-out target).
        assert held.state == "held" and held.endpoint_id == hook.endpoint.id and held.queue == HOLD_QUEUE
        assert held.hold_reason == "untrusted_actor"
        actor = held.hold_detail["actor"]
        assert actor["trusted"] is False and actor["sender"] == SENDER and actor["matched"] is None
        assert "not a trusted" in actor["why"]
        assert held.hold_expires_at == held.created_at + timedelta(days=30)
        assert held.next_ring_at is None and held.once_key is None
        # The same content a todo would have had.
        assert held.kind == "issue_comment.created" and held.title.startswith("Issue #1 commented")
        assert held.reply_to is not None and held.reply_to["display"] == ISSUE_1
        assert (await todo_payload(services, held.id))["comment"]["user"]["login"] == SENDER
        assert held.routing["by"] == "trust" and held.routing["action"] == {"type": "quarantine"}
        assert held.routing["actor"] == actor
        assert event.routing["targets"] == [
            {"endpoint": hook.endpoint.slug, "queue": HOLD_QUEUE, "outcome": "held"}
        ]

        # No agent path shows it: not the list (in any state), not by id, not a claim, no ring.
        assert (await agent.ok("list_todos"))["todos"] == []
        assert (await agent.ok("list_todos", state="pending"))["todos"] == []
        assert (await agent.error("get_todo", todo_id=held.id))["error"] == "not_found"
        assert (await agent.error("claim", todo_id=held.id))["error"] == "not_found"
        assert (await agent.error("complete", todo_id=held.id))["error"] == "not_found"
        assert (await agent.error("release", todo_id=held.id))["error"] == "not_found"
        # Even an endpoint that may reply is told the held todo does not exist.
        with pytest.raises(SwitchboardError) as refused:
            await reply.send_reply(services, hook.endpoint, held.id, "on it")
        assert refused.value.code == "not_found"
        assert await agent.ok("claim_next") == {"empty": True}
        assert await agent.listener.silence(0.5)
        async with connect(base_url, routed_token, routed) as other:
            assert (await other.ok("list_todos"))["todos"] == []
            assert await other.ok("claim_next") == {"empty": True}

        # Trusting the sender makes the next delivery work as before, and it rings.
        await set_webhook(services, hook.webhook_id, trust={"logins": ["octocat", "codertocat"]})
        status, answer = await deliver(base_url, hook, "issue_comment/created.1")
        assert status == 202 and answer["disposition"] == "routed" and answer["created"] == 2, answer
        ring = await agent.listener.next_ring(timeout=5.0)
        assert ring.meta["todo_id"] == answer["todos"][0]["id"]
        listed = (await agent.ok("list_todos"))["todos"]
        assert [t["id"] for t in listed] == [answer["todos"][0]["id"]]
    # The board (and the operator's lists) leave held todos to the quarantine list.
    page = await todos.list_in_scopes(services.db, scopes=None)
    assert held.id not in {row["id"] for row in page.rows} and len(page.rows) == 2
    async with services.db.read() as s:
        counts = await todos.state_counts(s, None, TodoFilter())
    assert counts["all"] == 2 and counts["pending"] == 2 and "held" not in counts


async def test_a_trusted_sender_makes_a_todo_on_every_target_with_its_trace(
    services: Services, base_url: str
) -> None:
    # Logins compare without regard to case.
    hook = await github_hook(services, trust={"logins": ["CODERTOCAT"]})
    routed, _ = await fan_out(services, hook, "olive-helper", ("default",))
    status, answer = await deliver(base_url, hook, "pull_request/opened")
    assert status == 202 and answer["disposition"] == "routed" and answer["created"] == 2, answer
    assert [(t["endpoint"], t["queue"], t["created"]) for t in answer["todos"]] == [
        (hook.endpoint.slug, "default", True),
        (routed.slug, "default", True),
    ]
    event = await only_event(services, hook.webhook_id)
    rows = await todos_of(services, event.id)
    assert {t.id for t in rows} == {t["id"] for t in answer["todos"]}
    trace = rows[0].routing
    assert trace["by"] == "none" and trace["rule"] is None and trace["action"] == {"type": "queue"}
    assert trace["actor"]["trusted"] is True and trace["actor"]["matched"] == "sender"
    assert all(t.state == "pending" and t.hold_reason is None and t.routing == trace for t in rows)
    assert event.disposition == "routed"
    assert event.routing == {
        **trace,
        "targets": [
            {"endpoint": hook.endpoint.slug, "queue": "default", "outcome": "todo"},
            {"endpoint": routed.slug, "queue": "default", "outcome": "todo"},
        ],
    }


async def test_allow_all_trusts_everyone(services: Services, base_url: str) -> None:
    hook = await github_hook(services, trust={"allow_all": True})
    status, answer = await deliver(base_url, hook, "issues/opened")
    assert status == 202 and answer["disposition"] == "routed" and answer["created"] == 1, answer
    [row] = await todos_of(services, (await only_event(services, hook.webhook_id)).id)
    assert row.routing["actor"]["matched"] == "allow_all"


async def test_a_webhook_without_a_trust_setting_trusts_nobody(services: Services, base_url: str) -> None:
    hook = await github_hook(services, trust=None)
    status, answer = await deliver(base_url, hook, "issues/opened")
    assert status == 202 and answer["disposition"] == "quarantined" and answer["created"] == 0, answer
    [held] = await todos_of(services, (await only_event(services, hook.webhook_id)).id)
    assert held.state == "held" and held.hold_reason == "untrusted_actor"
    assert held.hold_detail["actor"]["why"] == "no trusted actors configured"
    # An unreadable stored setting fails closed the same way.
    await set_webhook(services, hook.webhook_id, trust={"logins": "octocat"})
    status, answer = await deliver(base_url, hook, "pull_request/opened")
    assert status == 202 and answer["disposition"] == "quarantined", answer


async def test_a_duplicate_of_a_quarantined_delivery_is_a_duplicate(
    services: Services, base_url: str
) -> None:
    hook = await github_hook(services, trust={"logins": ["octocat"]})
    status, first = await deliver(base_url, hook, "issues/opened")
    assert status == 202 and first["disposition"] == "quarantined"
    # The same body again (a replay under a fresh delivery id): one event, one held todo.
    status, again = await deliver(base_url, hook, "issues/opened")
    assert status == 202 and again["disposition"] == "duplicate" and again["created"] == 0
    # The replay is told it was a duplicate, never the held todo's id.
    assert again["todos"] == [], again
    event = await only_event(services, hook.webhook_id)
    assert len(await todos_of(services, event.id)) == 1


async def test_an_unsigned_delivery_has_no_trust_step(services: Services, base_url: str) -> None:
    token, _, webhook_id = await make_webhook(services, "generic")
    status, answer, _ = await post(base_url, token, b'{"sender": {"login": "anyone"}}', {})
    assert status == 202 and answer["disposition"] == "routed" and answer["created"] == 1, answer
    [row] = await todos_of(services, (await only_event(services, webhook_id)).id)
    assert row.routing["by"] == "none" and row.routing["actor"] is None


async def test_a_redelivery_goes_through_intake_again(
    services: Services, server: TestServer, base_url: str
) -> None:
    hook = await github_hook(services, trust={"logins": ["octocat"]})
    status, answer = await deliver(base_url, hook, "issues/opened")
    assert status == 202 and answer["disposition"] == "quarantined"
    original = await only_event(services, hook.webhook_id)
    writer = server.app[INGEST_WRITER]
    # Still untrusted: the operator's redelivery is held again, never delivered around the trust.
    made = await deliveries.redeliver(services, writer, hook.webhook_id, original.id, by="test")
    assert made.disposition == "quarantined" and len(made.todos) == 1
    [held] = await todos_of(services, made.event_id)
    assert held.state == "held" and held.hold_reason == "untrusted_actor"
    # Trusted now: the same delivery redelivered is work.
    await set_webhook(services, hook.webhook_id, trust={"allow_all": True})
    made = await deliveries.redeliver(services, writer, hook.webhook_id, original.id, by="test")
    assert made.disposition == "routed" and len(made.todos) == 1
    [row] = await todos_of(services, made.event_id)
    assert row.state == "pending" and row.routing["actor"]["matched"] == "allow_all"
