"""Setting a webhook's trusted actors and routing rules (``switchboard.intake_config``): the trust
choice at create and its codes, a new setting obeyed from the next delivery, every rule-set code
(every forbidden jq function refused at save), the grants checked at save and again at delivery
time, and the dry run's per-delivery answer on real signed GitHub deliveries (octokit's payloads)
stored through ingest over HTTP.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from switchboard import quarantine, routes, tenancy
from switchboard.errors import SwitchboardError
from switchboard.intake_config import (
    DRY_RUN_DELIVERIES,
    Caller,
    set_rules,
    set_trust,
    show_rules,
    show_trust,
    trust_for_create,
)
from switchboard.models import Endpoint, Todo, Webhook
from switchboard.rules import FORBIDDEN_NAMES, FORBIDDEN_VARIABLES, MAX_RULES
from switchboard.services import Services
from switchboard.tenancy import Owner
from switchboard.testing import github_headers, post
from switchboard.todos.operator import Actor

FIXTURES = Path(__file__).parent / "fixtures" / "github"
DELIVERIES = {
    "issues": "issues/opened.payload.json",
    "comment": "issue_comment/created.payload.json",
    "pr": "pull_request/opened.payload.json",
    "review": "pull_request_review/submitted.payload.json",
    "ping": "ping/payload.json",
    "push": "push/payload.json",
}
BOT = "dependabot[bot]"


class Hook:
    """A GitHub webhook of a fresh human's endpoint (granted ``default`` and ``reviews``)."""

    def __init__(self, services: Services, base_url: str) -> None:
        self.services, self.base_url = services, base_url
        self.token = self.secret = self.id = ""

    async def create(self, handle: str, trust: Any = None, source: str = "github") -> Hook:
        human, _ = await tenancy.add_human(self.services.db, handle)
        self.owner = Owner(human_id=human.id)
        self.endpoint, _ = await tenancy.vend_endpoint(
            self.services.db, name=f"{handle}-agent", owner=self.owner, queues=["default", "reviews"]
        )
        providers = self.services.providers
        new = await tenancy.create_webhook(
            self.services.db,
            self.services.vault,
            providers,
            endpoint_slug=self.endpoint.slug,
            source=source,
            trust=trust_for_create(providers, source, trust),
        )
        self.token, self.secret, self.id = new.ingest_token, new.secret or "", new.webhook.id
        return self

    @property
    def caller(self) -> Caller:
        return Caller(Actor("human:test"), scopes=[self.owner])

    async def deliver(self, what: str, *, sender: str = "Codertocat") -> dict[str, Any]:
        name = DELIVERIES[what]
        payload = json.loads((FIXTURES / name).read_bytes())
        payload["sender"]["login"] = sender
        payload["switchboard_test"] = str(uuid.uuid4())
        body = json.dumps(payload).encode()
        headers = github_headers(self.secret, body, name.split("/")[0], str(uuid.uuid4()))
        status, answer, _ = await post(self.base_url, self.token, body, headers)
        assert status == 202, answer
        return answer

    async def routing(self) -> Any:
        async with self.services.db.read() as s:
            return await s.scalar(select(Webhook.routing).where(Webhook.id == self.id))


@pytest.fixture
async def hook(services: Services, base_url: str) -> Hook:
    return await Hook(services, base_url).create("ada", {"allow_all": True})


async def _code(call: Any, code: str) -> SwitchboardError:
    with pytest.raises(SwitchboardError) as caught:
        await call
    assert caught.value.code == code, caught.value
    return caught.value


