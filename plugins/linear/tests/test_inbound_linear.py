"""The linear source kind's callables, called directly: verification, titles, delivery keys, the
reply address and echo clues."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import switchboard_linear as linear
from hypothesis import given, settings
from hypothesis import strategies as st
from linear_kit import ISSUE, ORG, SIGNING_SECRET, comment_event, encode, issue_event, linear_headers

from switchboard.sdk import Delivery, EchoClues, Verdict

NOW = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
DELIVERY_ID = "0c6e1a5e-3b0f-4d8e-9a1c-7f2e4b6d8a0c"


def deliver(
    payload: dict[str, Any], *, secret: str | None = SIGNING_SECRET, at: datetime = NOW, **headers: str
) -> Delivery:
    body = encode(payload)
    signed = linear_headers(SIGNING_SECRET, body, DELIVERY_ID, str(payload.get("type")))
    return Delivery("linear", {**signed, **headers}, body, at, secret)


def verified(payload: dict[str, Any]) -> tuple[Delivery, Verdict]:
    delivery = deliver(payload)
    verdict = linear.verify(delivery)
    assert verdict.ok, verdict.detail
    return delivery, verdict


def test_an_issue_verifies_with_its_delivery_id_title_and_address() -> None:
    delivery, verdict = verified(issue_event(at_ms=NOW_MS))
    assert verdict.event == "Issue.create" and verdict.delivery_key == DELIVERY_ID
    assert verdict.title == "Linear ENG-42 created — Login fails with SSO"
    assert not verdict.ignore and verdict.respond is None
    address = linear.derive_address(delivery, verdict)
    assert address is not None and address.as_dict() == {
        "kind": "linear_comment",
        "provider": "linear",
        "display": f"linear {ORG} issue {ISSUE}",
        "organization_id": ORG,
        "issue_id": ISSUE,
    }
    assert linear.echo_clues(delivery, verdict) == EchoClues()


def test_a_comment_has_the_same_thread_as_its_issue_and_names_its_id() -> None:
    comment_id = "5d7c9e1f-2a4b-4c6d-8e0f-1a2b3c4d5e6f"
    delivery, verdict = verified(comment_event("Is this fixed?", comment=comment_id, at_ms=NOW_MS))
    assert verdict.event == "Comment.create"
    assert verdict.title == "Linear comment created on Login fails with SSO — Is this fixed?"
    address = linear.derive_address(delivery, verdict)
    _, issue_verdict = verified(issue_event(at_ms=NOW_MS))
    issue_address = linear.derive_address(delivery, issue_verdict)
    # The display is the echo thread key: the comment's and the issue's must be the same.
    assert address is not None and issue_address is not None and address.display == issue_address.display
    assert linear.echo_clues(delivery, verdict) == EchoClues(object_ids=(comment_id,))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"Linear-Signature": ""}, "missing"),
        ({"Linear-Signature": "deadbeef"}, "mismatch"),
        ({"Linear-Signature": "sha256=00"}, "mismatch"),
    ],
)
def test_bad_signatures_are_refused(change: dict[str, str], reason: str) -> None:
    verdict = linear.verify(deliver(issue_event(at_ms=NOW_MS), **change))
    assert not verdict.ok and verdict.error == "signature_invalid" and reason in verdict.detail


def test_upper_case_hex_and_another_secret_are_refused() -> None:
    payload = issue_event(at_ms=NOW_MS)
    body = encode(payload)
    upper = linear_headers(SIGNING_SECRET, body)["Linear-Signature"].upper()
    assert not linear.verify(deliver(payload, **{"Linear-Signature": upper})).ok
    other = linear_headers("another-secret", body)["Linear-Signature"]
    assert not linear.verify(deliver(payload, **{"Linear-Signature": other})).ok


def test_without_a_secret_nothing_verifies() -> None:
    # An empty key would let anyone sign: a webhook whose secret was never pasted refuses everything.
    payload = issue_event(at_ms=NOW_MS)
    body = encode(payload)
    headers = linear_headers("", body)
    verdict = linear.verify(Delivery("linear", headers, body, NOW, None))
    assert not verdict.ok and "no signing secret" in verdict.detail


@pytest.mark.parametrize(
    ("at_ms", "ok"),
    [
        (NOW_MS, True),
        (NOW_MS - 59_000, True),
        (NOW_MS + 59_000, True),
        (NOW_MS - 61_000, False),
        (NOW_MS + 61_000, False),
        (str(NOW_MS), True),
        (NOW_MS // 1000, False),  # seconds, not milliseconds: 1970
        (None, False),
        ("soon", False),
        (True, False),
        (1e300, False),
        (-1, False),
    ],
)
def test_the_webhook_timestamp_window(at_ms: object, ok: bool) -> None:
    payload = issue_event(at_ms=NOW_MS)
    payload["webhookTimestamp"] = at_ms
    verdict = linear.verify(deliver(payload))
    assert verdict.ok is ok
    if not ok:
        assert "60 s" in verdict.detail and verdict.error == "signature_invalid"


def test_a_signed_body_that_is_not_an_object_is_a_bad_body() -> None:
    body = b"[1, 2]"
    delivery = Delivery("linear", linear_headers(SIGNING_SECRET, body), body, NOW, SIGNING_SECRET)
    verdict = linear.verify(delivery)
    assert not verdict.ok and verdict.error == "invalid_body"


@pytest.mark.parametrize("value", ["", "not a uuid!", "x" * 101, "ü-delivery"])
def test_an_unusable_delivery_id_leaves_the_key_to_the_core(value: str) -> None:
    verdict = linear.verify(deliver(issue_event(at_ms=NOW_MS), **{"Linear-Delivery": value}))
    assert verdict.ok and verdict.delivery_key is None


def test_event_names_are_linear_words_or_unknown() -> None:
    payload = issue_event(at_ms=NOW_MS)
    payload["type"], payload["action"] = "Issue<script>", {"x": 1}
    verdict = linear.verify(deliver(payload))
    assert verdict.ok and verdict.event == "unknown.unknown"


@pytest.mark.parametrize(
    "change",
    [
        {"action": "remove"},
        {"type": "Project"},
        {"type": "Reaction"},
        {"organizationId": ORG.upper()},
        {"organizationId": "acme"},
        {"organizationId": None},
        {"data": "not an object"},
    ],
)
def test_no_address_unless_every_field_is_exact(change: dict[str, Any]) -> None:
    payload = {**issue_event(at_ms=NOW_MS), **change}
    delivery, verdict = verified(payload)
    assert linear.derive_address(delivery, verdict) is None


@pytest.mark.parametrize("issue", ["ENG-42", ISSUE.upper(), f"{ISSUE}/../x", 42, None])
def test_a_comment_without_an_exact_issue_id_has_no_address(issue: object) -> None:
    payload = comment_event("hi", at_ms=NOW_MS)
    payload["data"]["issueId"] = issue
    delivery, verdict = verified(payload)
    assert linear.derive_address(delivery, verdict) is None


def test_a_comment_id_that_is_not_a_uuid_is_no_clue() -> None:
    payload = comment_event("hi", comment="12345", at_ms=NOW_MS)
    delivery, verdict = verified(payload)
    assert linear.echo_clues(delivery, verdict) == EchoClues()


HEADER_TEXT = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), max_size=40),
    st.binary(max_size=80).map(lambda b: b.decode("utf-8", errors="surrogateescape")),
)


@settings(max_examples=200, deadline=None)
@given(signature=HEADER_TEXT, delivery_id=HEADER_TEXT)
def test_garbage_headers_are_a_refusal_never_a_raise(signature: str, delivery_id: str) -> None:
    payload = issue_event(at_ms=NOW_MS)
    verdict = linear.verify(
        deliver(payload, **{"Linear-Signature": signature, "Linear-Delivery": delivery_id})
    )
    assert not verdict.ok and verdict.error == "signature_invalid"


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=200))
def test_any_signed_body_is_a_verdict_never_a_raise(body: bytes) -> None:
    delivery = Delivery("linear", linear_headers(SIGNING_SECRET, body), body, NOW, SIGNING_SECRET)
    verdict = linear.verify(delivery)
    if verdict.ok:
        assert linear.derive_address(delivery, verdict) is None
        assert isinstance(linear.echo_clues(delivery, verdict), EchoClues)


def test_the_window_is_checked_against_arrival_not_the_clock() -> None:
    # A delivery that waited in a queue is judged by when it reached Switchboard.
    verdict = linear.verify(deliver(issue_event(at_ms=NOW_MS), at=NOW + timedelta(seconds=30)))
    assert verdict.ok
