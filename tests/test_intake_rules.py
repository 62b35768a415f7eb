"""Routing rules at ingest (docs/routing.md, "Routing rules"), over real HTTP with octokit's payloads
and real signatures: match semantics, the envelope a rule sees, every action and flag, the default
action, ``once`` across deliveries, faults failing closed (a rule that loops forever is stopped
while other deliveries are answered) and the grant re-checked at delivery time."""

from __future__ import annotations

import asyncio
from typing import Any

from fixtures.intake_kit import (
    ISSUE_1,
    SENDER,
    deliver,
    fan_out,
    github_hook,
    newest_event,
    only_event,
    set_queues,
    set_rules,
    set_webhook,
    todos_of,
)

from switchboard import tenancy, todos
from switchboard.intake import HOLD_QUEUE
from switchboard.jq_sandbox import Sandbox
from switchboard.services import Services
from switchboard.testing import make_webhook, post

TRUSTED = {"logins": [SENDER]}


def rule(rule_id: str, expr: str, action: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": rule_id, "expr": expr, "action": action or {"type": "queue"}}


async def test_the_first_rule_whose_first_output_is_neither_false_nor_null_wins(
    services: Services, base_url: str
) -> None:
    hook = await github_hook(services, trust=TRUSTED)
    await set_rules(
        services,
        hook.webhook_id,
        {
            "rules": [
                rule("is-false", "false", {"type": "quarantine"}),
                rule("is-null", "null", {"type": "quarantine"}),
                rule("no-output", "empty", {"type": "quarantine"}),
                # Only the first output counts: false, then true, is no match.
                rule("first-output", "false, true", {"type": "quarantine"}),
                rule("comments", '.event == "issue_comment.created"', {"type": "drop"}),
                rule("later", "true", {"type": "quarantine"}),
            ]
        },
    )
    status, answer = await deliver(base_url, hook, "issue_comment/created")
    assert status == 202 and answer["disposition"] == "dropped" and answer["created"] == 0, answer
    assert answer["todos"] == []
    event = await only_event(services, hook.webhook_id)
    assert event.disposition == "dropped" and await todos_of(services, event.id) == []
    assert event.routing["by"] == "rule" and event.routing["rule"] == "comments"
    assert event.routing["action"] == {"type": "drop"} and event.routing["why"] == "rule comments matched"


async def test_a_rule_sees_the_envelope_and_params(services: Services, base_url: str) -> None:
    hook = await github_hook(services, trust=TRUSTED)
    expr = (
        '.source == "github" and .event == "issue_comment.created" and .verified'
        ' and .headers["x-github-event"] == "issue_comment"'
        ' and .headers["x-hub-signature-256"] == "[redacted]"'
        " and .actor.trusted and .actor.sender == $params.who"
        " and .subject.key == $params.thread and .subject.number == 1"
        ' and .subject.repo == "Codertocat/Hello-World"'
        " and .payload.comment.id == 492700400"
    )
    await set_rules(
        services,
        hook.webhook_id,
        {
            "rules": [
                {
                    "id": "all-of-it",
                    "name": "Everything a rule sees",
                    "expr": expr,
                    "action": {"type": "queue"},
                }
            ],
            "default_action": {"type": "drop"},
            "params": {"who": SENDER, "thread": ISSUE_1},
        },
    )
    status, answer = await deliver(base_url, hook, "issue_comment/created")
    assert status == 202 and answer["disposition"] == "routed" and answer["created"] == 1, answer
    [row] = await todos_of(services, (await only_event(services, hook.webhook_id)).id)
    assert row.routing["by"] == "rule" and row.routing["rule"] == "all-of-it"
    assert row.routing["rule_name"] == "Everything a rule sees"
    assert row.state == "pending" and row.once_key is None


async def test_queue_picks_the_queue_and_the_endpoints_in_order(services: Services, base_url: str) -> None:
    hook = await github_hook(services, trust=TRUSTED, queues=("default", "reviews"))
    both, _ = await fan_out(services, hook, "olive-both", ("default", "reviews"))
    plain, _ = await fan_out(services, hook, "olive-plain", ("default",))
    await set_rules(
        services,
        hook.webhook_id,
        {
            "rules": [
                rule(
                    "reviews",
                    '.event | startswith("pull_request_review")',
                    {"type": "queue", "queue": "reviews", "endpoints": [both.slug, hook.endpoint.slug]},
                ),
                # Granted to some targets only: those get it; the trace says why the other did not.
                rule("rest", "true", {"type": "queue", "queue": "reviews"}),
            ]
        },
    )
    status, answer = await deliver(base_url, hook, "pull_request_review/submitted")
    assert status == 202 and answer["disposition"] == "routed", answer
    assert [(t["endpoint"], t["queue"]) for t in answer["todos"]] == [
        (both.slug, "reviews"),
        (hook.endpoint.slug, "reviews"),
    ]
    status, answer = await deliver(base_url, hook, "issues/opened")
    assert [(t["endpoint"], t["queue"]) for t in answer["todos"]] == [
        (hook.endpoint.slug, "reviews"),
        (both.slug, "reviews"),
    ]
    event = await newest_event(services, hook.webhook_id)
    assert event.routing["targets"] == [
        {"endpoint": hook.endpoint.slug, "queue": "reviews", "outcome": "todo"},
        {"endpoint": both.slug, "queue": "reviews", "outcome": "todo"},
        {"endpoint": plain.slug, "queue": "reviews", "outcome": "not_granted"},
    ]


async def test_exclusive_goes_to_the_first_live_endpoint_only(services: Services, base_url: str) -> None:
    hook = await github_hook(services, trust=TRUSTED)
    first, _ = await fan_out(services, hook, "olive-first", ("default",))
    second, _ = await fan_out(services, hook, "olive-second", ("default",))
    await set_rules(
        services,
        hook.webhook_id,
        {
            "rules": [
                rule(
                    "one",
                    "true",
                    {"type": "queue", "endpoints": [first.slug, second.slug], "exclusive": True},
                )
            ]
        },
    )
    status, answer = await deliver(base_url, hook, "issues/opened")
    assert [t["endpoint"] for t in answer["todos"]] == [first.slug], answer
    # Without endpoints, the first live target: the webhook's own endpoint.
    await set_rules(
        services, hook.webhook_id, {"rules": [rule("one", "true", {"type": "queue", "exclusive": True})]}
    )
    status, answer = await deliver(base_url, hook, "pull_request/opened")
    assert [t["endpoint"] for t in answer["todos"]] == [hook.endpoint.slug], answer
    # The second takes the work only while the first is not live.
    await set_rules(
        services,
        hook.webhook_id,
        {
            "rules": [
                rule(
                    "one",
                    "true",
                    {"type": "queue", "endpoints": [first.slug, second.slug], "exclusive": True},
                )
            ]
        },
    )
    await tenancy.revoke_endpoint(services.db, first.slug)
    status, answer = await deliver(base_url, hook, "issue_comment/created")
    assert [t["endpoint"] for t in answer["todos"]] == [second.slug], answer
    # Naming only endpoints that are not live fails closed.
    await set_rules(
        services,
        hook.webhook_id,
        {"rules": [rule("gone", "true", {"type": "queue", "endpoints": [first.slug]})]},
    )
    status, answer = await deliver(base_url, hook, "issue_comment/created.1")
    assert status == 202 and answer["disposition"] == "faulted" and answer["todos"] == [], answer
    [held] = await todos_of(services, (await newest_event(services, hook.webhook_id)).id)
    assert held.hold_reason == "rule_fault" and "no_live_endpoint" in held.hold_detail["fault"]


async def test_quarantine_drop_and_the_default_action(services: Services, base_url: str) -> None:
    hook = await github_hook(services, trust=TRUSTED)
    await set_rules(
        services,
        hook.webhook_id,
        {
            "rules": [rule("hold-prs", '.event | startswith("pull_request")', {"type": "quarantine"})],
            "default_action": {"type": "drop"},
        },
    )
    status, answer = await deliver(base_url, hook, "pull_request/opened")
    assert status == 202 and answer["disposition"] == "quarantined" and answer["todos"] == [], answer
    [held] = await todos_of(services, (await newest_event(services, hook.webhook_id)).id)
    assert held.state == "held" and held.queue == HOLD_QUEUE and held.endpoint_id == hook.endpoint.id
    assert held.hold_reason == "rule" and held.hold_detail["rule"] == "hold-prs"
    assert held.hold_detail["actor"]["trusted"] is True
    assert held.routing["by"] == "rule" and held.routing["rule"] == "hold-prs"

    # No rule matches: the default action.
    status, answer = await deliver(base_url, hook, "issues/opened")
    assert status == 202 and answer["disposition"] == "dropped", answer
    event = await newest_event(services, hook.webhook_id)
    assert event.routing["by"] == "default" and event.routing["rule"] is None
    assert event.routing["action"] == {"type": "drop"}

    # No rule matches and there is no default: queued to every live target, as without rules.
    await set_rules(services, hook.webhook_id, {"rules": [rule("never", "false", {"type": "drop"})]})
    status, answer = await deliver(base_url, hook, "issue_comment/created")
    assert status == 202 and answer["disposition"] == "routed" and answer["created"] == 1, answer
    [row] = await todos_of(services, (await newest_event(services, hook.webhook_id)).id)
    assert row.routing["by"] == "default" and row.queue == "default" and row.state == "pending"


async def test_once_makes_at_most_one_open_todo_per_subject_and_queue(
    services: Services, base_url: str
) -> None:
    hook = await github_hook(services, trust=TRUSTED)
    await set_rules(
        services, hook.webhook_id, {"rules": [rule("once", "true", {"type": "queue", "once": True})]}
    )
    status, first = await deliver(base_url, hook, "issue_comment/created")
    assert status == 202 and first["created"] == 1, first
    [open_todo] = await todos_of(services, (await newest_event(services, hook.webhook_id)).id)
    assert open_todo.once_key == ISSUE_1

    # Another delivery about issue #1 while that todo is open: nothing new; the answer and the
    # event's trace name the open todo.
    status, second = await deliver(base_url, hook, "issue_comment/created.1", delivery="folded")
    assert status == 202 and second["disposition"] == "routed" and second["created"] == 0, second
    assert second["todos"] == [
        {"id": open_todo.id, "endpoint": hook.endpoint.slug, "queue": "default", "created": False}
    ]
    # The forge's retry of that delivery (its answer lost) is a duplicate that names the same todo.
    status, again = await deliver(base_url, hook, "issue_comment/created.1", delivery="folded")
    assert status == 202 and again["disposition"] == "duplicate", again
    assert again["todos"] == second["todos"] and again["created"] == 0
    event = await newest_event(services, hook.webhook_id)
    assert await todos_of(services, event.id) == []
    assert event.routing["targets"] == [
        {"endpoint": hook.endpoint.slug, "queue": "default", "outcome": "once", "open": open_todo.id}
    ]
    assert f"once: open todo {open_todo.id} exists" in event.routing["why"]

    # Claimed is still open; once it is done, the next delivery makes a new one.
    claimed = await todos.claim_next(services.db, hook.endpoint)
    assert claimed is not None and claimed["id"] == open_todo.id
    status, third = await deliver(base_url, hook, "issues/opened")
    assert third["created"] == 0 and third["todos"][0]["id"] == open_todo.id, third
    await todos.complete(services.db, hook.endpoint, open_todo.id)
    status, fourth = await deliver(base_url, hook, "issue_comment/edited")
    assert status == 202 and fourth["created"] == 1 and fourth["todos"][0]["id"] != open_todo.id, fourth
    # Another subject (pull request #2) was never folded.
    status, other = await deliver(base_url, hook, "pull_request/opened")
    assert other["created"] == 1, other


async def test_a_rule_that_loops_forever_is_stopped_and_the_delivery_held_while_others_are_answered(
    services: Services, base_url: str
) -> None:
    # Long limits so the other deliveries are surely answered while the rule still runs.
    services.sandbox = Sandbox(workers=2, rule_timeout=3.0, budget=4.0)
    hook = await github_hook(services, trust=TRUSTED)
    await set_rules(
        services,
        hook.webhook_id,
        {"rules": [rule("spin", "0 | until(false; . + 1)", {"type": "drop"}), rule("after", "true")]},
    )
    generic, _, _ = await make_webhook(services, "generic")
    looping = asyncio.create_task(deliver(base_url, hook, "issues/opened"))
    answers = [await post(base_url, generic, f'{{"n": {n}}}'.encode(), {}) for n in range(3)]
    assert [status for status, _, _ in answers] == [202, 202, 202]
    assert not looping.done()
    status, answer = await looping
    assert status == 202 and answer["disposition"] == "faulted" and answer["todos"] == [], answer
    event = await newest_event(services, hook.webhook_id)
    assert event.disposition == "faulted"
    [held] = await todos_of(services, event.id)
    assert held.state == "held" and held.hold_reason == "rule_fault" and held.hold_detail["rule"] == "spin"
    assert "spin exceeded its time limit" in held.hold_detail["fault"]
    assert held.routing["rule"] == "spin" and held.routing["action"] == {"type": "quarantine"}
    # The killed worker was replaced: the next delivery is decided normally.
    await set_rules(services, hook.webhook_id, {"rules": [rule("fine", "true")]})
    status, answer = await deliver(base_url, hook, "pull_request/opened")
    assert status == 202 and answer["disposition"] == "routed" and answer["created"] == 1, answer


async def test_a_jq_error_or_an_unreadable_rule_set_fails_closed(services: Services, base_url: str) -> None:
    hook = await github_hook(services, trust=TRUSTED)
    await set_rules(services, hook.webhook_id, {"rules": [rule("boom", '.payload | error("boom")')]})
    status, answer = await deliver(base_url, hook, "issues/opened")
    assert status == 202 and answer["disposition"] == "faulted", answer
    [held] = await todos_of(services, (await newest_event(services, hook.webhook_id)).id)
    assert held.hold_reason == "rule_fault" and held.hold_detail["rule"] == "boom"
    # A stored setting that is not a rule set (never saved by the setter) is a fault, never a 500.
    await set_webhook(services, hook.webhook_id, routing={"rules": "everything"})
    status, answer = await deliver(base_url, hook, "pull_request/opened")
    assert status == 202 and answer["disposition"] == "faulted", answer
    [held] = await todos_of(services, (await newest_event(services, hook.webhook_id)).id)
    assert held.hold_reason == "rule_fault" and held.hold_detail["fault"].startswith("intake failed")


async def test_a_queue_no_longer_granted_at_delivery_time_fails_closed(
    services: Services, base_url: str
) -> None:
    hook = await github_hook(services, trust=TRUSTED, queues=("default", "reviews"))
    await set_rules(
        services, hook.webhook_id, {"rules": [rule("reviews", "true", {"type": "queue", "queue": "reviews"})]}
    )
    status, answer = await deliver(base_url, hook, "pull_request_review/submitted")
    assert answer["disposition"] == "routed" and answer["todos"][0]["queue"] == "reviews", answer
    # The grant is withdrawn after the rules were saved: never another queue, never dropped.
    await set_queues(services, hook.endpoint.id, ["default"])
    status, answer = await deliver(base_url, hook, "issues/opened")
    assert status == 202 and answer["disposition"] == "faulted" and answer["todos"] == [], answer
    event = await newest_event(services, hook.webhook_id)
    [held] = await todos_of(services, event.id)
    assert held.state == "held" and held.hold_reason == "rule_fault" and held.hold_detail["rule"] == "reviews"
    assert "not_granted" in held.hold_detail["fault"] and held.queue == HOLD_QUEUE
    assert event.routing["by"] == "rule" and "not_granted" in event.routing["why"]


async def test_exclusive_never_falls_through_to_the_second_when_the_first_lost_the_queue(
    services: Services, base_url: str
) -> None:
    """With ``exclusive`` a second endpoint takes the work only while the first is revoked or
    expired (docs/routing.md); a first endpoint that is live but lost the rule's queue since the
    rules were saved fails closed (a rule fault, held), as any named endpoint that lost it does.
    The work went to the second endpoint."""
    hook = await github_hook(services, trust=TRUSTED, queues=("default", "reviews"))
    first, _ = await fan_out(services, hook, "olive-first", ("default", "reviews"))
    second, _ = await fan_out(services, hook, "olive-second", ("default", "reviews"))
    await set_rules(
        services,
        hook.webhook_id,
        {
            "rules": [
                rule(
                    "one",
                    "true",
                    {
                        "type": "queue",
                        "queue": "reviews",
                        "endpoints": [first.slug, second.slug],
                        "exclusive": True,
                    },
                )
            ]
        },
    )
    status, answer = await deliver(base_url, hook, "issues/opened")
    assert [t["endpoint"] for t in answer["todos"]] == [first.slug], answer
    # The first endpoint (still active) loses the queue: the work must not move to the second.
    await set_queues(services, first.id, ["default"])
    status, answer = await deliver(base_url, hook, "pull_request/opened")
    assert status == 202
    assert answer["disposition"] == "faulted" and answer["todos"] == [], answer
    [held] = await todos_of(services, (await newest_event(services, hook.webhook_id)).id)
    assert held.queue == HOLD_QUEUE and held.hold_reason == "rule_fault"
