"""The plain source kind's callables, called directly: verification, titles, delivery keys, the
reply address and echo clues."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import switchboard_plain as plain
from hypothesis import given, settings
from hypothesis import strategies as st
from plain_kit import (
    HUMAN_USER,
    MACHINE_USER,
    SIGNING_SECRET,
    THREAD,
    WORKSPACE,
    encode,
    event,
    plain_headers,
    rfc3339,
    sent_by_machine_user,
)

from switchboard.sdk import Delivery, EchoClues, Verdict

NOW = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def deliver(
    payload: dict[str, Any], *, secret: str | None = SIGNING_SECRET, at: datetime = NOW, **headers: str
) -> Delivery:
    body = encode(payload)
    return Delivery("plain", {**plain_headers(SIGNING_SECRET, body), **headers}, body, at, secret)


def verified(payload: dict[str, Any]) -> tuple[Delivery, Verdict]:
    delivery = deliver(payload)
    verdict = plain.verify(delivery)
    assert verdict.ok, verdict.detail
    return delivery, verdict


def test_a_customer_email_verifies_with_its_id_title_and_address() -> None:
    payload = event(at=NOW)
    delivery, verdict = verified(payload)
    assert verdict.event == "thread.email_received" and verdict.delivery_key == payload["id"]
    assert verdict.title == "Plain email received — Can't log in (Peter Santos)"
    address = plain.derive_address(delivery, verdict)
    assert address is not None and address.as_dict() == {
        "kind": "plain_thread",
        "provider": "plain",
        "display": f"plain {WORKSPACE} thread {THREAD}",
        "workspace_id": WORKSPACE,
        "thread_id": THREAD,
    }
    # A customer's message is nobody's echo.
    assert plain.echo_clues(delivery, verdict) == EchoClues()


def test_every_thread_event_addresses_its_thread() -> None:
    for name in ("thread.thread_created", "thread.chat_received", "thread.note_created", "thread.email_sent"):
        delivery, verdict = verified(event(name, at=NOW))
        address = plain.derive_address(delivery, verdict)
        assert address is not None and address.display == f"plain {WORKSPACE} thread {THREAD}"


def test_a_message_our_machine_user_sent_names_it_as_the_bot() -> None:
    delivery, verdict = verified(sent_by_machine_user("On it.", at=NOW))
    assert plain.echo_clues(delivery, verdict) == EchoClues(bot_id=MACHINE_USER)


@pytest.mark.parametrize(
    ("name", "sender"),
    [
        ("thread.email_sent", {"actorType": "user", "userId": HUMAN_USER}),
        ("thread.email_sent", {"actorType": "machineUser", "machineUserId": "mu_not-an-id"}),
        ("thread.email_sent", "machineUser"),
        ("thread.email_received", {"actorType": "machineUser", "machineUserId": MACHINE_USER}),
    ],
)
def test_no_bot_clue_unless_a_machine_user_sent_it(name: str, sender: Any) -> None:
    delivery, verdict = verified(event(name, at=NOW, sender=sender))
    assert plain.echo_clues(delivery, verdict) == EchoClues()


def test_the_envelope_type_or_its_repeat_names_the_event() -> None:
    payload = event(at=NOW)
    del payload["type"]
    assert plain.verify(deliver(payload)).event == "thread.email_received"
    payload["payload"]["eventType"] = "Thread Created!"
    assert plain.verify(deliver(payload)).event == "unknown"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"Plain-Request-Signature": ""}, "missing"),
        ({"Plain-Request-Signature": "00" * 32}, "mismatch"),
        ({"Plain-Request-Signature": "sha256=" + "00" * 32}, "mismatch"),
    ],
)
def test_bad_signatures_are_refused(change: dict[str, str], reason: str) -> None:
    verdict = plain.verify(deliver(event(at=NOW), **change))
    assert not verdict.ok and verdict.error == "signature_invalid" and reason in verdict.detail


def test_another_secret_upper_case_hex_and_no_secret_are_refused() -> None:
    payload = event(at=NOW)
    body = encode(payload)
    upper = plain_headers(SIGNING_SECRET, body)["Plain-Request-Signature"].upper()
    assert not plain.verify(deliver(payload, **{"Plain-Request-Signature": upper})).ok
    other = plain_headers("another-secret", body)["Plain-Request-Signature"]
    assert not plain.verify(deliver(payload, **{"Plain-Request-Signature": other})).ok
    unsigned = Delivery("plain", plain_headers("", body), body, NOW, None)
    assert "no signing secret" in plain.verify(unsigned).detail


@pytest.mark.parametrize(
    ("timestamp", "ok"),
    [
        (rfc3339(NOW - timedelta(seconds=299)), True),
        (rfc3339(NOW + timedelta(seconds=299)), True),
        (rfc3339(NOW - timedelta(seconds=301)), False),
        (rfc3339(NOW + timedelta(seconds=301)), False),
        ("2026-11-30T10:00:00", False),  # no zone
        (int(NOW.timestamp()), False),
        (None, False),
        ("9999-12-31T23:59:59Z", False),
    ],
)
def test_the_timestamp_window(timestamp: object, ok: bool) -> None:
    payload = event(at=NOW)
    payload["timestamp"] = timestamp
    verdict = plain.verify(deliver(payload))
    assert verdict.ok is ok
    if not ok:
        assert "300 s" in verdict.detail


def test_a_signed_body_that_is_not_an_object_is_a_bad_body() -> None:
    body = b'"thread.email_received"'
    verdict = plain.verify(Delivery("plain", plain_headers(SIGNING_SECRET, body), body, NOW, SIGNING_SECRET))
    assert not verdict.ok and verdict.error == "invalid_body"


@pytest.mark.parametrize("event_id", [None, "", "evt 1", "x" * 101, 12])
def test_an_unusable_event_id_leaves_the_key_to_the_core(event_id: object) -> None:
    payload = event(at=NOW)
    payload["id"] = event_id
    verdict = plain.verify(deliver(payload))
    assert verdict.ok and verdict.delivery_key is None


@pytest.mark.parametrize(
    "change",
    [
        {"workspaceId": "w_01fxq6a83fxnn9xa00415vr1xp"},
        {"workspaceId": "acme"},
        {"workspaceId": None},
        {"type": "customer.customer_created"},
    ],
)
def test_no_address_unless_every_field_is_exact(change: dict[str, Any]) -> None:
    payload = {**event(at=NOW), **change}
    if "type" in change:
        payload["payload"]["eventType"] = change["type"]
    delivery, verdict = verified(payload)
    assert plain.derive_address(delivery, verdict) is None


@pytest.mark.parametrize("thread", ["th_short", f"{THREAD}/x", THREAD.lower(), 7, None])
def test_a_thread_id_that_is_not_exact_gives_no_address(thread: object) -> None:
    payload = event(at=NOW)
    payload["payload"]["thread"]["id"] = thread
    delivery, verdict = verified(payload)
    assert plain.derive_address(delivery, verdict) is None


HEADER_TEXT = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), max_size=40),
    st.binary(max_size=80).map(lambda b: b.decode("utf-8", errors="surrogateescape")),
)


@settings(max_examples=200, deadline=None)
@given(signature=HEADER_TEXT)
def test_garbage_signature_headers_are_a_refusal_never_a_raise(signature: str) -> None:
    verdict = plain.verify(deliver(event(at=NOW), **{"Plain-Request-Signature": signature}))
    assert not verdict.ok and verdict.error == "signature_invalid"


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=200))
def test_any_signed_body_is_a_verdict_never_a_raise(body: bytes) -> None:
    delivery = Delivery("plain", plain_headers(SIGNING_SECRET, body), body, NOW, SIGNING_SECRET)
    verdict = plain.verify(delivery)
    if verdict.ok:
        assert plain.derive_address(delivery, verdict) is None
        assert isinstance(plain.echo_clues(delivery, verdict), EchoClues)
