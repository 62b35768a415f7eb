"""Stored delivery headers are an allowlist (issue 13, item 15): a sender's credential under a name
no rule foresaw (X-Webhook-Key, X-Access-Key, X-Shopify-Hmac-Sha256) is never stored, while the
transport and delivery-metadata headers an operator needs stay readable."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from switchboard.sanitize import REDACTED, clean_line, redact_headers
from switchboard.services import Services
from switchboard.testing import events, make_webhook, post

CREDENTIALS = {
    "X-Webhook-Key": "whk_9f8e7d6c5b4a39281706",
    "X-Access-Key": "AK-51c0ffee-7d1e-4b2a",
    "X-Shopify-Hmac-Sha256": "Hk3vYtq0eL1lPzXc0z9sQm8VbW2yN4rT6uJ5iO7pA1s=",
    "X-Api-Key": "ak_live_0123456789abcdef",
    "X-Gitlab-Token": "glwt-0123456789",
    "X-Custom-Auth": "s3cr3t-value-0001",
    "Proxy-Authorization": "Basic dXNlcjpwYXNz",
    "X-Partner-Credential": "cred-7777-8888",
}
METADATA = {
    "Content-Type": "application/json",
    "User-Agent": "Shopify-Captain-Hook",
    "X-Shopify-Topic": "orders/create",
    "X-Shopify-Webhook-Id": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
    "X-Event-Type": "order.created",
    "X-Delivery-Id": "dlv-0001",
    "X-GitHub-Event": "issues",
    "X-Request-Id": "req-42",
}


def test_the_issues_names_and_unknown_headers_keep_only_their_names() -> None:
    stored = redact_headers({**CREDENTIALS, **METADATA, "X-Anything-Else": "value"})
    for name in CREDENTIALS:
        assert stored[name] == REDACTED, name
    assert stored["X-Anything-Else"] == REDACTED
    for name, value in METADATA.items():
        assert stored[name] == value, name


def test_a_credential_shaped_value_under_a_kept_name_is_not_kept() -> None:
    stored = redact_headers({"X-Event-Type": "Bearer sbk_0123456789", "X-Request-Id": "token abcdef"})
    assert stored == {"X-Event-Type": REDACTED, "X-Request-Id": REDACTED}


def test_a_denied_word_wins_over_a_kept_suffix() -> None:
    stored = redact_headers({"X-Secret-Event": "hunter2", "X-Token-Delivery-Id": "abc", "X-Key-Topic": "k"})
    assert stored["X-Secret-Event"] == REDACTED and stored["X-Token-Delivery-Id"] == REDACTED
    # "key" is not on the deny list, but a *-topic header is metadata by its last word.
    assert stored["X-Key-Topic"] == "k"


TRANSPORT = {"accept", "accept-encoding", "content-encoding", "content-length", "content-type", "host"}
TRANSPORT |= {"user-agent", "traceparent", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto"}
TRANSPORT |= {"x-real-ip", "x-slack-retry-reason"}
METADATA_END = re.compile(r"(event|type|id|uuid|topic|delivery|num|timestamp|at|domain|instance)$")


def _plain(name: str) -> bool:
    """A name (as stored) that ends in none of the metadata words and is not a transport header."""
    stored = clean_line(name, 100).lower()
    return not METADATA_END.search(stored) and stored not in TRANSPORT


_PLAIN_NAMES = st.text(min_size=1, max_size=30).filter(_plain)


@settings(deadline=None, max_examples=60)
@given(headers=st.dictionaries(_PLAIN_NAMES, st.text(max_size=50), max_size=10))
def test_a_header_off_the_allowlist_never_keeps_its_value(headers: dict[str, str]) -> None:
    stored = redact_headers(headers)
    assert set(stored.values()) <= {REDACTED}
    json.dumps(stored).encode()


async def test_a_generic_webhook_stores_no_credential_header(services: Services, base_url: str) -> None:
    token, _, _ = await make_webhook(services, "generic")
    body = json.dumps({"order": 1}).encode()
    status, _, _ = await post(base_url, token, body, {**CREDENTIALS, **METADATA})
    assert status == 202
    (event,) = await events(services)
    stored = {k.lower(): v for k, v in event.headers.items()}
    for name in CREDENTIALS:
        assert stored[name.lower()] == REDACTED, name
    assert stored["x-shopify-topic"] == "orders/create" and stored["x-event-type"] == "order.created"
    dumped = json.dumps(event.headers)
    for value in CREDENTIALS.values():
        assert value not in dumped
