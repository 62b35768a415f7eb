"""Who a verified Linear delivery names (docs/sources/linear.md, "Trusted actors"), by id: the
envelope's ``actor``, else a comment's ``data.userId``; hostile bodies never make ``actors`` raise."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import switchboard_linear as linear
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from linear_kit import SIGNING_SECRET, USER, comment_event, encode, envelope, issue_event, linear_headers

from switchboard.sdk import Actors, Delivery, TrustSpec, Verdict

NOW = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
ACTOR = "5b7e9c1d-2a3f-4b6c-8d0e-1f2a3b4c5d6e"


def _verified(payload: dict[str, Any]) -> tuple[Delivery, Verdict]:
    body = encode(payload)
    delivery = Delivery("linear", linear_headers(SIGNING_SECRET, body), body, NOW, SIGNING_SECRET)
    verdict = linear.verify(delivery)
    assert verdict.ok, verdict.detail
    return delivery, verdict


def test_the_kind_declares_actor_ids() -> None:
    assert linear.SOURCE.actors is linear.actors
    assert linear.SOURCE.trust == TrustSpec(
        field="actor_ids", label="Linear user id", case_insensitive=True, matches=("sender",)
    )


def test_a_comment_names_its_user_as_sender_and_author() -> None:
    delivery, verdict = _verified(comment_event("Is this fixed?", at_ms=NOW_MS))
    assert linear.actors(delivery, verdict) == Actors(USER, (USER,))


def test_the_envelopes_actor_is_the_sender() -> None:
    """Linear names who acted in ``actor`` (a user, an OAuth application or an integration)."""
    issue = issue_event(at_ms=NOW_MS)
    issue["actor"] = {"id": ACTOR, "name": "Ada Lovelace", "type": "user"}
    delivery, verdict = _verified(issue)
    assert linear.actors(delivery, verdict) == Actors(ACTOR, ())
    comment = comment_event("edited", action="update", at_ms=NOW_MS)
    comment["actor"] = {"id": ACTOR, "name": "Ada Lovelace", "type": "user"}
    delivery, verdict = _verified(comment)
    assert linear.actors(delivery, verdict) == Actors(ACTOR, (USER,))


def test_an_issue_without_an_actor_names_nobody() -> None:
    delivery, verdict = _verified(issue_event(at_ms=NOW_MS))
    assert linear.actors(delivery, verdict) == Actors()


@pytest.mark.parametrize("actor", [None, "joe", {"id": 5}, {"id": ""}, {"name": "Ada"}, {"id": "x" * 101}])
def test_an_unusable_actor_falls_back_to_the_comments_user(actor: object) -> None:
    payload = comment_event("hi", at_ms=NOW_MS)
    payload["actor"] = actor
    delivery, verdict = _verified(payload)
    assert linear.actors(delivery, verdict) == Actors(USER, (USER,))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=120),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entity=st.sampled_from(["Issue", "Comment", "Project"]),
    data=st.one_of(json_values, st.fixed_dictionaries({"userId": json_values})),
    actor=st.one_of(json_values, st.fixed_dictionaries({"id": json_values})),
)
def test_hostile_bodies_through_verify_never_make_actors_raise(entity: str, data: Any, actor: object) -> None:
    payload = envelope(entity, "create", {}, at_ms=NOW_MS)
    payload.update(data=data, actor=actor)
    delivery, verdict = _verified(payload)
    found = linear.actors(delivery, verdict)
    assert isinstance(found, Actors) and len(found.authors) <= 1
    for value in (found.sender, *found.authors):
        assert value is None or (0 < len(value) <= 100 and value.isprintable())
