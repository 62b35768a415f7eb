"""The slack provider's outbound half, called directly against a stand-in Slack Web API over TLS."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import switchboard_slack as slack

from switchboard.sdk import MARKER_EVENT_TYPE, ConnectionCheck, HttpClient, ReplyPost
from switchboard.testing import FakeProvider, Scripted, guarded_client, slack_address

REPLY_ID = "rp_01jdcccccccccccccccccccccc"


@pytest.fixture
def fake(fake_slack: FakeProvider) -> FakeProvider:
    """The stand-in Slack from switchboard.testing's pytest plugin."""
    return fake_slack


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = guarded_client(allow_http=False)
    yield client
    await client.close()


def post_of(http: HttpClient, fake: FakeProvider, **fields: str) -> ReplyPost:
    address = slack_address(**fields)
    return ReplyPost(
        http,
        "slack",
        "T0TEST",
        "xoxb-1",
        address,
        "On it.",
        REPLY_ID,
        {"SWITCHBOARD_SLACK_API_URL": f"{fake.base_url}/api"},
    )


def test_connection_kind_rules() -> None:
    kind = slack.CONNECTION
    assert kind.text_limit == 40_000 and kind.normalize_account_key(" t0abc ") == "T0ABC"
    with pytest.raises(ValueError):
        kind.normalize_account_key("https://acme.slack.com")
    assert kind.account_matches("T0TEST", slack_address())
    assert not kind.account_matches("T0OTHER", slack_address())
    assert kind.target_of(slack_address(channel="C9")) == "C9"


async def test_posts_into_the_thread_with_the_marker(http: HttpClient, fake: FakeProvider) -> None:
    result = await slack.post(post_of(http, fake))
    assert result.state == "sent" and result.object_id == "C0456:1726990001.000100"
    assert result.permalink == "https://acme.slack.com/archives/C0456/p1726990001.000100"
    post, link = fake.requests
    assert (post.path, post.auth) == ("/api/chat.postMessage", "Bearer xoxb-1")
    assert post.json["metadata"] == {"event_type": MARKER_EVENT_TYPE, "event_payload": {"reply_id": REPLY_ID}}
    assert (link.path, link.query) == (
        "/api/chat.getPermalink",
        {"channel": "C0456", "message_ts": "1726990001.000100"},
    )


@pytest.mark.parametrize(
    ("error", "error_class"),
    [
        ("invalid_auth", "auth"),
        ("channel_not_found", "not_found"),
        ("not_in_channel", "forbidden"),
        ("msg_too_long", "invalid"),
        ("internal_error", "server"),
        ("service_unavailable", "server"),
        ("<script>", "invalid"),
    ],
)
async def test_ok_false_is_a_failure(
    http: HttpClient, fake: FakeProvider, error: str, error_class: str
) -> None:
    fake.script("POST", "/api/chat.postMessage", Scripted(200, {"ok": False, "error": error}))
    result = await slack.post(post_of(http, fake))
    # Slack says internal_error may have left part of the call done: the post may exist.
    state = "unknown" if error == "internal_error" else "failed"
    assert (result.state, result.error_class) == (state, error_class)
    assert result.error_code == (error if error.isidentifier() else "unknown_error")


async def test_429_carries_retry_after(http: HttpClient, fake: FakeProvider) -> None:
    fake.script("POST", "/api/chat.postMessage", Scripted(429, {"ok": False}, {"Retry-After": "20"}))
    result = await slack.post(post_of(http, fake))
    assert (result.error_class, result.retry_after, result.retryable) == ("rate_limited", 20.0, True)


async def test_a_lost_permalink_does_not_unsend(http: HttpClient, fake: FakeProvider) -> None:
    fake.script("GET", "/api/chat.getPermalink", Scripted(500, {"ok": False}))
    result = await slack.post(post_of(http, fake))
    assert (result.state, result.permalink) == ("sent", None)


async def test_bad_thread_never_dials(http: HttpClient, fake: FakeProvider) -> None:
    result = await slack.post(post_of(http, fake, thread="1726990000"))
    assert (result.state, result.error_code) == ("failed", "bad_address") and fake.requests == []


async def test_auth_test_records_the_bot(http: HttpClient, fake: FakeProvider) -> None:
    check = ConnectionCheck(
        http, "slack", "T0TEST", "xoxb-1", {"SWITCHBOARD_SLACK_API_URL": f"{fake.base_url}/api"}
    )
    result = await slack.CONNECTION.test(check)
    assert result.ok and result.facts == {"bot_id": "B0BOT", "user_id": "U0BOT", "team_id": "T0TEST"}
