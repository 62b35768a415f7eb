"""Intake over the operator API, over real HTTP (docs/routing.md, docs/api.md): trust on create and
its codes, the trust and rules routes with every stable code, the dry run, the quarantine list,
release (to a queue, and trust-and-release making work an agent claims over the real MCP client),
discard, another tenant's 404 and a team member's 403, and garbage bodies that must never be a 500.

Real signed GitHub deliveries (octokit's payloads in tests/fixtures/github) go through ingest. Every
answer, success or error, is validated against the schema the OpenAPI document promises for it.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from jsonschema import Draft202012Validator

from switchboard import tenancy
from switchboard.api import PREFIX, openapi_document
from switchboard.db import Database
from switchboard.services import Services
from switchboard.testing import connect, github_headers, post

FIXTURES = Path(__file__).parent / "fixtures" / "github"
COMMENT = "issue_comment/created.payload.json"
DOCUMENT = openapi_document()
# (method, path regex, template): fixed paths before parameterised ones, as aiohttp routes them.
TEMPLATES = sorted(
    (
        (method.upper(), re.compile("^" + re.sub(r"{\w+}", "[^/]+", path) + "$"), path)
        for path, ops in DOCUMENT["paths"].items()
        for method in ops
    ),
    key=lambda t: t[2].count("{"),
)


def documented(method: str, url_path: str, status: int, payload: Any) -> None:
    """The answer is one the document promises: its status is listed and its body validates."""
    for want, pattern, template in TEMPLATES:
        if want == method and pattern.match(url_path):
            responses = DOCUMENT["paths"][template][method.lower()]["responses"]
            assert str(status) in responses, (method, template, status, payload)
            schema = responses[str(status)]["content"]["application/json"]["schema"]
            Draft202012Validator({**schema, "components": DOCUMENT["components"]}).validate(payload)
            return
    raise AssertionError(f"{method} {url_path} is not in the document")


class Api:
    """One human's client; every answer checked: JSON, never a 500, and as documented."""

    def __init__(self, http: aiohttp.ClientSession, base_url: str, token: str) -> None:
        self.http, self.base_url, self.token = http, base_url, token

    async def call(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        async with self.http.request(
            method, f"{self.base_url}{PREFIX}{path}", data=data, headers=headers
        ) as r:
            text = await r.text()
            assert r.status < 500, (method, path, r.status, text[:2000])
            payload = json.loads(text)
        if r.status != 413:  # the body limit answers before any route: not a route's own answer
            documented(method, PREFIX + path.split("?")[0], r.status, payload)
        return r.status, payload

    async def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        got, payload = await self.call(method, path, body)
        assert got == status, (method, path, got, payload)
        return payload

    async def error(self, method: str, path: str, body: Any = None, *, status: int = 400, code: str) -> Any:
        got, payload = await self.call(method, path, body)
        assert (got, payload.get("error")) == (status, code), (method, path, body, payload)
        return payload


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _human(db: Database, http: aiohttp.ClientSession, base_url: str, handle: str) -> Api:
    _, token = await tenancy.add_human(db, handle)
    return Api(http, base_url, token)


@pytest.fixture
async def alice(db: Database, http: aiohttp.ClientSession, base_url: str) -> Api:
    return await _human(db, http, base_url, "alice")


@pytest.fixture
async def bob(db: Database, http: aiohttp.ClientSession, base_url: str) -> Api:
    return await _human(db, http, base_url, "bob")


class Hook:
    """A GitHub webhook made over the API, and signed deliveries to it."""

    def __init__(self, api: Api, created: dict[str, Any]) -> None:
        self.api, self.id = api, created["webhook"]["id"]
        self.token, self.secret = created["ingest_url"].rsplit("/", 1)[1], created["secret"]

    @classmethod
    async def create(cls, api: Api, endpoint: str, trust: Any) -> Hook:
        body = {"endpoint": endpoint, "source": "github", "trust": trust}
        return cls(api, await api.ok("POST", "/webhooks", body, 201))

    async def deliver(self, name: str = COMMENT, *, sender: str = "Codertocat") -> dict[str, Any]:
        payload = json.loads((FIXTURES / name).read_bytes())
        payload["sender"]["login"] = sender
        payload["switchboard_test"] = str(uuid.uuid4())  # every body its own delivery
        body = json.dumps(payload).encode()
        headers = github_headers(self.secret, body, name.split("/")[0], str(uuid.uuid4()))
        status, answer, _ = await post(self.api.base_url, self.token, body, headers)
        assert status == 202, answer
        return answer

    async def held(self) -> str:
        assert (await self.deliver())["disposition"] == "quarantined"
        return str((await self.api.ok("GET", f"/quarantine?webhook={self.id}&limit=1"))["todos"][0]["id"])


async def _endpoint(api: Api, name: str, **extra: Any) -> dict[str, Any]:
    return dict(await api.ok("POST", "/endpoints", {"name": name, **extra}, 201))


# ---------------------------------------------------------------------------------------------
# Trusted actors


async def test_creating_a_webhook_asks_for_the_trust_choice(alice: Api) -> None:
    await _endpoint(alice, "Alice Bot")
    base = {"endpoint": "alice-bot", "source": "github"}
    await alice.error("POST", "/webhooks", base, code="trust_required")
    await alice.error("POST", "/webhooks", {**base, "trust": None}, code="trust_required")
    bad: Any
    for bad in ({}, "octocat", ["octocat"], 7, {"logins": []}, {"logins": "octocat"}, {"logins": [""]},
                {"logins": ["a\u0000b"]}, {"allow_all": False}, {"allow_all": True, "logins": ["x"]},
                {"logins": ["x"], "match": "everyone"}, {"actor_ids": ["usr_1"]}, {"logins": ["x" * 101]},
                {"logins": [f"u{i}" for i in range(201)]}):  # fmt: skip
        await alice.error("POST", "/webhooks", {**base, "trust": bad}, code="invalid_trust")
    for source in ("generic", "slack", "stripe"):
        body = {"endpoint": "alice-bot", "source": source, "trust": {"allow_all": True}}
        await alice.error("POST", "/webhooks", body, code="trust_not_supported")
    generic = await alice.ok("POST", "/webhooks", {"endpoint": "alice-bot", "source": "generic"}, 201)
    assert generic["webhook"]["trust"] is None and generic["webhook"]["quarantined"] == 0

    made = await alice.ok(
        "POST", "/webhooks", {**base, "trust": {"logins": [" octocat", "Hubot", "OCTOCAT"]}}, 201
    )
    view = made["webhook"]
    assert view["trust"] == {"logins": ["Hubot", "octocat"], "match": "sender"}
    assert (view["rules"], view["quarantined"]) == (0, 0)
    cairn = {"endpoint": "alice-bot", "source": "cairn", "trust": {"actor_ids": ["usr_1"]}}
    assert (await alice.ok("POST", "/webhooks", cairn, 201))["webhook"]["trust"] == {"actor_ids": ["usr_1"]}
    listed = (await alice.ok("GET", "/webhooks"))["webhooks"]
    assert all({"trust", "rules", "quarantined"} <= set(w) for w in listed) and len(listed) == 3

    kinds = {k["name"]: k for k in (await alice.ok("GET", "/kinds"))["sources"]}
    assert kinds["github"]["trust"] == {
        "field": "logins",
        "label": "GitHub login",
        "case_insensitive": True,
        "matches": ["sender", "author", "both"],
    }
    assert kinds["cairn"]["trust"]["field"] == "actor_ids" and kinds["cairn"]["trust"]["matches"] == [
        "sender"
    ]
    assert kinds["generic"]["trust"] is None and kinds["slack"]["trust"] is None


async def test_trust_is_shown_and_replaced(alice: Api) -> None:
    await _endpoint(alice, "Alice Bot")
    hook = await Hook.create(alice, "alice-bot", {"logins": ["octocat"]})
    shown = await alice.ok("GET", f"/webhooks/{hook.id}/trust")
    assert shown["supported"] is True and shown["label"] == "GitHub login"
    assert shown["matches"] == ["sender", "author", "both"] and "octocat" in shown["described"]
    path = f"/webhooks/{hook.id}/trust"
    set_ = await alice.ok("PUT", path, {"trust": {"logins": ["monalisa"], "match": "author"}})
    assert set_["trust"] == {"logins": ["monalisa"], "match": "author"}
    assert (await alice.ok("GET", f"/webhooks/{hook.id}"))["webhook"]["trust"] == set_["trust"]
    await alice.error("PUT", path, {"trust": None}, code="trust_required")
    await alice.error("PUT", path, {}, code="invalid_argument")
    await alice.error("PUT", path, {"trust": {"allow_all": "yes"}}, code="invalid_trust")
    await alice.error("PUT", path, {"trust": {"allow_all": True}, "extra": 1}, code="invalid_argument")
    assert (await alice.ok("PUT", path, {"trust": {"allow_all": True}}))["described"] == "all actors allowed"
    generic = await alice.ok("POST", "/webhooks", {"endpoint": "alice-bot", "source": "generic"}, 201)
    gpath = f"/webhooks/{generic['webhook']['id']}/trust"
    assert (await alice.ok("GET", gpath))["supported"] is False
    await alice.error("PUT", gpath, {"trust": {"allow_all": True}}, code="trust_not_supported")


# ---------------------------------------------------------------------------------------------
# Quarantine


async def test_untrusted_delivery_is_held_listed_and_trust_released_to_an_agent(
    alice: Api, services: Services, base_url: str
) -> None:
    vended = await _endpoint(alice, "Alice Bot", queues=["default", "triage"])
    endpoint = await tenancy.get_endpoint(services.db, "alice-bot")
    hook = await Hook.create(alice, "alice-bot", {"logins": ["octocat"]})
    async with connect(base_url, vended["token"], endpoint) as agent:
        held_id = await hook.held()
        # No agent sees or hears of it, and the board's todo list leaves it out.
        assert (await agent.ok("list_todos"))["todos"] == []
        assert await agent.ok("claim_next") == {"empty": True}
        assert await agent.listener.silence(0.3)
        assert (await alice.ok("GET", "/todos"))["todos"] == []
        assert (await alice.ok("GET", f"/webhooks/{hook.id}"))["webhook"]["quarantined"] == 1

        listed = (await alice.ok("GET", "/quarantine"))["todos"]
        assert [row["id"] for row in listed] == [held_id]
        row = listed[0]
        assert (row["webhook"], row["endpoint"], row["reason"], row["state"]) == (
            hook.id,
            "alice-bot",
            "untrusted_actor",
            "held",
        )
        assert row["actor"]["sender"] == "Codertocat" and row["actor"]["trusted"] is False
        assert row["event"] == "issue_comment.created" and row["expires_at"]
        detail = (await alice.ok("GET", f"/todos/{held_id}"))["todo"]
        assert detail["state"] == "held" and detail["queue"] == "quarantine"
        assert detail["hold"]["reason"] == "untrusted_actor" and detail["hold"]["expires_at"]
        assert detail["routing"]["by"] == "trust" and detail["routing"]["actor"]["sender"] == "Codertocat"

        released = await alice.ok("POST", f"/quarantine/{held_id}/release", {"trust": True})
        assert released["trusted"] == ["Codertocat"] and released["outcome"] == "routed"
        assert released["todo"]["state"] == "cancelled" and released["event"]["action"] == "trust_release"
        [made] = released["todos"]
        assert (made["endpoint"], made["queue"]) == ("alice-bot", "default")
        await agent.listener.next_ring(5.0)
        claimed = (await agent.ok("claim_next"))["todo"]
        assert claimed["id"] == made["id"] and claimed["kind"] == "issue_comment.created"

    new = (await alice.ok("GET", f"/todos/{made['id']}"))["todo"]
    assert new["state"] == "claimed" and new["routing"]["by"] == "release" and new["hold"] is None
    old = (await alice.ok("GET", f"/todos/{held_id}"))["todo"]
    assert old["state"] == "cancelled" and old["hold"]["reason"] == "untrusted_actor"
    assert [h["action"] for h in old["history"]] == ["trust_release"]
    webhook = (await alice.ok("GET", f"/webhooks/{hook.id}"))["webhook"]
    assert webhook["quarantined"] == 0 and webhook["trust"]["logins"] == ["Codertocat", "octocat"]
    # Decided once: a second decision is a conflict.
    await alice.error("POST", f"/quarantine/{held_id}/release", {}, status=409, code="conflict")
    await alice.error("POST", f"/quarantine/{held_id}/discard", {"reason": "x"}, status=409, code="conflict")
    # The sender is trusted from now on.
    assert (await hook.deliver())["disposition"] == "routed"


async def test_release_to_a_queue_discard_and_the_pages(alice: Api) -> None:
    await _endpoint(alice, "Alice Bot", queues=["default", "triage"])
    hook = await Hook.create(alice, "alice-bot", {"logins": ["octocat"]})
    ids = [await hook.held() for _ in range(3)]
    first = await alice.ok("GET", "/quarantine?limit=2")
    assert [r["id"] for r in first["todos"]] == [ids[2], ids[1]] and first["next_after"] is None
    second = await alice.ok("GET", f"/quarantine?limit=2&before={first['next_before']}")
    assert [r["id"] for r in second["todos"]] == [ids[0]] and second["next_before"] is None
    back = await alice.ok("GET", f"/quarantine?limit=2&after={second['next_after']}")
    assert [r["id"] for r in back["todos"]] == [ids[2], ids[1]]
    for query in ("limit=0", "limit=1001", "before=nonsense", f"before={ids[0]}&after={ids[1]}", "colour=red",
                  "limit=1&limit=2"):  # fmt: skip
        await alice.error("GET", f"/quarantine?{query}", code="invalid_argument")
    await alice.error("GET", "/quarantine?webhook=wh_nope", status=404, code="not_found")

    release = f"/quarantine/{ids[0]}/release"
    await alice.error("POST", release, {"queue": "billing"}, code="not_granted")
    await alice.error("POST", release, {"queue": "quarantine"}, code="invalid_argument")
    await alice.error("POST", release, {"queue": 7}, code="invalid_argument")
    await alice.error("POST", release, {"trust": "yes"}, code="invalid_argument")
    answer = await alice.ok("POST", release, {"queue": "triage"})
    [made] = answer["todos"]
    assert made["queue"] == "triage" and answer["event"]["action"] == "release" and answer["trusted"] == []
    assert answer["routing"]["by"] == "release"

    discard = f"/quarantine/{ids[1]}/discard"
    for bad in (
        {},
        {"reason": ""},
        {"reason": "   "},
        {"reason": 7},
        {"reason": "x" * 501},
        {"reason": "a\u0000"},
    ):
        await alice.error("POST", discard, bad, code="invalid_argument")
    gone = await alice.ok("POST", discard, {"reason": " spam,\n  plainly "})
    assert gone["todo"]["state"] == "cancelled" and gone["event"]["detail"] == "spam, plainly"
    assert gone["event"]["action"] == "discard"
    assert [r["id"] for r in (await alice.ok("GET", "/quarantine"))["todos"]] == [ids[2]]
    for missing in ("td_nope", "x" * 300):
        await alice.error(
            "POST", f"/quarantine/{missing}/discard", {"reason": "x"}, status=404, code="not_found"
        )


async def test_other_tenants_see_nothing_and_members_only_read(alice: Api, bob: Api) -> None:
    await _endpoint(alice, "Alice Bot")
    hook = await Hook.create(alice, "alice-bot", {"logins": ["octocat"]})
    held_id = await hook.held()
    rules = {"rules": [{"id": "r1", "expr": "true", "action": {"type": "drop"}}]}
    attempts: list[tuple[str, str, Any]] = [
        ("GET", f"/webhooks/{hook.id}/trust", None),
        ("PUT", f"/webhooks/{hook.id}/trust", {"trust": {"allow_all": True}}),
        ("GET", f"/webhooks/{hook.id}/rules", None),
        ("PUT", f"/webhooks/{hook.id}/rules", rules),
        ("POST", f"/webhooks/{hook.id}/rules/test", rules),
        ("GET", f"/quarantine?webhook={hook.id}", None),
        ("POST", f"/quarantine/{held_id}/release", {}),
        ("POST", f"/quarantine/{held_id}/release", {"trust": True}),
        ("POST", f"/quarantine/{held_id}/release", {"queue": "default"}),
        ("POST", f"/quarantine/{held_id}/discard", {"reason": "mine"}),
        ("GET", f"/todos/{held_id}", None),
    ]
    for method, path, body in attempts:
        await bob.error(method, path, body, status=404, code="not_found")
    assert (await bob.ok("GET", "/quarantine"))["todos"] == []

    # In a team's scope, a member reads and its owners and admins decide.
    await alice.ok("POST", "/teams", {"slug": "ops"}, 201)
    await alice.ok("PUT", "/teams/ops/members/bob", {"role": "member"})
    await _endpoint(alice, "Ops Bot", team="ops")
    team_hook = await Hook.create(alice, "ops-bot", {"logins": ["octocat"]})
    team_held = await team_hook.held()
    assert [r["id"] for r in (await bob.ok("GET", "/quarantine"))["todos"]] == [team_held]
    assert [r["id"] for r in (await bob.ok("GET", "/quarantine?team=ops"))["todos"]] == [team_held]
    await bob.ok("GET", f"/webhooks/{team_hook.id}/rules")
    await bob.ok("GET", f"/webhooks/{team_hook.id}/trust")
    for method, path, body in attempts:
        if method != "GET":
            team_path = path.replace(hook.id, team_hook.id).replace(held_id, team_held)
            await bob.error(method, team_path, body, status=403, code="forbidden")
    assert (await alice.ok("GET", "/quarantine?team=ops"))["todos"][0]["state"] == "held"
    await alice.error("GET", "/quarantine?team=nope", status=404, code="not_found")


# ---------------------------------------------------------------------------------------------
# Routing rules


def _rule(expr: Any = "true", action: Any = None, **extra: Any) -> dict[str, Any]:
    return {"id": "r1", "expr": expr, "action": action or {"type": "drop"}, **extra}


async def test_rules_are_checked_dry_run_and_saved(alice: Api) -> None:
    await _endpoint(alice, "Alice Bot", queues=["default", "reviews"])
    hook = await Hook.create(alice, "alice-bot", {"allow_all": True})
    assert (await hook.deliver())["disposition"] == "routed"
    assert (await hook.deliver("issues/opened.payload.json"))["disposition"] == "routed"
    path, test = f"/webhooks/{hook.id}/rules", f"/webhooks/{hook.id}/rules/test"
    empty = await alice.ok("GET", path)
    assert (empty["rules"], empty["active"], empty["routing"]["rules"]) == (0, False, [])

    rule_set = {
        "rules": [
            {"id": "comments", "name": "Comments to reviews", "expr": '.event == "issue_comment.created"',
             "action": {"type": "queue", "queue": "reviews", "once": True}},
        ],
        "default_action": {"type": "drop"},
        "params": {"bot": "ourbot"},
    }  # fmt: skip
    tried = await alice.ok("POST", test, rule_set)
    assert tried["saved"] is False and tried["error"] is None
    by_event = {r["event"]: r for r in tried["results"]}
    comment, opened = by_event["issue_comment.created"], by_event["issues.opened"]
    assert (comment["disposition"], comment["by"], comment["rule"]) == ("routed", "rule", "comments")
    assert comment["todos"] == [{"endpoint": "alice-bot", "queue": "reviews", "once": True}]
    assert (opened["disposition"], opened["by"], opened["todos"]) == ("dropped", "default", [])
    assert (await alice.ok("GET", path))["active"] is False  # a test stores nothing

    saved = await alice.ok("PUT", path, rule_set)
    assert saved["saved"] is True and saved["results"] == tried["results"]
    shown = await alice.ok("GET", path)
    assert shown["active"] is True and shown["rules"] == 1 and shown["routing"]["params"] == {"bot": "ourbot"}
    assert shown["routing"]["rules"][0]["action"] == {
        "type": "queue",
        "queue": "reviews",
        "endpoints": None,
        "exclusive": False,
        "once": True,
    }
    assert (await alice.ok("GET", f"/webhooks/{hook.id}"))["webhook"]["rules"] == 1
    # The stored form is accepted back unchanged; deliveries follow the rules.
    assert (await alice.ok("PUT", path, shown["routing"]))["routing"] == shown["routing"]
    assert (await hook.deliver("issues/opened.payload.json"))["disposition"] == "dropped"
    assert (await hook.deliver())["disposition"] == "routed"

    # A rule that faults on a stored delivery refuses the save (naming both); the test reports it.
    faulty = {"rules": [_rule('if .event == "issues.opened" then error("boom") else false end')]}
    refused = await alice.error("PUT", path, faulty, code="invalid_rule")
    assert refused["rule"] == "r1" and refused["delivery"].startswith("ev_") and "boom" in refused["message"]
    reported = await alice.ok("POST", test, faulty)
    assert reported["error"]["code"] == "invalid_rule" and reported["error"]["rule"] == "r1"
    assert any(r["fault"] for r in reported["results"])
    assert (await alice.ok("GET", path))["routing"] == shown["routing"]

    # An empty set clears them.
    cleared = await alice.ok("PUT", path, {"rules": []})
    assert cleared["routing"] == {"rules": [], "default_action": None, "params": {}}
    assert (await alice.ok("GET", path))["active"] is False


async def test_every_refusal_has_its_code_and_changes_nothing(alice: Api) -> None:
    await _endpoint(alice, "Alice Bot")
    hook = await Hook.create(alice, "alice-bot", {"allow_all": True})
    path, test = f"/webhooks/{hook.id}/rules", f"/webhooks/{hook.id}/rules/test"
    stored = {"rules": [_rule()]}
    await alice.ok("PUT", path, stored)
    cases: list[tuple[Any, str]] = [
        ({"rules": "r1"}, "invalid_rule"),
        ({"rules": [7]}, "invalid_rule"),
        ({"rules": [_rule(), _rule()]}, "invalid_rule"),
        ({"rules": [{**_rule(), "id": "Bad Id"}]}, "invalid_rule"),
        ({"rules": [{**_rule(), "colour": "red"}]}, "invalid_rule"),
        ({"rules": [{"id": "r1", "expr": "true"}]}, "invalid_rule"),
        ({"rules": [_rule(action={"type": "explode"})]}, "invalid_rule"),
        ({"rules": [_rule(action={"type": "queue", "endpoints": ["nobody"]})]}, "invalid_rule"),
        ({"default_action": {"type": "drop", "queue": "x"}}, "invalid_rule"),
        ({"rules": [_rule("(.a")]}, "invalid_expression"),
        ({"rules": [_rule(".a | no_such_function")]}, "invalid_expression"),
        ({"rules": [_rule("")]}, "invalid_expression"),
        ({"rules": [_rule(7)]}, "invalid_expression"),
        ({"rules": [_rule("." + "a" * 5000)]}, "invalid_expression"),
        ({"rules": [_rule("true\u0000")]}, "invalid_expression"),
        ({"rules": [_rule("env")]}, "forbidden_function"),
        ({"rules": [_rule("$ENV.HOME")]}, "forbidden_function"),
        ({"rules": [_rule("[inputs]")]}, "forbidden_function"),
        ({"rules": [_rule("now > 0")]}, "forbidden_function"),
        ({"rules": [_rule('import "x" as x; true')]}, "forbidden_function"),
        ({"rules": [_rule(action={"type": "queue", "queue": "billing"})]}, "not_granted"),
        ({"default_action": {"type": "queue", "queue": "billing"}}, "not_granted"),
        ({"rules": [{**_rule(), "id": f"r{i}"} for i in range(33)]}, "too_many_rules"),
        ({"rules": [], "params": [1]}, "invalid_params"),
        ({"rules": [], "params": {"big": "x" * 17000}}, "invalid_params"),
        ({"rules": [], "params": {"bad": "\ud800"}}, "invalid_params"),
    ]
    for body, code in cases:
        for method, where in (("PUT", path), ("POST", test)):
            answer = await alice.error(method, where, body, code=code)
            if code in ("invalid_expression", "forbidden_function", "not_granted") and "rules" in body:
                assert answer["rule"] is not None, answer
    await alice.error("PUT", path, {"rules": [], "extra": 1}, code="invalid_argument")
    assert (await alice.ok("GET", path))["routing"]["rules"] == [{**_rule(), "name": None}]


ROUTES = ["PUT rules", "POST rules/test", "PUT trust", "POST release", "POST discard", "POST webhooks"]


@pytest.mark.parametrize("route", ROUTES)
async def test_garbage_bodies_are_4xx_never_500(alice: Api, route: str) -> None:
    await _endpoint(alice, "Alice Bot")
    hook = await Hook.create(alice, "alice-bot", {"logins": ["octocat"]})
    held_id = await hook.held()
    method, tail = route.split(" ")
    path = {
        "rules": f"/webhooks/{hook.id}/rules",
        "rules/test": f"/webhooks/{hook.id}/rules/test",
        "trust": f"/webhooks/{hook.id}/trust",
        "release": f"/quarantine/{held_id}/release",
        "discard": f"/quarantine/{held_id}/discard",
        "webhooks": "/webhooks",
    }[tail]
    for raw in (b"{not json", b"\xff\xfe", b"[1, 2]", b'"rules"', b"null", b"[" * 100_000, b'{"a": NaN}',
                b'{"rules": [], "rules": []}', b'{"params": 1e400}'):  # fmt: skip
        status, payload = await alice.call(method, path, raw=raw)
        assert status == 400 and payload["error"] in ("invalid_body", "duplicate_key"), (raw[:20], payload)
    # Nested up to and past what the parser takes, written as text: the client's encoder would
    # stop first.
    templates = (
        '{"rules": N}',
        '{"rules": [{"id": N, "expr": "true", "action": {"type": "drop"}}]}',
        '{"rules": [{"id": "r1", "expr": "true", "action": N}]}',
        '{"rules": [], "params": {"deep": N}}',
        '{"default_action": N}',
        '{"trust": N}',
        '{"trust": {"logins": N}}',
        '{"queue": N, "reason": N}',
        '{"endpoint": "alice-bot", "source": "github", "trust": {"logins": [N]}}',
    )
    for depth in (50, 500, 900, 990, 2000):
        nested = "[" * depth + '"x"' + "]" * depth
        for template in templates:
            # Deep params are plain JSON: a rule set may carry them (200); the rest is refused.
            status, payload = await alice.call(method, path, raw=template.replace("N", nested).encode())
            assert status == 400 or ("params" in template and status == 200), (depth, template, payload)
    big = b'{"rules": [], "params": {"x": "' + b"a" * (6 * 1024 * 1024) + b'"}}'
    status, payload = await alice.call(method, path, raw=big)
    assert status == 413 and payload["error"] == "payload_too_large"
    # NUL anywhere in what would be stored: refused, never a database error (PostgreSQL text).
    for body in ({"rules": [], "params": {"k": "a\u0000b"}}, {"rules": [], "params": {"a\u0000": 1}}):
        status, payload = await alice.call(method, path, body)
        assert status in (200, 400), payload
