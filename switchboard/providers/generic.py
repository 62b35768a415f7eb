"""generic: any sender. No signature; trust is the unguessable ingest URL (``trust_mode: token``).

A generic delivery never gets a reply address, even when it carries forge headers and a forge body:
its body is unverified, so an address parsed from it would let anyone holding the URL spend the
owner's credential on a target of their choosing (a confused deputy).
"""

from __future__ import annotations

from collections.abc import Callable

from switchboard.sdk import (
    ConnectionKind,
    Delivery,
    SourceKind,
    Verdict,
    header_value,
    hookimpl,
    json_object,
    no_address,
    no_echo_clues,
    one_line,
)

KIND = "generic"


def verify(delivery: Delivery) -> Verdict:
    payload = json_object(delivery.body)
    if payload is None:
        # Any bytes are accepted; a non-JSON body is kept as text for the agent.
        payload = {"body": delivery.body.decode("utf-8", errors="replace")}
    key = header_value(delivery.headers, "webhook-id", "X-Delivery-Id") or None
    event = delivery.headers.get("X-Event-Type") or "generic"
    title = payload.get("title") if isinstance(payload.get("title"), str) else None
    return Verdict(
        ok=True,
        detail="not verified (token trust)",
        payload=payload,
        event=one_line(event, 100),
        # As sent: the core keeps a short printable key and hashes any other. Cut here, two ids
        # sharing their first 199 characters (or differing only in spaces) were one delivery.
        delivery_key=key,
        title=one_line(title or f"Webhook delivery ({event})", 200),
    )


SOURCE = SourceKind(
    KIND,
    secret="none",
    verify=verify,
    # Never an address: see the module docstring.
    derive_address=no_address,
    echo_clues=no_echo_clues,
    description="Any sender; trusted by its unguessable URL.",
    # json_object's value is never edited: a body read as it came is not copied onto its todos.
    payload_is_body=True,
)


@hookimpl
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    register(SOURCE)
