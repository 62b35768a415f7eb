"""A route's target can withdraw it (issue 13, item 10): either side's administrators remove a
cross-scope route — API, CLI and web UI — and the target side learns nothing about the webhook's side
from listing, removing, or being refused."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner, Result
from sqlalchemy import func, select

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.cli import main
from switchboard.models import Route, Todo
from switchboard.services import Services
from switchboard.testing import post

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class World:
    """Bob's github webhook (his own scope) routes into ops-bot, an endpoint of team ops.

    Alice owns ops (she administers the target but cannot see Bob's scope), Dave is a plain member
    of ops, Eve is in no scope of either end."""

    tokens: dict[str, str]
    webhook_id: str
    ingest_token: str
    route_id: str

    def secrets_of_bobs_side(self) -> list[str]:
        # What the target side must never be told: the webhook, its URL, its endpoint and owner.
        return [self.webhook_id, self.ingest_token[:12], "bob-bot", "human:bob", '"bob"', ">bob<"]


@pytest.fixture
async def world(services: Services) -> World:
    db = services.db
    tokens = {}
    for handle in ("alice", "bob", "dave", "eve"):
        tokens[handle] = (await tenancy.add_human(db, handle))[1]
    await tenancy.add_team(db, "ops", "alice")
    await tenancy.set_member(db, "ops", "dave", "member")
    ops = await tenancy.resolve_owner(db, team="ops")
    bob = await tenancy.resolve_owner(db, human="bob")
    await tenancy.vend_endpoint(db, name="Ops Bot", owner=ops)
    await tenancy.vend_endpoint(db, name="Bob Bot", owner=bob)
    made = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="bob-bot", source="generic"
    )
    # The operator consented for both scopes (no human administers both).
    route = await tenancy.add_route(db, made.webhook.id, "ops-bot")
    return World(tokens, made.webhook.id, made.ingest_token, route.id)


class Api:
    def __init__(self, http: aiohttp.ClientSession, base_url: str, token: str) -> None:
        self.http, self.base_url, self.token = http, base_url, token

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any, str]:
        headers = {"Authorization": f"Bearer {self.token}"}
        data = json.dumps(body).encode() if body is not None else None
        async with self.http.request(
            method, f"{self.base_url}{PREFIX}{path}", data=data, headers=headers
        ) as r:
            text = await r.text()
            assert r.status < 500, text
            return r.status, json.loads(text), text


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def api(http: aiohttp.ClientSession, base_url: str, world: World) -> dict[str, Api]:
    return {handle: Api(http, base_url, token) for handle, token in world.tokens.items()}


async def routes_left(services: Services) -> int:
    async with services.db.read() as s:
        return int(await s.scalar(select(func.count()).select_from(Route)) or 0)


async def todos_of(services: Services, slug: str) -> int:
    endpoint = await tenancy.get_endpoint(services.db, slug)
    async with services.db.read() as s:
        return int(await s.scalar(select(func.count(Todo.id)).where(Todo.endpoint_id == endpoint.id)) or 0)


def leaks(world: World, text: str) -> list[str]:
    return [s for s in world.secrets_of_bobs_side() if s in text]


# ---------------------------------------------------------------------------------------------
# API


async def test_the_target_side_lists_routes_into_it_without_the_webhook_side(
    api: dict[str, Api], world: World
) -> None:
    status, payload, text = await api["alice"].call("GET", "/routes")
    assert status == 200
    assert payload == {
        "routes": [
            {
                "id": world.route_id,
                "endpoint": "ops-bot",
                "queue": "default",
                "created_at": payload["routes"][0]["created_at"],
                "webhook": None,
            }
        ],
        "next_before": None,
        "next_after": None,
    }
    assert leaks(world, text) == []
    # A member of ops sees it the same way; Eve sees none; Bob (no endpoint it routes into) none.
    assert (await api["dave"].call("GET", "/routes"))[1]["routes"][0]["webhook"] is None
    assert (await api["eve"].call("GET", "/routes"))[1] == {
        "routes": [],
        "next_before": None,
        "next_after": None,
    }
    assert (await api["bob"].call("GET", "/routes"))[1] == {
        "routes": [],
        "next_before": None,
        "next_after": None,
    }
    assert (await api["alice"].call("GET", "/routes?team=ops"))[1]["routes"][0]["id"] == world.route_id
    assert (await api["eve"].call("GET", "/routes?team=ops"))[0] == 404


async def test_the_target_admin_withdraws_by_route_id_and_deliveries_stop(
    api: dict[str, Api], world: World, services: Services, base_url: str
) -> None:
    status, _, _ = await post(base_url, world.ingest_token, b'{"n": 1}', {"Content-Type": "application/json"})
    assert status in (200, 202)
    assert (await todos_of(services, "ops-bot"), await todos_of(services, "bob-bot")) == (1, 1)

    status, payload, text = await api["alice"].call("DELETE", f"/routes/{world.route_id}")
    assert status == 200, payload
    assert payload["removed"] is True and "webhook" not in payload
    assert payload["route"]["id"] == world.route_id and payload["route"]["webhook"] is None
    assert leaks(world, text) == []
    assert await routes_left(services) == 0

    status, _, _ = await post(base_url, world.ingest_token, b'{"n": 2}', {"Content-Type": "application/json"})
    assert status in (200, 202)
    assert (await todos_of(services, "ops-bot"), await todos_of(services, "bob-bot")) == (1, 2)

    # Gone: the same answer as a route id that never existed.
    status, payload, text = await api["alice"].call("DELETE", f"/routes/{world.route_id}")
    assert (status, payload["error"]) == (404, "not_found") and leaks(world, text) == []
    never = (await api["alice"].call("DELETE", "/routes/rt_never"))[1]["message"]
    assert payload["message"].replace(world.route_id, "rt_never") == never


async def test_the_target_admin_withdraws_by_webhook_and_endpoint_too(
    api: dict[str, Api], world: World, services: Services
) -> None:
    """The route the issue reproduced: 404 before, because the webhook was resolved first."""
    status, payload, text = await api["alice"].call("DELETE", f"/webhooks/{world.webhook_id}/routes/ops-bot")
    assert status == 200, payload
    assert "webhook" not in payload and payload["route"]["webhook"] is None
    assert [s for s in leaks(world, text) if s != world.webhook_id] == []  # she named it herself
    assert await routes_left(services) == 0
    # Now that it is gone, an existing webhook and a made-up one answer alike.
    status, payload, _ = await api["alice"].call("DELETE", f"/webhooks/{world.webhook_id}/routes/ops-bot")
    assert (status, payload["error"]) == (404, "not_found")
    made_up = (await api["alice"].call("DELETE", "/webhooks/wh_madeup/routes/ops-bot"))[1]["message"]
    assert payload["message"].replace(world.webhook_id, "wh_madeup") == made_up


async def test_refusals_tell_the_other_side_nothing(
    api: dict[str, Api], world: World, services: Services
) -> None:
    # Dave can see the route into his team's endpoint but administers neither end: 403 by id.
    status, payload, text = await api["dave"].call("DELETE", f"/routes/{world.route_id}")
    assert (status, payload["error"]) == (403, "forbidden") and leaks(world, text) == []
    # By webhook id he cannot see the webhook, and does not administer the target: as if absent.
    status, payload, text = await api["dave"].call("DELETE", f"/webhooks/{world.webhook_id}/routes/ops-bot")
    assert (status, payload["error"]) == (404, "not_found")
    # Eve sees neither end: exactly the answer for a route that does not exist.
    status, payload, text = await api["eve"].call("DELETE", f"/routes/{world.route_id}")
    assert (status, payload["error"]) == (404, "not_found") and leaks(world, text) == []
    never = (await api["eve"].call("DELETE", "/routes/rt_never"))[1]["message"]
    assert payload["message"].replace(world.route_id, "rt_never") == never
    assert await routes_left(services) == 1


async def test_the_webhook_side_withdraws_too_and_sees_its_webhook(
    api: dict[str, Api], world: World, services: Services
) -> None:
    status, payload, _ = await api["bob"].call("DELETE", f"/routes/{world.route_id}")
    assert status == 200
    assert payload["webhook"]["id"] == world.webhook_id and payload["webhook"]["routes"] == []
    assert (
        payload["route"]["webhook"] == world.webhook_id and payload["route"]["webhook_endpoint"] == "bob-bot"
    )
    assert await routes_left(services) == 0
    # The old path, for the webhook side, answers as it always did (with the webhook).
    await tenancy.add_route(services.db, world.webhook_id, "ops-bot")
    status, payload, _ = await api["bob"].call("DELETE", f"/webhooks/{world.webhook_id}/routes/ops-bot")
    assert status == 200 and payload["webhook"]["routes"] == []


async def test_route_answers_match_the_documented_schemas(
    api: dict[str, Api], world: World, http: aiohttp.ClientSession, base_url: str, services: Services
) -> None:
    from jsonschema import Draft202012Validator

    async with http.get(f"{base_url}{PREFIX}/openapi.json") as r:
        doc = await r.json()

    def check(template: str, method: str, payload: Any) -> None:
        schema = doc["paths"][PREFIX + template][method.lower()]["responses"]["200"]["content"][
            "application/json"
        ]["schema"]
        Draft202012Validator({**schema, "components": doc["components"]}).validate(payload)

    check("/routes", "GET", (await api["alice"].call("GET", "/routes"))[1])
    check("/routes/{id}", "DELETE", (await api["alice"].call("DELETE", f"/routes/{world.route_id}"))[1])
    route = await tenancy.add_route(services.db, world.webhook_id, "ops-bot")
    check("/routes/{id}", "DELETE", (await api["bob"].call("DELETE", f"/routes/{route.id}"))[1])
    await tenancy.add_route(services.db, world.webhook_id, "ops-bot")
    check(
        "/webhooks/{id}/routes/{endpoint}",
        "DELETE",
        (await api["alice"].call("DELETE", f"/webhooks/{world.webhook_id}/routes/ops-bot"))[1],
    )


# ---------------------------------------------------------------------------------------------
# CLI


async def test_the_operator_lists_routes_with_ids_and_removes_one_by_id(
    world: World, database_url: str, services: Services
) -> None:
    env = {
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_SECRET_ENCRYPTION_KEY": base64.b64encode(bytes(range(32))).decode(),
    }
    runner = CliRunner(env=env)

    async def cli(*args: str) -> Result:
        return await asyncio.to_thread(runner.invoke, main, list(args), catch_exceptions=False)

    listed = await cli("webhook", "route", "list", "--json")
    assert listed.exit_code == 0
    (row,) = json.loads(listed.stdout)["routes"]
    assert row["id"] == world.route_id and row["webhook"] == world.webhook_id
    assert row["webhook_endpoint"] == "bob-bot" and row["endpoint"] == "ops-bot"
    text = await cli("webhook", "route", "list", "--endpoint", "ops-bot")
    assert world.route_id in text.stdout and "bob-bot -> ops-bot" in text.stdout
    # A filter naming no webhook is a typo, said so, not an empty list that reads as "no routes".
    unknown = await cli("webhook", "route", "list", "--webhook", "wh_x", "--json")
    assert unknown.exit_code == 1 and unknown.stderr.startswith("error: not_found: ")
    # One that exists but has no routes is an empty list.
    assert json.loads((await cli("webhook", "route", "list", "--endpoint", "bob-bot", "--json")).stdout) == {
        "routes": [],
        "next_before": None,
        "next_after": None,
    }

    for args in (
        ("webhook", "route", "remove", world.webhook_id),
        ("webhook", "route", "remove", "--endpoint", "ops-bot"),
        ("webhook", "route", "remove", world.webhook_id, "--route", world.route_id),
        ("webhook", "route", "remove"),
    ):
        refused = await cli(*args)
        assert refused.exit_code == 2 and refused.stderr.startswith("error: usage:"), (args, refused.stderr)
    missing = await cli("webhook", "route", "remove", "--route", "rt_nope")
    assert missing.exit_code == 1 and missing.stderr.startswith("error: not_found")

    removed = await cli("webhook", "route", "remove", "--route", world.route_id, "--json")
    assert removed.exit_code == 0, removed.stderr
    assert json.loads(removed.stdout) == {
        "route": {"id": world.route_id, "webhook": world.webhook_id, "endpoint": "ops-bot"},
        "removed": True,
    }
    assert await routes_left(services) == 0
    # The old form keeps working.
    await tenancy.add_route(services.db, world.webhook_id, "ops-bot")
    again = await cli("webhook", "route", "remove", world.webhook_id, "--endpoint", "ops-bot")
    assert again.exit_code == 0 and "no longer delivers to ops-bot" in again.stdout
    gone = await cli("webhook", "route", "remove", world.webhook_id, "--endpoint", "ops-bot")
    assert gone.exit_code == 1 and gone.stderr.startswith("error: not_found")


# ---------------------------------------------------------------------------------------------
# Web UI


class Browser:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.csrf = ""

    async def request(
        self, method: str, path: str, data: dict[str, str] | None = None
    ) -> tuple[aiohttp.ClientResponse, str]:
        async with self.http.request(method, self.base_url + path, data=data, allow_redirects=False) as r:
            return r, await r.text()

    async def login(self, token: str) -> None:
        _, page = await self.request("GET", "/ui/login")
        found = CSRF_RE.search(page)
        assert found is not None
        resp, _ = await self.request("POST", "/ui/login", {"csrf": found.group(1), "token": token})
        assert resp.status == 303
        _, board = await self.request("GET", "/ui")
        csrf = CSRF_RE.search(board)
        assert csrf is not None
        self.csrf = csrf.group(1)


@pytest.fixture
async def browser_of(base_url: str, world: World) -> AsyncIterator[Any]:
    made: list[Browser] = []

    async def login(handle: str) -> Browser:
        browser = Browser(base_url)
        made.append(browser)
        await browser.login(world.tokens[handle])
        return browser

    yield login
    for b in made:
        await b.http.close()


async def test_the_webhooks_page_shows_routes_in_and_the_target_admin_withdraws(
    browser_of: Any, world: World, services: Services
) -> None:
    alice = await browser_of("alice")
    resp, page = await alice.request("GET", "/ui/webhooks")
    assert resp.status == 200
    assert "Routes into your endpoints from other scopes" in page and world.route_id in page
    assert "a webhook in another scope" in page and f"/ui/routes/{world.route_id}/remove" in page
    assert leaks(world, page) == []

    # Dave sees the row but has no button, and a hand-made POST is refused.
    dave = await browser_of("dave")
    _, page = await dave.request("GET", "/ui/webhooks")
    assert world.route_id in page and f"/ui/routes/{world.route_id}/remove" not in page
    resp, page = await dave.request("POST", f"/ui/routes/{world.route_id}/remove", {"csrf": dave.csrf})
    assert resp.status == 403 and leaks(world, page) == []
    # Eve sees nothing, and gets the page for a route that does not exist.
    eve = await browser_of("eve")
    _, page = await eve.request("GET", "/ui/webhooks")
    assert world.route_id not in page
    resp, page = await eve.request("POST", f"/ui/routes/{world.route_id}/remove", {"csrf": eve.csrf})
    assert resp.status == 404 and leaks(world, page) == []
    # Without the CSRF token nothing happens.
    resp, _ = await alice.request("POST", f"/ui/routes/{world.route_id}/remove")
    assert resp.status == 403 and await routes_left(services) == 1

    # Withdrawing asks first: a POST without the confirmation page's yes leads there.
    resp, _ = await alice.request("POST", f"/ui/routes/{world.route_id}/remove", {"csrf": alice.csrf})
    assert resp.status == 303 and resp.headers["Location"] == f"/ui/routes/{world.route_id}/remove"
    _, page = await alice.request("GET", resp.headers["Location"])
    assert "Withdraw this route?" in page and leaks(world, page) == [] and await routes_left(services) == 1
    resp, _ = await alice.request(
        "POST", f"/ui/routes/{world.route_id}/remove", {"csrf": alice.csrf, "confirm": "yes"}
    )
    assert resp.status == 303 and resp.headers["Location"] == "/ui/webhooks"
    _, page = await alice.request("GET", "/ui/webhooks")
    assert "Route removed." in page and world.route_id not in page
    assert await routes_left(services) == 0


async def test_the_webhook_side_sees_the_route_on_its_webhook_row_not_as_incoming(
    browser_of: Any, world: World, services: Services
) -> None:
    bob = await browser_of("bob")
    _, page = await bob.request("GET", "/ui/webhooks")
    assert "Routes into your endpoints" not in page and "ops-bot" in page
    # Once Bob belongs to ops too, the route is into a scope of his from a webhook he can see: the
    # section names the webhook.
    await tenancy.set_member(services.db, "ops", "bob", "member")
    _, page = await bob.request("GET", "/ui/webhooks")
    assert "Routes into your endpoints from other scopes" in page
    assert world.webhook_id in page and "a webhook in another scope" not in page
