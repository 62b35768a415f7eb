"""Trusted actors (``switchboard.trust``, docs/plugins.md "Trusted actors"): checking a setting, judging
real GitHub deliveries in each match mode, adding an actor, the one-line summary, the loader's checks
of ``actors``/``trust``, and that ``judge`` never raises on whatever is stored or named."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from switchboard import plugins
from switchboard.plugin_checks import ProviderFault, problem_of
from switchboard.provider import Actors, Delivery, SourceKind, TrustSpec, Verdict
from switchboard.testing import hexmac
from switchboard.trust import (
    TrustError,
    actors_to_add,
    add_actor,
    add_actors,
    check_trust,
    describe,
    judge,
    trust_needed,
)

FORGE = TrustSpec(field="logins", label="GitHub login", matches=("sender", "author", "both"))
IDS = TrustSpec(field="actor_ids", label="Cairn actor id", case_insensitive=False)
FIXTURES = Path(__file__).parent / "fixtures" / "github"
PROVIDERS = plugins.load()
GITHUB = PROVIDERS.sources["github"]
SECRET = "whsec_trust_test"


# ---------------------------------------------------------------------------------------------
# check_trust


@pytest.mark.parametrize(
    ("spec", "value", "expected"),
    [
        (FORGE, {"allow_all": True}, {"allow_all": True}),
        (IDS, {"allow_all": True}, {"allow_all": True}),
        (FORGE, {"logins": ["octocat"]}, {"logins": ["octocat"], "match": "sender"}),
        # Stripped, de-duplicated without regard to case (first spelling kept), sorted.
        (
            FORGE,
            {"logins": [" Octocat ", "hubot", "octocat", "HUBOT"], "match": "both"},
            {"logins": ["hubot", "Octocat"], "match": "both"},
        ),
        (FORGE, {"logins": ("a",), "match": "author"}, {"logins": ["a"], "match": "author"}),
        # A case-sensitive kind keeps both spellings, and has no match to store.
        (IDS, {"actor_ids": ["usr_B", "usr_b", "usr_b"]}, {"actor_ids": ["usr_B", "usr_b"]}),
        (IDS, {"actor_ids": ["joe"], "match": "sender"}, {"actor_ids": ["joe"]}),
        (FORGE, {"logins": ["x" * 100] * 3 + [f"u{i}" for i in range(197)]}, None),
    ],
)
def test_check_trust_normalises(spec: TrustSpec, value: object, expected: dict[str, Any] | None) -> None:
    result = check_trust(spec, value, signed=True)
    if expected is not None:
        assert result == expected
    else:
        assert len(result["logins"]) == 198
    # Normalising is idempotent: a stored setting reads back as itself.
    assert check_trust(spec, result, signed=True) == result


@pytest.mark.parametrize(
    ("spec", "value", "signed", "code"),
    [
        (None, {"allow_all": True}, True, "trust_not_supported"),
        (FORGE, {"allow_all": True}, False, "trust_not_supported"),
        (None, None, False, "trust_not_supported"),
        (FORGE, None, True, "trust_required"),
        (FORGE, [], True, "invalid_trust"),
        (FORGE, "octocat", True, "invalid_trust"),
        (FORGE, {}, True, "invalid_trust"),
        (FORGE, {"allow_all": True, "logins": ["a"]}, True, "invalid_trust"),
        (FORGE, {"allow_all": True, "match": "sender"}, True, "invalid_trust"),
        (FORGE, {"allow_all": False}, True, "invalid_trust"),
        (FORGE, {"allow_all": 1}, True, "invalid_trust"),
        (FORGE, {"allow_all": "true"}, True, "invalid_trust"),
        (FORGE, {"logins": []}, True, "invalid_trust"),
        (FORGE, {"logins": "octocat"}, True, "invalid_trust"),
        (FORGE, {"logins": {"octocat": True}}, True, "invalid_trust"),
        (FORGE, {"logins": [f"u{i}" for i in range(201)]}, True, "invalid_trust"),
        (FORGE, {"logins": ["x" * 101]}, True, "invalid_trust"),
        (FORGE, {"logins": [""]}, True, "invalid_trust"),
        (FORGE, {"logins": ["  "]}, True, "invalid_trust"),
        (FORGE, {"logins": [7]}, True, "invalid_trust"),
        (FORGE, {"logins": [None]}, True, "invalid_trust"),
        (FORGE, {"logins": [["a"]]}, True, "invalid_trust"),
        (FORGE, {"logins": ["nul\x00"]}, True, "invalid_trust"),
        (FORGE, {"logins": ["\udcff"]}, True, "invalid_trust"),
        (FORGE, {"logins": ["a"], "match": "anyone"}, True, "invalid_trust"),
        (FORGE, {"logins": ["a"], "match": None}, True, "invalid_trust"),
        (FORGE, {"logins": ["a"], "extra": 1}, True, "invalid_trust"),
        # Another kind's field is not this kind's.
        (FORGE, {"actor_ids": ["a"]}, True, "invalid_trust"),
        (IDS, {"logins": ["a"]}, True, "invalid_trust"),
        (IDS, {"actor_ids": ["a"], "match": "author"}, True, "invalid_trust"),
    ],
)
def test_check_trust_refuses(spec: TrustSpec | None, value: object, signed: bool, code: str) -> None:
    with pytest.raises(TrustError) as caught:
        check_trust(spec, value, signed=signed)
    assert caught.value.code == code and caught.value.message
    assert caught.value.as_dict()["error"] == code and caught.value.http_status == 400


def test_a_refusal_quotes_no_huge_or_nested_value() -> None:
    deep: object = "x"
    for _ in range(2000):
        deep = [deep]
    for value in ({"logins": ["a" * 10_000]}, {"logins": [deep]}, {"a" * 10_000: 1}):
        with pytest.raises(TrustError) as caught:
            check_trust(FORGE, value, signed=True)
        assert len(caught.value.message) < 200


def test_trust_is_needed_only_on_signed_kinds_with_actors() -> None:
    assert trust_needed(FORGE, signed=True)
    assert not trust_needed(FORGE, signed=False)
    assert not trust_needed(None, signed=True)


# ---------------------------------------------------------------------------------------------
# judge, on real GitHub deliveries through the loaded (guarded) kind


def _payload(name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return value


def _actors(payload: dict[str, Any], event: str) -> Actors:
    body = json.dumps(payload).encode()
    headers = {"X-GitHub-Event": event, "X-Hub-Signature-256": "sha256=" + hexmac(SECRET, body)}
    delivery = Delivery("github", headers, body, datetime.now(UTC), SECRET)
    verdict = GITHUB.verify(delivery)
    assert verdict.ok and GITHUB.actors is not None
    return GITHUB.actors(delivery, verdict)


def _stranger_comment() -> Actors:
    """issue_comment/created as a non-owner causes it: mallory comments on Codertocat's issue."""
    payload = _payload("issue_comment/created.payload")
    mallory = copy.deepcopy(payload["sender"])
    mallory["login"] = "mallory"
    payload["sender"] = payload["comment"]["user"] = mallory
    return _actors(payload, "issue_comment")


