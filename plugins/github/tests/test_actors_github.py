"""Who a verified GitHub delivery names (docs/sources/github.md, "Trusted actors"), on octokit's
payloads as GitHub sends them, and that hostile bodies never make ``actors`` raise."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import switchboard_github as github
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from switchboard.sdk import Actors, Delivery, TrustSpec, Verdict
from switchboard.testing import hexmac

FIXTURES = Path(__file__).parents[3] / "tests" / "fixtures" / "github"
SECRET = "whsec_github_test"


def _payload(name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return value


def _verified(payload: dict[str, Any], event: str) -> tuple[Delivery, Verdict]:
    body = json.dumps(payload).encode()
    headers = {"X-GitHub-Event": event, "X-Hub-Signature-256": "sha256=" + hexmac(SECRET, body)}
    delivery = Delivery("github", headers, body, datetime.now(UTC), SECRET)
    verdict = github.verify(delivery)
    assert verdict.ok, verdict.detail
    return delivery, verdict


def test_the_kind_declares_logins_with_three_modes() -> None:
    assert github.SOURCE.actors is github.actors
    assert github.SOURCE.trust == TrustSpec(
        field="logins", label="GitHub login", case_insensitive=True, matches=("sender", "author", "both")
    )


@pytest.mark.parametrize(
    ("name", "event", "expected"),
    [
        ("issues/opened.payload", "issues", Actors("Codertocat", ("Codertocat",))),
        ("issue_comment/created.payload", "issue_comment", Actors("Codertocat", ("Codertocat",))),
        ("pull_request/opened.payload", "pull_request", Actors("Codertocat", ("Codertocat",))),
        (
            "pull_request_review/submitted.payload",
            "pull_request_review",
            Actors("Codertocat", ("Codertocat",)),
        ),
        (
            "pull_request_review_comment/created.payload",
            "pull_request_review_comment",
            Actors("Codertocat", ("Codertocat",)),
        ),
        # The sender moved an issue that octo-org opened: sender and author differ.
        ("issues/transferred.payload", "issues", Actors("Codertocat", ("octo-org",))),
        # A push names its pusher; commit authors are not accounts GitHub vouches for.
        ("push/payload", "push", Actors("Codertocat", ())),
        ("ping/payload", "ping", Actors("Codertocat", ())),
    ],
)
def test_actors_of_octokits_payloads(name: str, event: str, expected: Actors) -> None:
    delivery, verdict = _verified(_payload(name), event)
    assert github.actors(delivery, verdict) == expected


def _someone(user: dict[str, Any], login: str) -> dict[str, Any]:
    other = copy.deepcopy(user)
    other["login"] = login
    return other


def test_a_strangers_comment_names_the_commenter_then_the_thread_author() -> None:
    """issue_comment/created as a non-owner would cause it: built beside the original fixture."""
    payload = _payload("issue_comment/created.payload")
    payload["comment"]["user"] = _someone(payload["comment"]["user"], "mallory")
    payload["sender"] = _someone(payload["sender"], "mallory")
    delivery, verdict = _verified(payload, "issue_comment")
    assert github.actors(delivery, verdict) == Actors("mallory", ("mallory", "Codertocat"))


def test_a_review_names_the_reviewer_then_the_pull_requests_author() -> None:
    payload = _payload("pull_request_review/submitted.payload")
    payload["review"]["user"] = _someone(payload["review"]["user"], "reviewer")
    payload["sender"] = _someone(payload["sender"], "reviewer")
    delivery, verdict = _verified(payload, "pull_request_review")
    assert github.actors(delivery, verdict) == Actors("reviewer", ("reviewer", "Codertocat"))


@pytest.mark.parametrize(
    "login",
    [None, 42, "", "   ", "x" * 101, "nul\x00byte", "\udcff", ["Codertocat"], {"login": "a"}],
)
def test_an_unusable_login_is_no_actor_never_a_cleaned_one(login: object) -> None:
    payload = _payload("issues/opened.payload")
    payload["sender"]["login"] = login
    payload["issue"]["user"]["login"] = login
    body = json.dumps(payload).encode()
    verdict = Verdict(ok=True, detail="ok", payload=json.loads(body), event="issues.opened")
    assert github.actors(Delivery("github", {}, body, datetime.now(UTC)), verdict) == Actors()


def test_logins_are_stripped_and_kept_up_to_100_characters() -> None:
    payload = _payload("issues/opened.payload")
    payload["sender"]["login"] = " octocat "
    payload["issue"]["user"]["login"] = "y" * 100
    delivery, verdict = _verified(payload, "issues")
    assert github.actors(delivery, verdict) == Actors("octocat", ("y" * 100,))


def test_a_refused_verdict_names_nobody() -> None:
    body = json.dumps(_payload("issues/opened.payload")).encode()
    refused = Verdict.refuse("signature mismatch")
    assert github.actors(Delivery("github", {}, body, datetime.now(UTC)), refused) == Actors()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=120),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
users = st.one_of(json_values, st.fixed_dictionaries({"login": json_values}))
bodies = st.fixed_dictionaries(
    {},
    optional={
        "sender": users,
        "comment": st.one_of(json_values, st.fixed_dictionaries({"user": users})),
        "review": st.one_of(json_values, st.fixed_dictionaries({"user": users})),
        "pull_request": st.one_of(json_values, st.fixed_dictionaries({"user": users})),
        "issue": st.one_of(json_values, st.fixed_dictionaries({"user": users})),
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=bodies, event=st.sampled_from(["issues", "issue_comment", "pull_request_review", "push"]))
def test_hostile_bodies_through_verify_never_make_actors_raise(payload: dict[str, Any], event: str) -> None:
    delivery, verdict = _verified(payload, event)
    found = github.actors(delivery, verdict)
    assert isinstance(found, Actors)
    for value in (found.sender, *found.authors):
        assert value is None or (isinstance(value, str) and 0 < len(value) <= 100 and value.isprintable())
    # Only what the signed body says: every value is a login found in it.
    assert found.sender is None or found.sender == payload["sender"]["login"].strip()
    assert len(found.authors) <= 2
