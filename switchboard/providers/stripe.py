"""stripe: ``Stripe-Signature: t=…,v1=…`` over ``"{t}.{body}"``; the owner pastes Stripe's ``whsec_``.

Stripe events are not conversations, so they never get a reply address.
"""

from __future__ import annotations

from collections.abc import Callable

from switchboard.sdk import (
    ConnectionKind,
    Delivery,
    SourceKind,
    Verdict,
    hmac_sha256_hex,
    hookimpl,
    json_object,
    no_address,
    no_echo_clues,
    one_line,
    same,
    timestamp_within,
)

KIND = "stripe"
TOLERANCE_SECONDS = 300


def verify(delivery: Delivery) -> Verdict:
    header = delivery.headers.get("Stripe-Signature", "")
    timestamp, candidates = None, []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            timestamp = value
        elif name == "v1" and value:
            candidates.append(value)
    if not header.strip() or timestamp is None or not candidates:
        return Verdict.refuse("signature missing or malformed")
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        return Verdict.refuse("timestamp malformed")
    if not timestamp_within(timestamp, delivery.received_at, TOLERANCE_SECONDS):
        return Verdict.refuse("timestamp outside the 300 s window")
    # One HMAC over the body however many v1 entries the sender lists (as Stripe's own libraries
    # do): one per entry let a header of a thousand entries cost seconds of the server's CPU.
    # Every candidate is compared (no early exit), so timing says nothing about which one matched.
    expected = hmac_sha256_hex(delivery.secret or "", timestamp.encode() + b"." + delivery.body)
    matched = [same(expected, c) for c in candidates]
    if not any(matched):
        return Verdict.refuse("signature mismatch")
    payload = json_object(delivery.body)
    if payload is None:
        return Verdict.bad_body("body is not a JSON object")
    event_id = payload.get("id")
    event_type = payload.get("type")
    if not isinstance(event_type, str):
        event_type = "event"
    return Verdict(
        ok=True,
        detail="v1 signature ok",
        payload=payload,
        event=one_line(event_type, 100),
        delivery_key=event_id if isinstance(event_id, str) and event_id else None,
        title=one_line(f"Stripe {event_type}" + (f" ({event_id})" if isinstance(event_id, str) else ""), 200),
    )


SOURCE = SourceKind(
    KIND,
    secret="provider",
    verify=verify,
    derive_address=no_address,
    echo_clues=no_echo_clues,
    description="Stripe events (secret from the dashboard).",
    # json_object's value is never edited: a body read as it came is not copied onto its todos.
    payload_is_body=True,
)


@hookimpl
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    register(SOURCE)