def _owner_comment_on_a_strangers_issue() -> Actors:
    payload = _payload("issue_comment/created.payload")
    mallory = copy.deepcopy(payload["sender"])
    mallory["login"] = "mallory"
    payload["issue"]["user"] = mallory
    return _actors(payload, "issue_comment")


def _trusting(match: str, *logins: str) -> dict[str, Any]:
    return check_trust(FORGE, {"logins": list(logins), "match": match}, signed=True)


def test_octokits_transfer_names_a_sender_who_is_not_the_author() -> None:
    actors = _actors(_payload("issues/transferred.payload"), "issues")
    assert actors == Actors("Codertocat", ("octo-org",))
    # Case does not matter for GitHub logins.
    assert judge(FORGE, _trusting("sender", "codertocat"), actors) == {
        "trusted": True,
        "sender": "Codertocat",
        "authors": ["octo-org"],
        "matched": "sender",
        "why": "sender Codertocat is a trusted GitHub login",
    }
    assert judge(FORGE, _trusting("author", "codertocat"), actors) == {
        "trusted": False,
        "sender": "Codertocat",
        "authors": ["octo-org"],
        "matched": None,
        "why": "no author (octo-org) is a trusted GitHub login",
    }
    both = judge(FORGE, _trusting("both", "Codertocat"), actors)
    assert not both["trusted"]
    assert both["why"] == "sender Codertocat is trusted, but no author (octo-org) is a trusted GitHub login"
    assert judge(FORGE, _trusting("both", "Codertocat", "OCTO-ORG"), actors)["matched"] == "both"
    assert judge(FORGE, _trusting("author", "octo-org"), actors)["matched"] == "author"


