"""The slack provider's inbound hooks, called directly."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import switchboard_slack as slack

from switchboard.sdk import Delivery, EchoClues
from switchboard.testing import hexmac

FIXTURES = Path(__file__).parents[3] / "tests" / "fixtures" / "slack"
# The signing secret from Slack's "Verifying requests" documentation.
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def _body(name: str) -> bytes:
    return (FIXTURES / f"{name}.json").read_bytes()


def _delivery(body: bytes, ts: int | None = None, secret: str = SECRET, **extra: str) -> Delivery:
    now = datetime.now(UTC)
    stamp = str(int(now.timestamp()) if ts is None else ts)
    sig = hexmac(secret, b"v0:" + stamp.encode() + b":" + body)
    headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={sig}", **extra}
    return Delivery("slack", headers, body, now, SECRET)


def test_slacks_documented_example_verifies() -> None:
    """The worked example in Slack's request-signing documentation."""
    body = (
        b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
        b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
        b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmib"
        b"IGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
    )
    headers = {
        "X-Slack-Request-Timestamp": "1531420618",
        "X-Slack-Signature": "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
    }
    delivery = Delivery("slack", headers, body, datetime.fromtimestamp(1531420618 + 10, UTC), SECRET)
    verdict = slack.verify(delivery)
    # The signature is right; the slash-command form body is not an Events API JSON body.
    assert verdict.ok is False and verdict.error == "invalid_body"


@pytest.mark.parametrize("skew", [-301, 301])
def test_timestamps_outside_five_minutes_refuse(skew: int) -> None:
    body = _body("message")
    verdict = slack.verify(_delivery(body, int(datetime.now(UTC).timestamp()) + skew))
    assert not verdict.ok and "window" in verdict.detail


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Slack-Signature": ""},
        {"X-Slack-Signature": "v1=abc"},
        {"X-Slack-Signature": "v0="},
        {"X-Slack-Request-Timestamp": ""},
        {"X-Slack-Request-Timestamp": "12e3"},
        {"X-Slack-Request-Timestamp": "\uff11\uff12\uff13"},  # full-width digits
    ],
)
def test_malformed_headers_refuse(headers: dict[str, str]) -> None:
    delivery = _delivery(_body("message"))
    broken = Delivery("slack", {**delivery.headers, **headers}, delivery.body, delivery.received_at, SECRET)
    assert slack.verify(broken).ok is False


def test_message_keys_title_and_address() -> None:
    delivery = _delivery(_body("message"))
    verdict = slack.verify(delivery)
    assert verdict.delivery_key == "Ev0AAAAAAA01"
    assert verdict.secondary_key == "slack-message:T0123ABCD:C0456EFGH:1726990000.000100"
    mention = slack.verify(_delivery(_body("app_mention")))
    assert mention.secondary_key == verdict.secondary_key and mention.delivery_key != verdict.delivery_key
    assert slack.derive_address(delivery, verdict).fields == {
        "team_id": "T0123ABCD",
        "channel": "C0456EFGH",
        "thread_ts": "1726990000.000100",
    }


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("team_id",), "t0123"),
        (("event", "channel"), "C0456;DROP"),
        (("event", "channel"), None),
        (("event", "ts"), "1726990000"),
        (("event", "thread_ts"), "1726990000.000100 "),
        (("event", "thread_ts"), 1726990000.0001),
    ],
)
def test_any_invalid_slack_field_means_no_address(path: tuple[str, ...], value: object) -> None:
    payload = json.loads(_body("thread_reply"))
    target = payload
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    body = json.dumps(payload).encode()
    delivery = _delivery(body)
    verdict = slack.verify(delivery)
    assert verdict.ok and not verdict.ignore
    assert slack.derive_address(delivery, verdict) is None


@pytest.mark.parametrize("name", ["message_changed", "message_deleted", "channel_join"])
def test_housekeeping_is_ignored_without_a_message_key(name: str) -> None:
    delivery = _delivery(_body(name))
    verdict = slack.verify(delivery)
    assert verdict.ok and verdict.ignore and verdict.secondary_key is None
    assert slack.derive_address(delivery, verdict) is None


def test_url_verification_responds() -> None:
    verdict = slack.verify(_delivery(_body("url_verification")))
    assert verdict.ok and verdict.respond == {"challenge": json.loads(_body("url_verification"))["challenge"]}


def test_echo_clues_of_a_bot_post() -> None:
    payload = json.loads(_body("bot_reply"))
    payload["event"]["metadata"]["event_payload"]["reply_id"] = "rp_01jdq9a0b1c2d3e4f5g6h7j8k9"
    body = json.dumps(payload).encode()
    delivery = _delivery(body)
    assert slack.echo_clues(delivery, slack.verify(delivery)) == EchoClues(
        object_ids=("C0456EFGH:1726990500.000600",),
        marker="rp_01jdq9a0b1c2d3e4f5g6h7j8k9",
        bot_id="B0SWITCH1",
    )
    payload["event"]["metadata"]["event_type"] = "something_else"
    body = json.dumps(payload).encode()
    delivery = _delivery(body)
    assert slack.echo_clues(delivery, slack.verify(delivery)).marker is None
