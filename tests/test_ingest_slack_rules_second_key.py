"""Slack sends one message mentioning the app twice, as ``message`` and as ``app_mention``; the
message's second key (team, channel, ts) makes them one todo. A routing rule that picks one of the
two (the usual "only mentions become work") must still get its todo whichever arrives first: the
event a rule dropped made no todo, so it must not fold the other into a duplicate of nothing."""

from __future__ import annotations

from fixtures.ingest_kit import fixture_bytes

from switchboard.intake_config import Caller, set_rules
from switchboard.services import Services
from switchboard.testing import counts, make_webhook, post, slack_headers

MENTIONS_ONLY = {
    "rules": [
        {
            "id": "mentions",
            "expr": '.event == "event_callback.app_mention"',
            "action": {"type": "queue"},
        }
    ],
    "default_action": {"type": "drop"},
}


async def test_a_mention_after_its_dropped_message_event_still_makes_its_todo(
    services: Services, base_url: str
) -> None:
    token, secret, webhook_id = await make_webhook(services, "slack")
    await set_rules(services, Caller.cli(), webhook_id, MENTIONS_ONLY)
    message, mention = fixture_bytes("slack/message.json"), fixture_bytes("slack/app_mention.json")

    status, first, _ = await post(base_url, token, message, slack_headers(secret, message))
    assert status == 202 and first["disposition"] == "dropped", first

    status, second, _ = await post(base_url, token, mention, slack_headers(secret, mention))
    assert status == 202
    assert second["disposition"] == "routed" and second["created"] == 1, second
    assert await counts(services) == (2, 1)

    # Slack's retries of either are still duplicates of what they were.
    _, again, _ = await post(base_url, token, mention, slack_headers(secret, mention))
    assert again["disposition"] == "duplicate" and again["todos"] == [
        {**t, "created": False} for t in second["todos"]
    ]
    _, again, _ = await post(base_url, token, message, slack_headers(secret, message))
    assert again["disposition"] == "duplicate" and again["todos"] == []
    assert await counts(services) == (2, 1)


async def test_a_message_after_its_routed_mention_is_still_one_todo(
    services: Services, base_url: str
) -> None:
    token, secret, webhook_id = await make_webhook(services, "slack")
    await set_rules(services, Caller.cli(), webhook_id, MENTIONS_ONLY)
    message, mention = fixture_bytes("slack/message.json"), fixture_bytes("slack/app_mention.json")

    _, first, _ = await post(base_url, token, mention, slack_headers(secret, mention))
    assert first["disposition"] == "routed" and first["created"] == 1, first
    _, second, _ = await post(base_url, token, message, slack_headers(secret, message))
    assert second["created"] == 0, second
    assert (await counts(services))[1] == 1


MENTIONS_ELSE_QUARANTINE = {**MENTIONS_ONLY, "default_action": {"type": "quarantine"}}


async def test_a_mention_after_its_quarantined_message_event_still_makes_its_todo(
    services: Services, base_url: str
) -> None:
    """The same rule with "hold the rest for a look": the held ``message`` is no work either, so
    it must not fold the mention into itself (the mention would only ever reach the quarantine,
    and only when Slack happened to send the ``message`` first)."""
    token, secret, webhook_id = await make_webhook(services, "slack")
    await set_rules(services, Caller.cli(), webhook_id, MENTIONS_ELSE_QUARANTINE)
    message, mention = fixture_bytes("slack/message.json"), fixture_bytes("slack/app_mention.json")

    status, first, _ = await post(base_url, token, message, slack_headers(secret, message))
    assert status == 202 and first["disposition"] == "quarantined", first

    status, second, _ = await post(base_url, token, mention, slack_headers(secret, mention))
    assert status == 202
    assert second["disposition"] == "routed" and second["created"] == 1, second
    # Two events; the held message and the mention's todo.
    assert await counts(services) == (2, 2)

    # Slack's retries of either are still duplicates of what they were.
    _, again, _ = await post(base_url, token, mention, slack_headers(secret, mention))
    assert again["disposition"] == "duplicate" and again["todos"] == [
        {**t, "created": False} for t in second["todos"]
    ]
    _, again, _ = await post(base_url, token, message, slack_headers(secret, message))
    assert again["disposition"] == "duplicate" and again["todos"] == []
    assert await counts(services) == (2, 2)
