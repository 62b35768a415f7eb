"""Bundled providers' verifiers and delivery keys at their edges: a Stripe header listing many
signatures costs one HMAC, a generic delivery id is never cut (two ids sharing a long prefix are two
deliveries), and a signed body that is JSON but not an object is refused for every signed kind."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import UTC, datetime

import pytest

from switchboard import plugins
from switchboard.provider import Delivery
from switchboard.services import Services
from switchboard.testing import (
    cairn_headers,
    counts,
    events,
    gitea_headers,
    github_headers,
    hexmac,
    make_webhook,
    post,
    slack_headers,
    stripe_headers,
)

SECRET = "whsec_review_stripe"


# ---------------------------------------------------------------------------------------------
# Stripe: a Stripe-Signature header with many v1 entries makes the verifier hash the whole body
# once per entry, on the event loop. Stripe's own libraries compute the expected signature once
# and compare it with each v1; the cost of a refusal must not grow with what the sender lists.


def _count_body_hashes(monkeypatch: pytest.MonkeyPatch, body: bytes) -> list[int]:
    """Count the HMACs computed over a message that holds ``body``."""
    seen: list[int] = []
    real_new = hmac.new

    def counting(key: bytes, msg: bytes | None = None, digestmod=None):  # type: ignore[no-untyped-def]
        if msg is not None and len(msg) >= len(body):
            seen.append(len(msg))
        return real_new(key, msg, digestmod)

    monkeypatch.setattr(hmac, "new", counting)
    return seen


def test_stripe_hashes_the_body_once_whatever_the_number_of_v1_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = json.dumps({"id": "evt_1", "type": "charge.succeeded", "pad": "x" * (1024 * 1024)}).encode()
    ts = str(int(time.time()))
    # Fits in one header line (aiohttp's limit is 8190 bytes per field): ~1,600 candidates.
    header = f"t={ts}," + ",".join(["v1=a"] * 1600)
    seen = _count_body_hashes(monkeypatch, body)
    verdict = (
        plugins.load()
        .source("stripe")
        .verify(Delivery("stripe", {"Stripe-Signature": header}, body, datetime.now(UTC), SECRET))
    )
    assert not verdict.ok
    # One HMAC of the 1 MiB body, not one per listed v1 (that took seconds of the event loop's CPU).
    assert len(seen) <= 1, f"{len(seen)} HMACs over a {len(body)}-byte body for one delivery"


def test_stripe_rotation_with_two_v1_still_verifies_either() -> None:
    """During a secret roll Stripe lists a v1 for each secret: either may be the one that matches."""
    body = b'{"id": "evt_rot", "type": "charge.succeeded"}'
    ts = str(int(time.time()))
    good = hexmac(SECRET, ts.encode() + b"." + body)
    for header in (f"t={ts},v1={'0' * 64},v1={good}", f"t={ts},v1={good},v1={'0' * 64}"):
        verdict = (
            plugins.load()
            .source("stripe")
            .verify(Delivery("stripe", {"Stripe-Signature": header}, body, datetime.now(UTC), SECRET))
        )
        assert verdict.ok, header


# ---------------------------------------------------------------------------------------------
# Generic: the delivery key goes to the core as sent, which keeps a short printable key and hashes
# any other (``sanitize.delivery_key``). Cut to 200 characters by the provider, two ids sharing
# their first 199 were one delivery: the second was answered "duplicate" and made no todo.


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("evt-" + "a" * 250 + "-1", "evt-" + "a" * 250 + "-2"),  # long ids sharing a prefix
        ("order 17 shipped", "order 17  shipped"),  # ids that differ only in whitespace
    ],
    ids=["long", "whitespace"],
)
async def test_generic_distinct_delivery_ids_are_distinct_deliveries(
    services: Services, base_url: str, first: str, second: str
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    status, a, _ = await post(base_url, token, b'{"title": "first"}', {"X-Delivery-Id": first})
    assert status == 202 and a["disposition"] == "routed"
    status, b, _ = await post(base_url, token, b'{"title": "second"}', {"X-Delivery-Id": second})
    assert status == 202
    assert b["disposition"] == "routed" and b["created"] == 1, b
    assert await counts(services) == (2, 2)
    keys = {e.delivery_key for e in await events(services)}
    assert len(keys) == 2


async def test_generic_same_long_delivery_id_is_still_a_duplicate(services: Services, base_url: str) -> None:
    """The same long id twice is one delivery (the core hashes it)."""
    token, _, _ = await make_webhook(services, "generic")
    key = "evt-" + "b" * 300
    _, a, _ = await post(base_url, token, b'{"title": "x"}', {"webhook-id": key})
    _, b, _ = await post(base_url, token, b'{"title": "x, sent again"}', {"webhook-id": key})
    assert a["disposition"] == "routed"
    assert b["disposition"] == "duplicate" and b["todos"][0]["id"] == a["todos"][0]["id"]
    (event,) = await events(services)
    assert event.delivery_key == "key-sha256:" + hashlib.sha256(key.encode()).hexdigest()


def _signed_event(kind: str, secret: str, event_id: str, n: int) -> tuple[bytes, dict[str, str]]:
    """A signed Slack or Stripe event named ``event_id`` (the n-th message, so that Slack's second
    key, the message's channel and time, tells the two apart)."""
    if kind == "slack":
        event = {"type": "app_mention", "user": "U1", "text": "hi", "channel": "C1", "ts": f"1.{n}"}
        payload = {"type": "event_callback", "team_id": "T1", "event_id": event_id, "event": event}
        body = json.dumps(payload).encode()
        return body, slack_headers(secret, body)
    body = json.dumps({"id": event_id, "object": "event", "type": "invoice.paid", "data": {}}).encode()
    return body, stripe_headers(secret, body)


@pytest.mark.parametrize("kind", ["slack", "stripe"])
@pytest.mark.parametrize(
    ("first", "second"),
    [("Ev" + "a" * 250 + "1", "Ev" + "a" * 250 + "2"), ("Ev 17 a", "Ev 17  a")],
    ids=["long", "whitespace"],
)
async def test_signed_events_with_distinct_ids_are_distinct_deliveries(
    services: Services, base_url: str, kind: str, first: str, second: str
) -> None:
    """Slack and Stripe cut the event id to 200 characters (and folded its whitespace) before the
    core saw it, so two events whose ids differ only after that were one: the second was
    answered "duplicate" and made no todo. The core hashes a long key instead."""
    token, secret, _ = await make_webhook(services, kind)
    assert secret is not None
    for n, event_id in enumerate((first, second)):
        body, headers = _signed_event(kind, secret, event_id, n)
        status, answer, _ = await post(base_url, token, body, headers)
        assert status == 202 and answer["disposition"] == "routed", answer
    assert len({e.delivery_key for e in await events(services)}) == 2
    # The same event sent again is still its duplicate.
    body, headers = _signed_event(kind, secret, second, 1)
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 202 and answer["disposition"] == "duplicate", answer


# ---------------------------------------------------------------------------------------------
# A correctly signed body that is valid JSON but not an object: 400 invalid_body, nothing stored,
# for every signed kind.


def _signed(kind: str, secret: str, body: bytes) -> dict[str, str]:
    return {
        "github": lambda: github_headers(secret, body, "issues"),
        "gitea": lambda: gitea_headers(secret, body, "issues"),
        "slack": lambda: slack_headers(secret, body),
        "stripe": lambda: stripe_headers(secret, body),
        "cairn": lambda: cairn_headers(secret, body),
        "linear": lambda: {"Linear-Signature": hexmac(secret, body), "Linear-Delivery": "d-1"},
        "plain": lambda: {"Plain-Request-Signature": hexmac(secret, body)},
    }[kind]()


@pytest.mark.parametrize("kind", ["github", "gitea", "slack", "stripe", "cairn", "linear", "plain"])
async def test_signed_json_that_is_not_an_object_is_400_and_stores_nothing(
    services: Services, base_url: str, kind: str
) -> None:
    token, secret, _ = await make_webhook(services, kind)
    assert secret is not None
    for body in (b"[1, 2]", b"null", b'"text"', b"42", b"true", b"[{}]"):
        status, answer, _ = await post(base_url, token, body, _signed(kind, secret, body))
        assert status == 400 and answer["error"] == "invalid_body", (kind, body, status, answer)
    assert await counts(services) == (0, 0)
