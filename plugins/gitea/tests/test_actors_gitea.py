"""Who a verified Gitea/Forgejo delivery names (docs/sources/gitea.md, "Trusted actors"), on the
payloads Gitea sends, and that hostile bodies never make ``actors`` raise."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import switchboard_gitea as gitea
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from switchboard.sdk import Actors, Delivery, TrustSpec, Verdict
from switchboard.testing import hexmac

FIXTURES = Path(__file__).parents[3] / "tests" / "fixtures" / "gitea"
SECRET = "whsec_gitea_test"


def _payload(name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return value


def _verified(payload: object, event: str) -> tuple[Delivery, Verdict]:
    body = json.dumps(payload).encode()
    headers = {"X-Gitea-Signature": hexmac(SECRET, body), "X-Gitea-Event-Type": event}
    delivery = Delivery("gitea", headers, body, datetime.now(UTC), SECRET)
    verdict = gitea.verify(delivery)
    assert verdict.ok, verdict.detail
    return delivery, verdict


def test_the_kind_declares_logins_with_three_modes() -> None:
    assert gitea.SOURCE.actors is gitea.actors
    assert gitea.SOURCE.trust == TrustSpec(
        field="logins", label="Gitea login", case_insensitive=True, matches=("sender", "author", "both")
    )


@pytest.mark.parametrize(
    ("name", "event"),
    [
        ("issues.opened", "issues"),
        ("issue_comment.created", "issue_comment"),
        ("pull_request.opened", "pull_request"),
        ("pull_request_comment.created", "pull_request_comment"),
        # Gitea's review object names no user: the pull request's author is the one named.
        ("pull_request_review_approved", "pull_request_review_approved"),
        ("pull_request_review_comment", "pull_request_review_comment"),
    ],
)
def test_actors_of_giteas_payloads(name: str, event: str) -> None:
    delivery, verdict = _verified(_payload(name), event)
    assert gitea.actors(delivery, verdict) == Actors("ada", ("ada",))


def test_a_push_names_its_pusher_only() -> None:
    delivery, verdict = _verified(_payload("push"), "push")
    assert gitea.actors(delivery, verdict) == Actors("ada", ())


def test_a_strangers_comment_on_a_pull_request_names_the_commenter_then_the_author() -> None:
    payload = _payload("pull_request_comment.created")
    stranger = copy.deepcopy(payload["sender"])
    stranger["login"] = stranger["username"] = "mallory"
    payload["sender"] = payload["comment"]["user"] = stranger
    delivery, verdict = _verified(payload, "pull_request_comment")
    assert gitea.actors(delivery, verdict) == Actors("mallory", ("mallory", "ada"))


def test_a_refused_verdict_names_nobody() -> None:
    body = json.dumps(_payload("issues.opened")).encode()
    refused = Verdict.refuse("signature mismatch")
    assert gitea.actors(Delivery("gitea", {}, body, datetime.now(UTC)), refused) == Actors()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=120),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
users = st.one_of(json_values, st.fixed_dictionaries({"login": json_values}))
holders = st.one_of(json_values, st.fixed_dictionaries({"user": users}))
bodies = st.fixed_dictionaries(
    {},
    optional={
        "sender": users,
        "comment": holders,
        "review": holders,
        "pull_request": holders,
        "issue": holders,
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=bodies, event=st.sampled_from(["issues", "issue_comment", "pull_request_review_approved"]))
def test_hostile_bodies_through_verify_never_make_actors_raise(payload: dict[str, Any], event: str) -> None:
    delivery, verdict = _verified(payload, event)
    found = gitea.actors(delivery, verdict)
    assert isinstance(found, Actors) and len(found.authors) <= 2
    for value in (found.sender, *found.authors):
        assert value is None or (isinstance(value, str) and 0 < len(value) <= 100 and value.isprintable())