@pytest.mark.parametrize(
    ("make", "match", "trusted", "matched"),
    [
        # A stranger comments on the owner's issue.
        (_stranger_comment, "sender", False, None),
        (_stranger_comment, "author", True, "author"),  # the thread is the owner's
        (_stranger_comment, "both", False, None),
        # The owner comments on a stranger's issue.
        (_owner_comment_on_a_strangers_issue, "sender", True, "sender"),
        (_owner_comment_on_a_strangers_issue, "author", True, "author"),  # the comment is the owner's
        (_owner_comment_on_a_strangers_issue, "both", True, "both"),
    ],
)
def test_each_mode_on_comments(make: Any, match: str, trusted: bool, matched: str | None) -> None:
    verdict = judge(FORGE, _trusting(match, "Codertocat"), make())
    assert (verdict["trusted"], verdict["matched"]) == (trusted, matched)


def test_a_stranger_comment_names_the_commenter_first() -> None:
    verdict = judge(FORGE, _trusting("sender", "Codertocat"), _stranger_comment())
    assert verdict == {
        "trusted": False,
        "sender": "mallory",
        "authors": ["mallory", "Codertocat"],
        "matched": None,
        "why": "sender mallory is not a trusted GitHub login",
    }


def test_allow_all_and_missing_or_unreadable_settings() -> None:
    actors = Actors("mallory", ("mallory",))
    assert judge(FORGE, {"allow_all": True}, actors)["matched"] == "allow_all"
    assert judge(None, {"allow_all": True}, None)["trusted"] is True
    missing = judge(FORGE, None, actors)
    assert missing == {
        "trusted": False,
        "sender": "mallory",
        "authors": ["mallory"],
        "matched": None,
        "why": "no trusted actors configured",
    }
    for unreadable in (
        {},
        [],
        "allow_all",
        {"allow_all": "yes"},
        {"logins": []},
        {"logins": ["a"], "match": "x"},
    ):
        verdict = judge(FORGE, unreadable, actors)
        assert verdict["trusted"] is False and verdict["why"].startswith("no trusted actors configured")
    assert judge(None, {"actor_ids": ["mallory"]}, actors)["trusted"] is False


def test_no_sender_or_no_author() -> None:
    config = _trusting("sender", "octocat")
    assert judge(FORGE, config, Actors())["why"] == "the delivery names no sender"
    assert judge(FORGE, config, None)["why"] == "the delivery names no sender"
    assert judge(FORGE, _trusting("author", "octocat"), Actors("octocat"))["why"] == (
        "the delivery names no author"
    )


def test_case_sensitive_kinds_compare_exactly() -> None:
    config = check_trust(IDS, {"actor_ids": ["usr_Ada"]}, signed=True)
    assert judge(IDS, config, Actors("usr_Ada"))["trusted"] is True
    assert judge(IDS, config, Actors("usr_ada"))["trusted"] is False


