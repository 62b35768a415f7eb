"""Who a verified Plain delivery names (docs/sources/plain.md, "Trusted actors"), by id: the
``createdBy`` of the event's message; hostile bodies never make ``actors`` raise."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import switchboard_plain as plain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plain_kit import (
    HUMAN_USER,
    MACHINE_USER,
    SIGNING_SECRET,
    encode,
    event,
    plain_headers,
    sent_by_machine_user,
)

from switchboard.sdk import Actors, Delivery, TrustSpec, Verdict

NOW = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
CUSTOMER = "c_01HD44FHDPG82VQ4QNHDR4N2T0"


def _verified(payload: dict[str, Any]) -> tuple[Delivery, Verdict]:
    body = encode(payload)
    delivery = Delivery("plain", plain_headers(SIGNING_SECRET, body), body, NOW, SIGNING_SECRET)
    verdict = plain.verify(delivery)
    assert verdict.ok, verdict.detail
    return delivery, verdict


def test_the_kind_declares_exact_actor_ids() -> None:
    assert plain.SOURCE.actors is plain.actors
    assert plain.SOURCE.trust == TrustSpec(
        field="actor_ids", label="Plain actor id", case_insensitive=False, matches=("sender",)
    )


@pytest.mark.parametrize(
    ("payload", "sender"),
    [
        (event(at=NOW), CUSTOMER),
        (event("thread.email_sent", at=NOW, sender={"actorType": "user", "userId": HUMAN_USER}), HUMAN_USER),
        (sent_by_machine_user("done", at=NOW), MACHINE_USER),
        # A system actor has no id; an actor type Plain may add later names nobody until read.
        (event(at=NOW, sender={"actorType": "system", "system": "email_inbound_handler"}), None),
        (event(at=NOW, sender={"actorType": "customer", "userId": HUMAN_USER}), None),
    ],
)
def test_the_messages_creator_is_the_sender(payload: dict[str, Any], sender: str | None) -> None:
    delivery, verdict = _verified(payload)
    assert plain.actors(delivery, verdict) == Actors(sender, ())


def test_a_created_thread_names_its_creator() -> None:
    payload = event("thread.thread_created", at=NOW)
    payload["payload"]["thread"]["createdBy"] = {"actorType": "customer", "customerId": CUSTOMER}
    delivery, verdict = _verified(payload)
    assert plain.actors(delivery, verdict) == Actors(CUSTOMER, ())


def test_events_without_a_message_name_nobody() -> None:
    """A status change names no actor in its body; a customer event's ``createdBy`` made the customer."""
    status = event("thread.thread_status_transitioned", at=NOW)
    status["payload"]["thread"]["createdBy"] = {"actorType": "customer", "customerId": CUSTOMER}
    delivery, verdict = _verified(status)
    assert plain.actors(delivery, verdict) == Actors()
    customer = event("customer.customer_updated", at=NOW)
    customer["payload"] = {
        "customer": {"id": CUSTOMER, "createdBy": {"actorType": "user", "userId": HUMAN_USER}}
    }
    delivery, verdict = _verified(customer)
    assert plain.actors(delivery, verdict) == Actors()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=120),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
actors_json = st.fixed_dictionaries(
    {"actorType": st.one_of(st.sampled_from(["customer", "user", "machineUser", "system"]), json_values)},
    optional={"customerId": json_values, "userId": json_values, "machineUserId": json_values},
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["thread.email_received", "thread.thread_created", "customer.customer_created"]),
    inner=st.dictionaries(
        st.sampled_from(["email", "chat", "thread", "note", "eventType"]),
        st.one_of(json_values, st.fixed_dictionaries({"createdBy": st.one_of(actors_json, json_values)})),
        max_size=4,
    ),
)
def test_hostile_bodies_through_verify_never_make_actors_raise(kind: str, inner: dict[str, Any]) -> None:
    payload = event(kind, at=NOW)
    payload["payload"] = inner
    delivery, verdict = _verified(payload)
    found = plain.actors(delivery, verdict)
    assert isinstance(found, Actors) and found.authors == ()
    assert found.sender is None or (0 < len(found.sender) <= 100 and found.sender.isprintable())