def rule(rule_id: str, expr: str, action: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    return {"id": rule_id, "expr": expr, "action": action or {"type": "queue"}, **more}


# ---------------------------------------------------------------------------------------------
# Trusted actors


async def test_the_trust_choice_at_create(services: Services) -> None:
    providers = services.providers
    for source, value, code in (
        ("github", None, "trust_required"),
        ("gitea", None, "trust_required"),
        ("cairn", None, "trust_required"),
        ("github", {"allow_all": True, "logins": ["octocat"]}, "invalid_trust"),
        ("github", {"logins": []}, "invalid_trust"),
        ("github", {"logins": ["octocat"], "match": "anyone"}, "invalid_trust"),
        ("github", ["octocat"], "invalid_trust"),
        ("cairn", {"actor_ids": ["usr_1"], "match": "author"}, "invalid_trust"),
        ("generic", {"allow_all": True}, "trust_not_supported"),
        ("slack", {"allow_all": True}, "trust_not_supported"),
        ("stripe", {"logins": ["octocat"]}, "trust_not_supported"),
    ):
        with pytest.raises(SwitchboardError) as caught:
            trust_for_create(providers, source, value)
        assert caught.value.code == code, (source, value, caught.value)
    assert trust_for_create(providers, "github", {"logins": ["b", "A", "a"], "match": "author"}) == {
        "logins": ["A", "b"],
        "match": "author",
    }
    assert trust_for_create(providers, "gitea", {"allow_all": True}) == {"allow_all": True}
    assert trust_for_create(providers, "cairn", {"actor_ids": ["usr_1"]}) == {"actor_ids": ["usr_1"]}
    for source in ("generic", "slack", "stripe", "no-such-kind"):
        assert trust_for_create(providers, source, None) is None
    hook = await Hook(services, "http://unused").create("ada", {"logins": ["octocat"]})
    [view] = await tenancy.list_webhooks(services.db, hook.endpoint.slug)
    assert view["trust"] == {"logins": ["octocat"], "match": "sender"} and view["rules"] == 0


async def test_set_trust_applies_from_the_next_delivery(services: Services, base_url: str) -> None:
    hook = await Hook(services, base_url).create("ada", {"logins": ["octocat"]})
    assert (await hook.deliver("comment"))["disposition"] == "quarantined"
    shown = await set_trust(services, hook.caller, hook.id, {"logins": ["codertocat"], "match": "both"})
    assert shown["trust"] == {"logins": ["codertocat"], "match": "both"} and shown["supported"] is True
    assert shown["described"] == "trusted GitHub login: codertocat (match: both)"
    # Compared without regard to case; the comment's sender and its author are both Codertocat.
    assert (await hook.deliver("comment"))["disposition"] == "routed"
    assert (await hook.deliver("comment", sender="stranger"))["disposition"] == "quarantined"
    await set_trust(services, hook.caller, hook.id, {"allow_all": True})
    assert (await hook.deliver("comment", sender="stranger"))["disposition"] == "routed"
    assert (await show_trust(services, hook.caller, hook.id))["described"] == "all actors allowed"
    for value, code in (
        (None, "trust_required"),
        ({}, "invalid_trust"),
        ({"actor_ids": ["x"]}, "invalid_trust"),
        ({"logins": ["x" * 101]}, "invalid_trust"),
        ({"logins": [f"u{n}" for n in range(201)]}, "invalid_trust"),
    ):
        await _code(set_trust(services, hook.caller, hook.id, value), code)
    async with services.db.read() as s:
        assert await s.scalar(select(Webhook.trust).where(Webhook.id == hook.id)) == {"allow_all": True}


async def test_set_trust_refusals(services: Services, base_url: str) -> None:
    hook = await Hook(services, base_url).create("ada", {"allow_all": True})
    generic = await Hook(services, base_url).create("bea", source="generic")
    await _code(set_trust(services, generic.caller, generic.id, {"allow_all": True}), "trust_not_supported")
    assert (await show_trust(services, generic.caller, generic.id))["supported"] is False
    other = Caller(Actor("human:bea"), scopes=[generic.owner])
    for call in (
        set_trust(services, other, hook.id, {"allow_all": True}),
        show_trust(services, other, hook.id),
        show_rules(services, other, hook.id),
        set_rules(services, other, hook.id, {"rules": []}),
        set_trust(services, hook.caller, "wh_nope", {"allow_all": True}),
        set_trust(services, hook.caller, None, {"allow_all": True}),  # type: ignore[arg-type]
    ):
        await _code(call, "not_found")

    def read_only(owner: Owner) -> None:
        raise SwitchboardError("forbidden", "only the team's owners and admins may change it")

    reader = Caller(Actor("human:reader"), scopes=[hook.owner], manage=read_only)
    await _code(set_trust(services, reader, hook.id, {"logins": ["x"]}), "forbidden")
    await _code(set_rules(services, reader, hook.id, {"rules": []}), "forbidden")
    assert (await show_rules(services, reader, hook.id))["rules"] == 0
    assert (await show_trust(services, Caller.cli(), hook.id))["trust"] == {"allow_all": True}


# ---------------------------------------------------------------------------------------------
# Rules: every refusal


async def test_every_rule_set_code(hook: Hook) -> None:
    services, caller = hook.services, hook.caller
    cases: list[tuple[Any, str]] = [
        ([], "invalid_rule"),
        ({"rules": [], "extra": 1}, "invalid_rule"),
        ({"rules": [rule("a", ".x"), rule("a", ".y")]}, "invalid_rule"),
        ({"rules": [rule("Bad Id", ".x")]}, "invalid_rule"),
        ({"rules": [rule("a", ".x", {"type": "forward"})]}, "invalid_rule"),
        ({"rules": [rule("a", ".x", {"type": "queue", "endpoints": ["nobody"]})]}, "invalid_rule"),
        ({"rules": [rule(f"r{n}", ".x") for n in range(MAX_RULES + 1)]}, "too_many_rules"),
        ({"rules": [], "params": ["x"]}, "invalid_params"),
        ({"rules": [], "params": {"big": "x" * 16384}}, "invalid_params"),
        ({"rules": [rule("a", ".x", {"type": "queue", "queue": "billing"})]}, "not_granted"),
        ({"rules": [], "default_action": {"type": "queue", "queue": "billing"}}, "not_granted"),
        ({"rules": [rule("a", ".payload | (")]}, "invalid_expression"),
        ({"rules": [rule("a", "x" * 4097)]}, "invalid_expression"),
        # Lexically fine, but jq does not know the function: the sandbox's compile check.
        ({"rules": [rule("ok", ".x"), rule("a", "no_such_function(1)")]}, "invalid_expression"),
        ({"rules": [rule("a", ".x | test(")]}, "invalid_expression"),
    ]
    for value, code in cases:
        error = await _code(set_rules(services, caller, hook.id, value), code)
        await _code(set_rules(services, caller, hook.id, value, save=False), code)
        if code == "invalid_expression" and isinstance(value, dict) and len(value["rules"]) == 2:
            assert error.extra["rule"] == "a" and "no_such_function" in error.message
    assert await hook.routing() is None


async def test_every_forbidden_function_is_refused_at_save(hook: Hook) -> None:
    services, caller = hook.services, hook.caller
    exprs = [f"{name}" for name in sorted(FORBIDDEN_NAMES)]
    exprs += [f". as $x | ${name} | length > 0" for name in sorted(FORBIDDEN_VARIABLES)]
    exprs += ['import "a" as a; .x', 'include "a"; .x', ".event | env", "[inputs] | length > 0"]
    for expr in exprs:
        error = await _code(
            set_rules(services, caller, hook.id, {"rules": [rule("r1", expr)]}), "forbidden_function"
        )
        assert error.extra["rule"] == "r1", expr
    assert await hook.routing() is None
    # The names as data (a string, a field) are not calls.
    saved = await set_rules(
        services, caller, hook.id, {"rules": [rule("r1", '.event == "env" or .payload.now')]}
    )
    assert saved["saved"] is True and (await hook.routing())["rules"][0]["expr"].startswith(".event")


# ---------------------------------------------------------------------------------------------
# The dry run


async def _store_deliveries(hook: Hook) -> dict[str, str]:
    """One stored delivery of each kind, and one by a bot: the event id of each."""
    ids: dict[str, str] = {}
    for what in DELIVERIES:
        await hook.deliver(what)
        ids[what] = await _newest_event(hook)
    await hook.deliver("issues", sender=BOT)
    ids["bot"] = await _newest_event(hook)
    return ids


async def _newest_event(hook: Hook) -> str:
    from switchboard.models import Event

    async with hook.services.db.read() as s:
        newest = await s.scalar(select(Event.id).where(Event.webhook_id == hook.id).order_by(Event.id.desc()))
    assert newest is not None
    return str(newest)


RULES: dict[str, Any] = {
    "rules": [
        rule(
            "drop-bots",
            '.payload.sender.type == "Bot" or ((.payload.sender.login // "") | endswith("[bot]"))',
            {"type": "drop"},
            name="Bots never make work",
        ),
        rule(
            "reviews",
            '.event | startswith("pull_request_review")',
            {"type": "queue", "queue": "reviews", "once": True},
        ),
        rule("hold-comments", '.event == "issue_comment.created"', {"type": "quarantine"}),
        rule("mentions", '(.payload.comment.body // "") | test($params.bot)', {"type": "queue"}),
    ],
    "default_action": {"type": "queue"},
    "params": {"bot": "ourbot"},
}


async def test_the_dry_run_on_stored_github_deliveries(hook: Hook) -> None:
    services, caller = hook.services, hook.caller
    ids = await _store_deliveries(hook)
    tested = await set_rules(services, caller, hook.id, RULES, save=False)
    assert tested["saved"] is False and tested["error"] is None and await hook.routing() is None
    by_delivery = {row["delivery"]: row for row in tested["results"]}
    assert [row["delivery"] for row in tested["results"]] == sorted(by_delivery, reverse=True)
    assert set(by_delivery) == set(ids.values())
    slug = hook.endpoint.slug

    def seen(what: str) -> tuple[Any, ...]:
        row = by_delivery[ids[what]]
        return row["disposition"], row["by"], row["rule"], row["todos"]

    assert seen("bot") == ("dropped", "rule", "drop-bots", [])
    assert by_delivery[ids["bot"]]["rule_name"] == "Bots never make work"
    assert seen("review") == (
        "routed",
        "rule",
        "reviews",
        [{"endpoint": slug, "queue": "reviews", "once": True}],
    )
    assert seen("comment") == (
        "quarantined",
        "rule",
        "hold-comments",
        [{"endpoint": slug, "queue": "quarantine", "held": "rule"}],
    )
    assert seen("issues") == (
        "routed",
        "default",
        None,
        [{"endpoint": slug, "queue": "default", "once": False}],
    )
    assert seen("pr")[:3] == ("routed", "default", None)
    assert seen("ping") == ("ignored", None, None, [])
    assert by_delivery[ids["ping"]]["was"] == "ignored" and by_delivery[ids["issues"]]["was"] == "routed"
    assert all(row["fault"] is None for row in tested["results"])
    # Saved, it decides the next delivery the way the dry run said.
    saved = await set_rules(services, caller, hook.id, RULES)
    assert saved["saved"] is True and [r["delivery"] for r in saved["results"]] == [
        r["delivery"] for r in tested["results"]
    ]
    assert (
        (await hook.routing()) == saved["routing"] == (await show_rules(services, caller, hook.id))["routing"]
    )
    assert (await tenancy.list_webhooks(services.db, slug))[0]["rules"] == 4
    answer = await hook.deliver("review")
    assert answer["disposition"] == "routed" and [t["queue"] for t in answer["todos"]] == ["reviews"]
    assert (await hook.deliver("issues", sender=BOT))["disposition"] == "dropped"
    assert (await hook.deliver("comment"))["disposition"] == "quarantined"
    page = await quarantine.list_held(services.db, caller, webhook_id=hook.id)
    assert [(r["reason"], r["rule"]) for r in page.rows] == [("rule", "hold-comments")]
    # Cleared: every delivery to every target again.
    cleared = await set_rules(services, caller, hook.id, None)
    assert (
        cleared["routing"] == {"rules": [], "default_action": None, "params": {}}
        and await hook.routing() is None
    )
    assert all(row["disposition"] in ("routed", "ignored") for row in cleared["results"])


async def test_a_rule_that_faults_on_a_stored_delivery_refuses_the_save(hook: Hook) -> None:
    services, caller = hook.services, hook.caller
    ids = await _store_deliveries(hook)
    # Only comments have a body: on any other delivery test(...) meets null, a jq error.
    faulty = {
        "rules": [rule("mentions", ".payload.comment.body | test($params.bot)")],
        "params": {"bot": "x"},
    }
    error = await _code(set_rules(services, caller, hook.id, faulty), "invalid_rule")
    assert error.extra["rule"] == "mentions" and error.extra["delivery"] in ids.values()
    assert "mentions" in error.message and error.extra["delivery"] in error.message
    assert await hook.routing() is None
    tested = await set_rules(services, caller, hook.id, faulty, save=False)
    assert tested["error"] is not None and tested["error"]["code"] == "invalid_rule"
    faults = {row["delivery"] for row in tested["results"] if row["fault"] is not None}
    assert ids["issues"] in faults and ids["comment"] not in faults and ids["ping"] not in faults
    assert all(row["disposition"] == "faulted" for row in tested["results"] if row["fault"] is not None)
    # Guarded, the same rule saves.
    guarded = {**faulty, "rules": [rule("mentions", '(.payload.comment.body // "") | test($params.bot)')]}
    assert (await set_rules(services, caller, hook.id, guarded))["saved"] is True


async def test_the_dry_run_judges_trust_as_it_is_now(services: Services, base_url: str) -> None:
    hook = await Hook(services, base_url).create("ada", {"allow_all": True})
    ids = await _store_deliveries(hook)
    await set_trust(services, hook.caller, hook.id, {"logins": ["octocat"]})
    tested = await set_rules(services, hook.caller, hook.id, RULES, save=False)
    row = next(r for r in tested["results"] if r["delivery"] == ids["review"])
    assert (row["disposition"], row["by"]) == ("quarantined", "trust")
    assert row["actor"]["trusted"] is False and row["actor"]["sender"] == "Codertocat"


async def test_the_dry_run_takes_the_newest_deliveries(hook: Hook) -> None:
    for _ in range(DRY_RUN_DELIVERIES + 2):
        await hook.deliver("issues")
    tested = await set_rules(
        hook.services, hook.caller, hook.id, {"rules": [rule("all", "true")]}, save=False
    )
    assert len(tested["results"]) == DRY_RUN_DELIVERIES
    assert tested["results"][0]["delivery"] == await _newest_event(hook)


# ---------------------------------------------------------------------------------------------
# Grants


async def test_rules_are_checked_against_the_grants_at_save_and_at_delivery(
    services: Services, base_url: str
) -> None:
    hook = await Hook(services, base_url).create("ada", {"allow_all": True})
    caller = hook.caller
    # A route to an endpoint granted "ops" as well; the webhook's own endpoint is not.
    other, _ = await tenancy.vend_endpoint(
        services.db, name="ops-agent", owner=hook.owner, queues=["default", "ops"]
    )
    await tenancy.add_route(services.db, hook.id, other.slug)
    to_owner = {
        "rules": [rule("ops", "true", {"type": "queue", "queue": "ops", "endpoints": [hook.endpoint.slug]})]
    }
    await _code(set_rules(services, caller, hook.id, to_owner), "not_granted")
    to_route = {"rules": [rule("ops", "true", {"type": "queue", "queue": "ops"})]}
    assert (await set_rules(services, caller, hook.id, to_route))["saved"] is True
    answer = await hook.deliver("issues")
    assert answer["disposition"] == "routed" and [(t["endpoint"], t["queue"]) for t in answer["todos"]] == [
        (other.slug, "ops")
    ]
    # The route goes: no target holds "ops" now. The saved rule no longer saves, and a delivery is
    # held as a rule fault rather than put on another queue.
    await routes.remove_route(services.db, hook.id, other.slug)
    await _code(set_rules(services, caller, hook.id, to_route), "not_granted")
    assert (await hook.deliver("issues"))["disposition"] == "faulted"
    [held] = (await quarantine.list_held(services.db, caller, webhook_id=hook.id)).rows
    assert held["reason"] == "rule_fault" and held["rule"] == "ops" and "not_granted" in held["fault"]
    async with services.db.read() as s:
        made = (await s.scalars(select(Todo).join(Endpoint).where(Endpoint.id == other.id))).all()
    assert len(made) == 1