def test_a_third_party_kinds_junk_actors_are_checked_again() -> None:
    junk = Actors(
        sender="  x\x00 ", authors=("ok", 5, "ok", "\udcff", "y" * 101, *[f"a{i}" for i in range(30)])
    )  # type: ignore[arg-type]
    verdict = judge(FORGE, _trusting("author", "a3"), junk)
    assert verdict["sender"] is None and verdict["authors"][:2] == ["ok", "a0"]
    assert len(verdict["authors"]) == 10 and verdict["trusted"] is True
    assert judge(FORGE, {"allow_all": True}, "not actors")["sender"] is None  # type: ignore[arg-type]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=30,
)
configs = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "allow_all": json_values,
            "logins": st.one_of(json_values, st.lists(st.text(), max_size=5)),
            "actor_ids": st.lists(st.text(), max_size=5),
            "match": st.one_of(st.sampled_from(["sender", "author", "both"]), json_values),
        },
    ),
)
names = st.one_of(st.text(), st.sampled_from(["octocat", "OctoCat", " octocat", "x" * 101]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.sampled_from([FORGE, IDS, None]),
    config=configs,
    sender=st.one_of(st.none(), names),
    authors=st.lists(names, max_size=12),
)
def test_judge_never_raises(
    spec: TrustSpec | None, config: object, sender: str | None, authors: list[str]
) -> None:
    verdict = judge(spec, config, Actors(sender, tuple(authors)))
    assert set(verdict) == {"trusted", "sender", "authors", "matched", "why"}
    assert verdict["trusted"] is (verdict["matched"] is not None)
    # JSON-safe, on PostgreSQL too: no lone surrogate, no NUL.
    text = json.dumps(verdict, ensure_ascii=False)
    text.encode("utf-8")
    assert "\\u0000" not in text
    describe(spec, config)
    if spec is not None:
        try:
            add_actor(spec, config, sender or "someone")
        except TrustError:
            pass
        actors_to_add(spec, config, verdict)


# ---------------------------------------------------------------------------------------------
# Trust this actor; the one-line summary


def test_add_actor_and_actors_to_add() -> None:
    config = _trusting("both", "octocat")
    verdict = judge(FORGE, config, _stranger_comment())
    assert actors_to_add(FORGE, config, verdict) == ["mallory"]
    grown = add_actors(FORGE, config, actors_to_add(FORGE, config, verdict))
    assert grown == {"logins": ["mallory", "octocat"], "match": "both"}
    assert judge(FORGE, grown, _stranger_comment())["trusted"] is True
    # Already there (in another case): nothing changes.
    assert add_actor(FORGE, grown, "MALLORY") == grown
    assert actors_to_add(FORGE, _trusting("author", "x"), verdict) == ["mallory"]
    assert actors_to_add(FORGE, {"allow_all": True}, verdict) == []
    assert actors_to_add(None, None, verdict) == []


def test_add_actor_keeps_allow_all_and_replaces_what_is_missing_or_unreadable() -> None:
    assert add_actor(FORGE, {"allow_all": True}, "mallory") == {"allow_all": True}
    assert add_actor(FORGE, None, "mallory") == {"logins": ["mallory"], "match": "sender"}
    assert add_actor(FORGE, {"logins": 5}, "mallory") == {"logins": ["mallory"], "match": "sender"}
    assert add_actor(IDS, None, "joe") == {"actor_ids": ["joe"]}
    full = check_trust(FORGE, {"logins": [f"u{i}" for i in range(200)]}, signed=True)
    for bad, target in (("x" * 101, None), ("", None), ("u200", full)):
        with pytest.raises(TrustError) as caught:
            add_actor(FORGE, target, bad)
        assert caught.value.code == "invalid_trust"
    with pytest.raises(TrustError) as caught:
        add_actor(None, None, "joe")
    assert caught.value.code == "trust_not_supported"
    with pytest.raises(TrustError):
        add_actors(FORGE, None, [])


@pytest.mark.parametrize(
    ("spec", "config", "line"),
    [
        (FORGE, {"allow_all": True}, "all actors allowed"),
        (FORGE, None, "no trusted actors configured: every delivery is quarantined"),
        (
            FORGE,
            {"logins": 3},
            "no trusted actors configured (the stored setting is unreadable): every delivery is quarantined",
        ),
        (FORGE, {"logins": ["octocat"], "match": "author"}, "trusted GitHub login: octocat (match: author)"),
        (
            FORGE,
            {"logins": [f"u{i}" for i in range(7)], "match": "sender"},
            "trusted GitHub logins: u0, u1, u2, u3, u4 and 2 more (match: sender)",
        ),
        (IDS, {"actor_ids": ["joe", "ann"]}, "trusted Cairn actor ids: ann, joe"),
        (None, None, "not available for this kind"),
    ],
)
def test_describe(spec: TrustSpec | None, config: object, line: str) -> None:
    assert describe(spec, config) == line


# ---------------------------------------------------------------------------------------------
# The kinds as loaded, and the loader's checks


def test_the_loaded_kinds_declare_actors_and_trust_together() -> None:
    declared = {name: kind.trust for name, kind in PROVIDERS.sources.items()}
    for name, kind in PROVIDERS.sources.items():
        assert (kind.actors is None) == (kind.trust is None), name
        assert kind.trust is None or kind.secret != "none", name
    for name in ("generic", "stripe", "slack"):
        assert declared.get(name) is None
    assert {n: t.field for n, t in declared.items() if t is not None} == {
        "github": "logins",
        "gitea": "logins",
        "cairn": "actor_ids",
        "linear": "actor_ids",
        "plain": "actor_ids",
    }


def _verify(delivery: Delivery) -> Verdict:
    return Verdict(ok=True, detail="ok", payload={})


def _toy(**changes: Any) -> SourceKind:
    values: dict[str, Any] = {"secret": "minted", "verify": _verify}
    return SourceKind("toy", **{**values, **changes})


def _names(delivery: Delivery, verdict: Verdict) -> Actors:
    return Actors("a")


async def _async_names(delivery: Delivery, verdict: Verdict) -> Actors:
    return Actors("a")


@pytest.mark.parametrize(
    ("kind", "fragment"),
    [
        (_toy(actors=_names), "set actors and trust together"),
        (_toy(trust=IDS), "set actors and trust together"),
        (_toy(actors=_names, trust={"field": "ids"}), "trust takes a TrustSpec"),
        (_toy(secret="none", actors=_names, trust=IDS), "need a signed kind"),
        (_toy(actors="names", trust=IDS), "actors must be a function"),
        (_toy(actors=_async_names, trust=IDS), "actors is async def"),
        (_toy(actors=_names, trust=TrustSpec("Logins", "login")), "trust.field"),
        (_toy(actors=_names, trust=TrustSpec("allow_all", "login")), "trust.field"),
        (_toy(actors=_names, trust=TrustSpec("match", "login")), "trust.field"),
        (_toy(actors=_names, trust=TrustSpec("ids", " ")), "trust.label"),
        (_toy(actors=_names, trust=TrustSpec("ids", "id", case_insensitive=1)), "case_insensitive"),  # type: ignore[arg-type]
        (_toy(actors=_names, trust=TrustSpec("ids", "id", matches=())), "trust.matches"),
        (_toy(actors=_names, trust=TrustSpec("ids", "id", matches=("sender", "sender"))), "trust.matches"),
        (_toy(actors=_names, trust=TrustSpec("ids", "id", matches=("anyone",))), "trust.matches"),
        (_toy(actors=_names, trust=TrustSpec("ids", "id", matches=["sender"])), "trust.matches"),  # type: ignore[arg-type]
    ],
)
def test_the_loader_refuses_bad_trust_declarations(kind: SourceKind, fragment: str) -> None:
    problem = problem_of(kind)
    assert problem is not None and fragment in problem and problem.startswith("SourceKind 'toy'")


def test_a_good_declaration_loads_and_its_actors_are_guarded() -> None:
    assert problem_of(_toy(actors=_names, trust=IDS)) is None
    assert problem_of(_toy()) is None
    guarded = plugins.guarded_source(_toy(actors=lambda d, v: "joe", trust=IDS), "toy-plugin")
    assert guarded.actors is not None
    delivery = Delivery("toy", {}, b"{}", datetime.now(UTC))
    with pytest.raises(ProviderFault, match="actors returned str, not Actors or None"):
        guarded.actors(delivery, _verify(delivery))
