"""The operator API over real HTTP: authentication, scope isolation, team roles, one-time secrets,
bad input of every kind, and the OpenAPI document."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp.shared.exceptions import MCPError
from sqlalchemy import text

from switchboard import tenancy
from switchboard.api import OPERATIONS, PREFIX
from switchboard.db import Database
from switchboard.mcp import DOORBELL
from switchboard.models import Base
from switchboard.services import Services
from switchboard.testing import connect


class Api:
    """One human's client. Every response body is kept, so tests can grep all of them for secrets."""

    def __init__(self, http: aiohttp.ClientSession, base_url: str, token: str | None, seen: list[str]):
        self.http, self.base_url, self.token, self.seen = http, base_url, token, seen

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        expect: int | None = None,
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None:
            headers["Content-Type"] = "application/json"
        async with self.http.request(
            method, f"{self.base_url}{PREFIX}{path}", data=data, headers=headers
        ) as r:
            text = await r.text()
            self.seen.append(text)
            # Never a 500; 503 only where a test takes the database away.
            assert r.status < 500 or r.status == 503, (r.status, text)
            assert r.content_type == "application/json", (r.status, r.content_type, text)
            payload = json.loads(text)
            if r.status >= 400:
                assert set(payload) >= {"error", "message"}, payload
            if expect is not None:
                assert r.status == expect, (method, path, r.status, payload)
            return r.status, payload

    async def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        return (await self.call(method, path, body, expect=status))[1]

    async def error(self, method: str, path: str, body: Any = None, *, status: int, code: str) -> str:
        _, payload = await self.call(method, path, body, expect=status)
        assert payload["error"] == code, payload
        return str(payload["message"])


async def raw_database(services: Services) -> str:
    """Every stored value, to prove a secret is kept only hashed or encrypted."""
    parts: list[str] = []
    async with services.db.read() as s:
        for table in Base.metadata.sorted_tables:
            for row in await s.execute(text(f'SELECT * FROM "{table.name}"')):
                parts += [
                    bytes(v).decode("latin-1") if isinstance(v, bytes | memoryview) else str(v) for v in row
                ]
    return "\n".join(parts)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def seen() -> list[str]:
    return []


async def human(
    db: Database, http: aiohttp.ClientSession, base_url: str, seen: list[str], handle: str
) -> Api:
    _, token = await tenancy.add_human(db, handle)
    return Api(http, base_url, token, seen)


@pytest.fixture
async def alice(db: Database, http: aiohttp.ClientSession, base_url: str, seen: list[str]) -> Api:
    return await human(db, http, base_url, seen, "alice")


@pytest.fixture
async def bob(db: Database, http: aiohttp.ClientSession, base_url: str, seen: list[str]) -> Api:
    return await human(db, http, base_url, seen, "bob")


# ---------------------------------------------------------------------------------------------
# Authentication


async def test_every_route_needs_a_human_token(
    alice: Api, db: Database, http: aiohttp.ClientSession, base_url: str, seen: list[str]
) -> None:
    owner = await tenancy.resolve_owner(db, human="alice")
    _, agent_token = await tenancy.vend_endpoint(db, name="agent", owner=owner)
    for token in (None, "sbo_not-a-real-token", agent_token, "garbage"):
        anonymous = Api(http, base_url, token, seen)
        for op in OPERATIONS:
            path = op.path.replace("{", "").replace("}", "")
            status, payload = await anonymous.call(op.method, path, {} if op.body is not None else None)
            assert status == 401 and payload["error"] == "unauthorized", (op.operation_id, payload)
    async with http.get(f"{base_url}{PREFIX}/humans/me", headers={"Authorization": "Basic abc"}) as r:
        assert r.status == 401 and r.headers["WWW-Authenticate"] == "Bearer"


async def test_me_shows_the_caller_and_their_teams_but_not_the_token(alice: Api, bob: Api) -> None:
    await alice.ok("POST", "/teams", {"slug": "ops"}, 201)
    me = (await alice.ok("GET", "/humans/me"))["human"]
    assert me["handle"] == "alice" and me["teams"] == [{"slug": "ops", "role": "owner"}]
    assert alice.token not in json.dumps(me) and me["token_prefix"].startswith("sbo_")
    assert (await bob.ok("GET", "/humans/me"))["human"]["teams"] == []


# ---------------------------------------------------------------------------------------------
# Teams and roles


async def test_team_roles_owners_and_admins_manage_members_read(
    alice: Api, bob: Api, db: Database, http: aiohttp.ClientSession, base_url: str, seen: list[str]
) -> None:
    carol = await human(db, http, base_url, seen, "carol")
    dave = await human(db, http, base_url, seen, "dave")
    team = (await alice.ok("POST", "/teams", {"slug": "ops"}, 201))["team"]
    assert team["members"] == [{"handle": "alice", "role": "owner"}]
    await alice.error("POST", "/teams", {"slug": "ops"}, status=409, code="conflict")
    await alice.error("POST", "/teams", {"slug": "Not OK"}, status=400, code="invalid_argument")

    # Outsiders do not learn that the team exists.
    await bob.error("GET", "/teams/ops", status=404, code="not_found")
    await bob.error("PUT", "/teams/ops/members/bob", {"role": "owner"}, status=404, code="not_found")

    await alice.ok("PUT", "/teams/ops/members/bob", {"role": "admin"})
    await bob.ok("PUT", "/teams/ops/members/carol", {})  # an admin adds a member (default role)
    members = (await carol.ok("GET", "/teams/ops"))["team"]["members"]
    assert {m["handle"]: m["role"] for m in members} == {"alice": "owner", "bob": "admin", "carol": "member"}
    assert [t["slug"] for t in (await carol.ok("GET", "/teams"))["teams"]] == ["ops"]

    # Members read only; admins cannot make owners or touch an owner.
    await carol.error("PUT", "/teams/ops/members/dave", {}, status=403, code="forbidden")
    await bob.error("PUT", "/teams/ops/members/dave", {"role": "owner"}, status=403, code="forbidden")
    await bob.error("PUT", "/teams/ops/members/alice", {"role": "member"}, status=403, code="forbidden")
    await bob.error("DELETE", "/teams/ops/members/alice", status=403, code="forbidden")
    await carol.error("DELETE", "/teams/ops/members/bob", status=403, code="forbidden")
    await alice.error("PUT", "/teams/ops/members/nobody", {}, status=404, code="not_found")
    await alice.error("PUT", "/teams/ops/members/dave", {"role": "boss"}, status=400, code="invalid_argument")

    # The last owner stays; a member may leave; owners remove anyone.
    await alice.error("DELETE", "/teams/ops/members/alice", status=409, code="conflict")
    await carol.ok("DELETE", "/teams/ops/members/carol")
    await carol.error("GET", "/teams/ops", status=404, code="not_found")
    await alice.ok("PUT", "/teams/ops/members/dave", {"role": "owner"})
    await dave.ok("DELETE", "/teams/ops/members/bob")
    members = (await alice.ok("GET", "/teams/ops"))["team"]["members"]
    assert {m["handle"] for m in members} == {"alice", "dave"}


# ---------------------------------------------------------------------------------------------
# Endpoints


async def test_vend_shows_the_token_once_with_opt_in_families(
    alice: Api, bob: Api, services: Services
) -> None:
    vended = await alice.ok("POST", "/endpoints", {"name": "Alice Bot"}, 201)
    token = vended["token"]
    assert token not in await raw_database(services) and alice.token not in await raw_database(services)
    assert token.startswith("sbk_") and vended["mcp_url"].endswith("/mcp")
    assert vended["endpoint"]["families"] == ["basics"] and "warning" not in vended
    assert (await tenancy.endpoint_by_token(services.db, token)).slug == "alice-bot"

    full = await alice.ok(
        "POST",
        "/endpoints",
        {"name": "Keyholder", "families": ["reply", "connections"], "queues": ["ci"]},
        201,
    )
    assert full["endpoint"]["families"] == ["basics", "reply", "connections"]
    assert "outbound credentials" in full["warning"]

    listed = await alice.ok("GET", "/endpoints")
    assert [e["slug"] for e in listed["endpoints"]] == ["alice-bot", "keyholder"]
    shown = await alice.ok("GET", "/endpoints/alice-bot")
    for body in (listed, shown):
        assert token not in json.dumps(body) and full["token"] not in json.dumps(body)

    assert (await bob.ok("GET", "/endpoints")) == {"endpoints": [], "next_before": None, "next_after": None}
    await bob.error("GET", "/endpoints/alice-bot", status=404, code="not_found")
    await bob.error("POST", "/endpoints/alice-bot/revoke", status=404, code="not_found")

    await alice.error(
        "POST", "/endpoints", {"name": "x", "families": ["admin"]}, status=400, code="invalid_argument"
    )
    await alice.error(
        "POST", "/endpoints", {"name": "x", "queues": ["quarantine"]}, status=400, code="invalid_argument"
    )
    await alice.error(
        "POST", "/endpoints", {"name": "x", "expires_in_days": 0}, status=400, code="invalid_argument"
    )
    await alice.error("POST", "/endpoints", {"name": "x", "team": "ops"}, status=404, code="not_found")
    await alice.error("POST", "/endpoints", {"name": "Alice bot"}, status=409, code="conflict")

    revoked = (await alice.ok("POST", "/endpoints/alice-bot/revoke"))["endpoint"]
    assert revoked["state"] == "revoked"
    assert await tenancy.endpoint_by_token(services.db, token) is None
    assert [e["slug"] for e in (await alice.ok("GET", "/endpoints?state=active"))["endpoints"]] == [
        "keyholder"
    ]


async def test_team_endpoints_members_read_admins_manage(alice: Api, bob: Api) -> None:
    await alice.ok("POST", "/teams", {"slug": "ops"}, 201)
    await alice.ok("PUT", "/teams/ops/members/bob", {})
    await bob.error("POST", "/endpoints", {"name": "Ops Bot", "team": "ops"}, status=403, code="forbidden")
    vended = await alice.ok("POST", "/endpoints", {"name": "Ops Bot", "team": "ops"}, 201)
    assert vended["endpoint"]["owner"] == "team:ops"
    seen_by_bob = (await bob.ok("GET", "/endpoints?team=ops"))["endpoints"]
    assert [e["slug"] for e in seen_by_bob] == ["ops-bot"]
    await bob.error("POST", "/endpoints/ops-bot/revoke", status=403, code="forbidden")
    await bob.error("GET", "/endpoints?team=elsewhere", status=404, code="not_found")
    await alice.ok("PUT", "/teams/ops/members/bob", {"role": "admin"})
    assert (await bob.ok("POST", "/endpoints/ops-bot/revoke"))["endpoint"]["state"] == "revoked"


# ---------------------------------------------------------------------------------------------
# Webhooks


async def test_webhooks_secrets_once_and_scope_isolation(
    alice: Api, bob: Api, seen: list[str], caplog: pytest.LogCaptureFixture, services: Services
) -> None:
    caplog.set_level(logging.DEBUG)
    await alice.ok("POST", "/endpoints", {"name": "Alice Bot", "queues": ["triage"]}, 201)
    await bob.ok("POST", "/endpoints", {"name": "Bob Bot", "queues": ["triage"]}, 201)

    created = await alice.ok(
        "POST", "/webhooks", {"endpoint": "alice-bot", "source": "github", "trust": {"allow_all": True}}, 201
    )
    webhook_id, first = created["webhook"]["id"], created["secret"]
    ingest_token = created["ingest_url"].rsplit("/", 1)[1]
    assert first.startswith("whsec_")
    rotated = await alice.ok("POST", f"/webhooks/{webhook_id}/rotate")
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != first

    slack = await alice.ok("POST", "/webhooks", {"endpoint": "alice-bot", "source": "slack"}, 201)
    assert slack["secret"] is None and slack["webhook"]["secret_state"] == "awaiting"
    slack_secret = "0123456789abcdef0123456789abcdef"
    done = await alice.ok("PUT", f"/webhooks/{slack['webhook']['id']}/secret", {"secret": slack_secret})
    assert done["webhook"]["secret_state"] == "set"
    await alice.error(
        "PUT", f"/webhooks/{webhook_id}/secret", {"secret": "x"}, status=400, code="invalid_argument"
    )
    await alice.error(
        "POST", f"/webhooks/{slack['webhook']['id']}/rotate", status=400, code="invalid_argument"
    )

    # Only the create/rotate responses ever carried the secrets.
    before = len(seen)
    listed = await alice.ok("GET", "/webhooks")
    assert len(listed["webhooks"]) == 2
    await alice.ok("GET", f"/webhooks/{webhook_id}")
    await alice.ok("GET", "/webhooks?endpoint=alice-bot")
    for body in seen[before:]:
        for secret in (first, rotated["secret"], slack_secret, ingest_token):
            assert secret not in body

    # Bob cannot see, rotate, re-secret, route or delete Alice's webhook; her endpoint is 404 to him.
    assert (await bob.ok("GET", "/webhooks")) == {"webhooks": [], "next_before": None, "next_after": None}
    for method, path, body in (
        ("GET", f"/webhooks/{webhook_id}", None),
        ("POST", f"/webhooks/{webhook_id}/rotate", None),
        ("PUT", f"/webhooks/{slack['webhook']['id']}/secret", {"secret": "mine"}),
        ("POST", f"/webhooks/{webhook_id}/routes", {"endpoint": "bob-bot"}),
        ("DELETE", f"/webhooks/{webhook_id}", None),
        ("GET", "/webhooks?endpoint=alice-bot", None),
    ):
        await bob.error(method, path, body, status=404, code="not_found")
    await bob.error(
        "POST", "/webhooks", {"endpoint": "alice-bot", "source": "github"}, status=404, code="not_found"
    )
    # Nor can Alice route her webhook into Bob's scope: his endpoint does not exist for her.
    await alice.error(
        "POST", f"/webhooks/{webhook_id}/routes", {"endpoint": "bob-bot"}, status=404, code="not_found"
    )

    await alice.error(
        "POST",
        "/webhooks",
        {"endpoint": "alice-bot", "source": "no_such_kind"},
        status=400,
        code="invalid_argument",
    )
    await alice.ok("DELETE", f"/webhooks/{webhook_id}")
    await alice.error("GET", f"/webhooks/{webhook_id}", status=404, code="not_found")
    stored = await raw_database(services)
    for secret in (first, rotated["secret"], slack_secret, ingest_token):
        assert secret not in caplog.text
        assert secret not in stored


async def test_routes_across_scopes_need_both_administered(alice: Api, bob: Api) -> None:
    await alice.ok("POST", "/teams", {"slug": "ops"}, 201)
    await alice.ok("PUT", "/teams/ops/members/bob", {})
    await alice.ok("POST", "/endpoints", {"name": "Ops Bot", "team": "ops"}, 201)
    await bob.ok("POST", "/endpoints", {"name": "Bob Bot"}, 201)
    await alice.ok("POST", "/endpoints", {"name": "Alice Bot"}, 201)
    bobs = (await bob.ok("POST", "/webhooks", {"endpoint": "bob-bot", "source": "generic"}, 201))["webhook"]

    # Bob is only a member of ops: he may not route his webhook into the team's endpoint.
    await bob.error(
        "POST", f"/webhooks/{bobs['id']}/routes", {"endpoint": "ops-bot"}, status=403, code="forbidden"
    )
    # Alice administers both her own scope and ops: her route is consented on both sides.
    alices = (await alice.ok("POST", "/webhooks", {"endpoint": "alice-bot", "source": "generic"}, 201))[
        "webhook"
    ]
    added = await alice.ok("POST", f"/webhooks/{alices['id']}/routes", {"endpoint": "ops-bot"}, 201)
    assert added["webhook"]["routes"] == ["ops-bot"]
    await alice.error(
        "POST", f"/webhooks/{alices['id']}/routes", {"endpoint": "ops-bot"}, status=409, code="conflict"
    )
    await alice.error(
        "POST",
        f"/webhooks/{alices['id']}/routes",
        {"endpoint": "alice-bot"},
        status=400,
        code="invalid_argument",
    )
    # Bob sees ops-bot but neither administers it nor sees Alice's webhook.
    await bob.error("DELETE", f"/webhooks/{alices['id']}/routes/ops-bot", status=404, code="not_found")
    # Filters combine: the team's webhooks are not Alice's own.
    assert (await alice.ok("GET", "/webhooks?team=ops")) == {
        "webhooks": [],
        "next_before": None,
        "next_after": None,
    }
    await alice.error("GET", "/webhooks?team=ops&endpoint=alice-bot", status=404, code="not_found")
    (own,) = (await alice.ok("GET", "/webhooks?endpoint=alice-bot"))["webhooks"]
    assert own["routes"] == ["ops-bot"]
    removed = await alice.ok("DELETE", f"/webhooks/{alices['id']}/routes/ops-bot")
    assert removed["webhook"]["routes"] == []
    await alice.error("DELETE", f"/webhooks/{alices['id']}/routes/ops-bot", status=404, code="not_found")


# ---------------------------------------------------------------------------------------------
# Connections


@pytest.fixture
async def fake_github() -> AsyncIterator[str]:
    """A stand-in GitHub API on 127.0.0.1 (``GET /user``) for connection tests."""

    async def user(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {GOOD_TOKEN}":
            return web.json_response({"message": "Bad credentials"}, status=401)
        return web.json_response({"login": "alice-bot"})

    app = web.Application()
    app.router.add_get("/user", user)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


GOOD_TOKEN = "ghp_goodtoken0000000000000000000000000000"


async def test_connections_write_only_and_scoped(
    alice: Api,
    bob: Api,
    seen: list[str],
    fake_github: str,
    services: Services,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # The operator-level override points the GitHub kind at the stand-in (read at dial time).
    services.settings = services.settings.model_copy(update={"github_api_url": fake_github})
    await alice.ok("POST", "/teams", {"slug": "ops"}, 201)
    await alice.ok("PUT", "/teams/ops/members/bob", {})
    await alice.ok("POST", "/endpoints", {"name": "Alice Bot"}, 201)

    bad = "ghp_badtoken11111111111111111111111111111"
    created = (
        await alice.ok(
            "POST",
            "/connections",
            {
                "kind": "github",
                "name": "gh",
                "account_key": "github.com",
                "secret": bad,
                "targets": ["acme/*"],
                "endpoints": ["alice-bot"],
            },
            201,
        )
    )["connection"]
    conn_id = created["id"]
    assert created["fingerprint"].startswith("fp_") and created["owner"] == "human:alice"
    tested = await alice.ok("POST", f"/connections/{conn_id}/test")
    assert tested["test"]["ok"] is False and tested["test"]["error_class"] == "auth"
    rotated = (await alice.ok("POST", f"/connections/{conn_id}/rotate", {"secret": GOOD_TOKEN}))["connection"]
    assert rotated["fingerprint"] != created["fingerprint"]
    assert (await alice.ok("POST", f"/connections/{conn_id}/test"))["test"]["ok"] is True
    patched = (await alice.ok("PATCH", f"/connections/{conn_id}", {"name": "github", "targets": None}))[
        "connection"
    ]
    assert patched["name"] == "github" and patched["targets"] is None
    assert (await alice.ok("GET", f"/connections/{conn_id}"))["connection"]["last_test"]["ok"] is True

    team_conn = (
        await alice.ok(
            "POST",
            "/connections",
            {
                "team": "ops",
                "kind": "github",
                "name": "ops-gh",
                "account_key": "github.com",
                "secret": "ghp_teamsecret22222222222222222222222222",
            },
            201,
        )
    )["connection"]
    # A team member sees names, kinds, account keys and fingerprints only, and manages nothing.
    (member_view,) = (await bob.ok("GET", "/connections"))["connections"]
    assert set(member_view) == {"id", "owner", "kind", "name", "account_key", "fingerprint"}
    assert member_view["owner"] == "team:ops"
    await bob.ok("GET", f"/connections/{team_conn['id']}")
    for method, path, body in (
        ("POST", f"/connections/{team_conn['id']}/rotate", {"secret": "ghp_x"}),
        ("PATCH", f"/connections/{team_conn['id']}", {"name": "mine"}),
        ("POST", f"/connections/{team_conn['id']}/test", None),
        ("DELETE", f"/connections/{team_conn['id']}", None),
    ):
        await bob.error(method, path, body, status=403, code="forbidden")
    await bob.error(
        "POST",
        "/connections",
        {"team": "ops", "kind": "github", "name": "b", "account_key": "github.com", "secret": "ghp_x"},
        status=403,
        code="forbidden",
    )
    # Alice's own connection does not exist for Bob.
    for method, path, body in (
        ("GET", f"/connections/{conn_id}", None),
        ("POST", f"/connections/{conn_id}/rotate", {"secret": "ghp_x"}),
        ("PATCH", f"/connections/{conn_id}", {"name": "mine"}),
        ("POST", f"/connections/{conn_id}/test", None),
        ("DELETE", f"/connections/{conn_id}", None),
    ):
        await bob.error(method, path, body, status=404, code="not_found")

    await alice.error(
        "POST",
        "/connections",
        {"kind": "github", "name": "github", "account_key": "github.com", "secret": "ghp_y"},
        status=409,
        code="conflict",
    )
    await alice.error(
        "POST",
        "/connections",
        {"kind": "github", "name": "n", "account_key": "x"},
        status=400,
        code="invalid_argument",
    )  # no secret
    await alice.error(
        "POST",
        "/connections",
        {"kind": "myspace", "name": "n", "account_key": "x", "secret": "s"},
        status=400,
        code="invalid_argument",
    )
    await alice.ok("DELETE", f"/connections/{conn_id}")
    await alice.error("GET", f"/connections/{conn_id}", status=404, code="not_found")

    everything = "\n".join(seen) + caplog.text + await raw_database(services)
    for secret in (bad, GOOD_TOKEN, "ghp_teamsecret22222222222222222222222222"):
        assert secret not in everything


async def test_connection_needs_an_encryption_key(alice: Api, services: Services) -> None:
    services.vault = type(services.vault)(None)
    await alice.error(
        "POST",
        "/connections",
        {"kind": "github", "name": "gh", "account_key": "github.com", "secret": "ghp_x"},
        status=409,
        code="encryption_required",
    )


# ---------------------------------------------------------------------------------------------
# Todos


async def test_todos_push_list_show_and_isolation(alice: Api, bob: Api, services: Services) -> None:
    await alice.ok("POST", "/endpoints", {"name": "Alice Bot", "queues": ["triage", "ci"]}, 201)
    await bob.ok("POST", "/endpoints", {"name": "Bob Bot"}, 201)
    first = (
        await alice.ok(
            "POST",
            "/todos",
            {"endpoint": "alice-bot", "title": "Build red", "queue": "ci", "payload": {"build": 17}},
            201,
        )
    )["todo"]
    second = (await alice.ok("POST", "/todos", {"endpoint": "alice-bot", "title": "Triage"}, 201))["todo"]
    theirs = (await bob.ok("POST", "/todos", {"endpoint": "bob-bot", "title": "Bob's"}, 201))["todo"]

    listed = (await alice.ok("GET", "/todos"))["todos"]
    assert [t["id"] for t in listed] == [second["id"], first["id"]]
    assert all("payload" not in t for t in listed)
    assert [t["id"] for t in (await alice.ok("GET", "/todos?queue=ci"))["todos"]] == [first["id"]]
    assert (await alice.ok("GET", "/todos?state=done"))["todos"] == []
    assert len((await alice.ok("GET", "/todos?endpoint=alice-bot&limit=1"))["todos"]) == 1

    shown = (await alice.ok("GET", f"/todos/{first['id']}"))["todo"]
    assert shown["payload"] == {"build": 17} and shown["attempts"] == [] and shown["replies"] == []
    assert shown["endpoint"] == "alice-bot" and shown["replies"] == []

    await alice.error("GET", f"/todos/{theirs['id']}", status=404, code="not_found")
    await alice.error("GET", "/todos?endpoint=bob-bot", status=404, code="not_found")
    await alice.error("POST", "/todos", {"endpoint": "bob-bot", "title": "x"}, status=404, code="not_found")
    await alice.error(
        "POST",
        "/todos",
        {"endpoint": "alice-bot", "title": "x", "queue": "quarantine"},
        status=400,
        code="invalid_argument",
    )
    await alice.error(
        "POST", "/todos", {"endpoint": "alice-bot", "title": " "}, status=400, code="invalid_argument"
    )
    await alice.error("GET", "/todos?state=lost", status=400, code="invalid_argument")
    await alice.error("GET", "/todos?limit=0", status=400, code="invalid_argument")
    await alice.error("GET", "/todos?limit=ten", status=400, code="invalid_argument")


# ---------------------------------------------------------------------------------------------
# Bad input, never a 500


async def test_bad_bodies_and_queries_are_4xx_with_a_code(
    alice: Api, base_url: str, http: aiohttp.ClientSession
) -> None:
    cases: list[tuple[str, str, bytes, int, str]] = [
        ("POST", "/teams", b"{not json", 400, "invalid_body"),
        ("POST", "/teams", b"\xff\xfe", 400, "invalid_body"),
        ("POST", "/teams", b"[1, 2]", 400, "invalid_body"),
        ("POST", "/teams", b'"ops"', 400, "invalid_body"),
        ("POST", "/teams", b'{"slug": NaN}', 400, "invalid_body"),
        ("POST", "/teams", b"[" * 100_000, 400, "invalid_body"),
        ("POST", "/teams", b"{}", 400, "invalid_argument"),
        ("POST", "/teams", b'{"slug": "ops", "owner": "bob"}', 400, "invalid_argument"),
        ("POST", "/teams", b'{"slug": 7}', 400, "invalid_argument"),
        ("POST", "/endpoints", b'{"name": "x", "queues": "ci"}', 400, "invalid_argument"),
        ("POST", "/endpoints", b'{"name": "x", "expires_in_days": true}', 400, "invalid_argument"),
        ("POST", "/endpoints", b'{"name": "x", "expires_in_days": 1.5}', 400, "invalid_argument"),
        ("POST", "/endpoints", b'{"name": "x", "default_lease_seconds": 999999}', 400, "invalid_argument"),
        ("POST", "/endpoints/x/revoke", b'{"now": true}', 400, "invalid_argument"),
        ("POST", "/endpoints", b'{"name": "a\\u0000b"}', 400, "invalid_argument"),
        ("POST", "/endpoints", b'{"name": "x", "queues": ["a\\u0000"]}', 400, "invalid_argument"),
        ("POST", "/todos", b'{"endpoint": "x", "title": "t", "payload": 1e400}', 400, "invalid_body"),
        ("GET", "/endpoints/%00", b"", 404, "not_found"),
        ("GET", "/todos/" + "x" * 5000, b"", 404, "not_found"),
        ("GET", "/todos?queue=%00", b"", 400, "invalid_argument"),
    ]
    for method, path, raw, status, code in cases:
        got, payload = await alice.call(method, path, raw=raw)
        assert (got, payload["error"]) == (status, code), (path, raw[:40], payload)

    await alice.error("GET", "/endpoints?colour=red", status=400, code="invalid_argument")
    await alice.error("GET", "/todos?limit=1&limit=2", status=400, code="invalid_argument")
    await alice.error("GET", "/nowhere", status=404, code="not_found")
    status, payload = await alice.call("DELETE", "/humans/me")
    assert status == 405 and payload["error"] == "method_not_allowed"
    headers = {"Authorization": f"Bearer {alice.token}"}
    big = b'{"slug": "' + b"a" * (6 * 1024 * 1024) + b'"}'
    async with http.post(f"{base_url}{PREFIX}/teams", data=big, headers=headers) as r:
        assert r.status == 413 and (await r.json())["error"] == "payload_too_large"


# ---------------------------------------------------------------------------------------------
# OpenAPI


async def test_openapi_document_lists_every_route(
    server: TestServer, base_url: str, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{base_url}{PREFIX}/openapi.json") as r:
        assert r.status == 200
        doc = json.loads(await r.text())
    assert doc["openapi"].startswith("3.1") and doc["info"]["title"]
    registered = {
        (route.method.lower(), route.resource.canonical)
        for route in server.app.router.routes()
        if route.resource is not None
        and route.resource.canonical.startswith(PREFIX)
        and route.method not in ("HEAD", "OPTIONS")
    }
    documented = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert registered == documented
    assert len(documented) == len(OPERATIONS) + 1

    operation_ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(operation_ids) == len(set(operation_ids))
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for name in [p["name"] for p in op.get("parameters", []) if p["in"] == "path"]:
                assert "{" + name + "}" in path
            for response in op["responses"].values():
                ref = response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
                if ref:
                    assert ref.rsplit("/", 1)[1] in doc["components"]["schemas"], (method, path, ref)
    vend = doc["paths"][f"{PREFIX}/endpoints"]["post"]
    assert vend["requestBody"]["content"]["application/json"]["schema"]["additionalProperties"] is False
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


async def test_responses_match_the_documented_schemas(
    alice: Api, http: aiohttp.ClientSession, base_url: str
) -> None:
    """The document is not decoration: real responses validate against the schemas it promises."""
    from jsonschema import Draft202012Validator

    async with http.get(f"{base_url}{PREFIX}/openapi.json") as r:
        doc = await r.json()
    for schema in doc["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)

    def check(template: str, method: str, status: int, payload: Any) -> None:
        response = doc["paths"][PREFIX + template][method.lower()]["responses"][str(status)]
        schema = response["content"]["application/json"]["schema"]
        Draft202012Validator({**schema, "components": doc["components"]}).validate(payload)

    calls: list[tuple[str, str, str, Any, int]] = [
        ("POST", "/teams", "/teams", {"slug": "ops"}, 201),
        ("GET", "/teams", "/teams", None, 200),
        ("PUT", "/teams/ops/members/alice", "/teams/{slug}/members/{handle}", {"role": "owner"}, 200),
        ("GET", "/humans/me", "/humans/me", None, 200),
        ("POST", "/endpoints", "/endpoints", {"name": "Doc Bot", "families": ["connections"]}, 201),
        ("GET", "/endpoints", "/endpoints", None, 200),
        (
            "POST",
            "/webhooks",
            "/webhooks",
            {"endpoint": "doc-bot", "source": "github", "trust": {"logins": ["octocat"]}},
            201,
        ),
        ("GET", "/webhooks", "/webhooks", None, 200),
        (
            "POST",
            "/connections",
            "/connections",
            {"kind": "github", "name": "gh", "account_key": "github.com", "secret": "ghp_doc"},
            201,
        ),
        ("GET", "/connections", "/connections", None, 200),
        ("POST", "/todos", "/todos", {"endpoint": "doc-bot", "title": "t", "payload": [1, "two"]}, 201),
        ("GET", "/todos", "/todos", None, 200),
    ]
    for method, path, template, body, status in calls:
        check(template, method, status, await alice.ok(method, path, body, status))
    webhook_id = (await alice.ok("GET", "/webhooks"))["webhooks"][0]["id"]
    check("/webhooks/{id}/rotate", "POST", 200, await alice.ok("POST", f"/webhooks/{webhook_id}/rotate"))
    todo_id = (await alice.ok("GET", "/todos"))["todos"][0]["id"]
    check("/todos/{id}", "GET", 200, await alice.ok("GET", f"/todos/{todo_id}"))
    check("/endpoints/{slug}/revoke", "POST", 200, await alice.ok("POST", "/endpoints/doc-bot/revoke"))
    _, error = await alice.call("GET", "/todos/td_nope", expect=404)
    check("/todos/{id}", "GET", 404, error)


async def test_todo_show_lists_attempts_and_replies_never_the_text(alice: Api, services: Services) -> None:
    from switchboard import todos
    from switchboard.db import utcnow
    from switchboard.ids import new_id
    from switchboard.models import Reply

    await alice.ok("POST", "/endpoints", {"name": "Alice Bot", "families": ["reply"]}, 201)
    todo = (await alice.ok("POST", "/todos", {"endpoint": "alice-bot", "title": "Fix it"}, 201))["todo"]
    endpoint = await tenancy.get_endpoint(services.db, "alice-bot")
    await todos.claim(services.db, endpoint, todo["id"])
    await todos.complete(services.db, endpoint, todo["id"], result={"ok": True}, summary="fixed")
    now = utcnow()
    async with services.db.write() as s:
        s.add(
            Reply(
                id=new_id("rp"),
                todo_id=todo["id"],
                endpoint_id=endpoint.id,
                idempotency_key="k1",
                state="sent",
                connection_id="cn_x",
                connection_name="gh",
                connection_fingerprint="fp_1",
                owner_scope=endpoint.owner_human_id or "",
                address_kind="forge_comment",
                display="github github.com/acme/api#7",
                thread_key="github.com/acme/api#7",
                text_hash="0" * 64,
                provider_object_id="123",
                permalink="https://github.com/acme/api/issues/7#issuecomment-123",
                created_at=now,
                updated_at=now,
            )
        )

    shown = (await alice.ok("GET", f"/todos/{todo['id']}"))["todo"]
    assert shown["state"] == "done" and shown["result"] == {"ok": True}
    (attempt,) = shown["attempts"]
    assert attempt["endpoint"] == "alice-bot" and attempt["outcome"] == "completed"
    assert attempt["summary"] == "fixed"
    (reply,) = shown["replies"]
    assert reply["state"] == "sent" and reply["permalink"].endswith("issuecomment-123")
    assert reply["display"] == "github github.com/acme/api#7" and "text" not in reply
    listed = (await alice.ok("GET", "/todos"))["todos"][0]
    assert listed["replies"] == {
        "count": 1,
        "last_state": "sent",
        "last_permalink": "https://github.com/acme/api/issues/7#issuecomment-123",
    }


WRONG_VALUES: list[Any] = [
    None,
    0,
    -1,
    2**70,
    1.5,
    True,
    "",
    " ",
    "x" * 5000,
    "ünï/../\u202e",
    [],
    ["a", 1],
    {},
    {"a": [1]},
    {"a": "\u0000", "\u0000": 1},
    "\u0000",
]
PLAUSIBLE = {
    "slug": "fz",
    "name": "fz",
    "endpoint": "alice-bot",
    "source": "github",
    "secret": "s3cret",
    "kind": "github",
    "account_key": "github.com",
    "title": "t",
    "role": "member",
    "trust": {"allow_all": True},
    "reason": "spam",
}


async def test_every_field_of_every_route_survives_wrong_values(alice: Api, bob: Api) -> None:
    """Each body field of each route, given each kind of wrong value: a 4xx or a success, never a
    500, never a non-JSON answer (``Api.call`` checks both)."""
    await alice.ok("POST", "/teams", {"slug": "ops"}, 201)
    await alice.ok("PUT", "/teams/ops/members/bob", {})
    await alice.ok("POST", "/endpoints", {"name": "Alice Bot"}, 201)
    webhook = (await alice.ok("POST", "/webhooks", {"endpoint": "alice-bot", "source": "slack"}, 201))[
        "webhook"
    ]
    conn = (
        await alice.ok(
            "POST",
            "/connections",
            {"kind": "github", "name": "gh", "account_key": "github.com", "secret": "ghp_1"},
            201,
        )
    )["connection"]
    todo = (await alice.ok("POST", "/todos", {"endpoint": "alice-bot", "title": "t"}, 201))["todo"]
    ids = {"webhooks": webhook["id"], "connections": conn["id"], "todos": todo["id"]}

    def fill(path: str) -> str:
        section = path.split("/")[1]
        return (
            path.replace("{slug}", "ops" if section == "teams" else "alice-bot")
            .replace("{handle}", "bob")
            .replace("{endpoint}", "alice-bot")
            .replace("{id}", ids.get(section, "x"))
        )

    statuses: set[int] = set()
    for op in OPERATIONS:
        if not op.body:
            continue
        required = {p.name: PLAUSIBLE[p.name] for p in op.body if p.required}
        for param in op.body:
            for value in WRONG_VALUES:
                status, _ = await alice.call(op.method, fill(op.path), {**required, param.name: value})
                statuses.add(status)
        # The same wrong values at the top level of the body.
        for value in WRONG_VALUES:
            if not isinstance(value, dict):
                status, payload = await alice.call(op.method, fill(op.path), raw=json.dumps(value).encode())
                assert status == 400 and payload["error"] in ("invalid_body", "invalid_argument"), payload
        # And a member who may read but not change: refused before anything is written.
        status, _ = await bob.call(op.method, fill(op.path), {**required})
        statuses.add(status)
    assert statuses <= {200, 201, 400, 403, 404, 409}, statuses


async def test_database_down_is_503_json(alice: Api, services: Services) -> None:
    real = services.db
    services.db = Database("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    try:
        await alice.error("GET", "/humans/me", status=503, code="unavailable")
        await alice.error("POST", "/teams", {"slug": "ops"}, status=503, code="unavailable")
    finally:
        await services.db.dispose()
        services.db = real
    assert (await alice.ok("GET", "/humans/me"))["human"]["handle"] == "alice"


async def test_revoking_over_the_api_closes_live_mcp_sessions_at_once(
    alice: Api, services: Services, server: TestServer, base_url: str
) -> None:
    vended = await alice.ok("POST", "/endpoints", {"name": "Live Bot"}, 201)
    await alice.ok("POST", "/todos", {"endpoint": "live-bot", "title": "t"}, 201)
    endpoint = await tenancy.get_endpoint(services.db, "live-bot")
    bell = server.app[DOORBELL]
    async with connect(base_url, vended["token"], endpoint) as agent:
        assert len((await agent.ok("list_todos"))["todos"]) == 1
        assert any(s.endpoint_id == endpoint.id for s in bell.sessions.values())
        await alice.ok("POST", "/endpoints/live-bot/revoke")
        # No waiting for the periodic sweep: the API closed them before it answered.
        assert not any(s.endpoint_id == endpoint.id for s in bell.sessions.values())
        with pytest.raises(MCPError):
            await agent.call("list_todos")


async def test_a_todo_pushed_over_the_api_rings_the_live_session(
    alice: Api, services: Services, base_url: str
) -> None:
    vended = await alice.ok("POST", "/endpoints", {"name": "Live Bot"}, 201)
    endpoint = await tenancy.get_endpoint(services.db, "live-bot")
    async with connect(base_url, vended["token"], endpoint) as agent:
        await agent.ok("list_todos")  # the session is up and its stream open
        pushed = (await alice.ok("POST", "/todos", {"endpoint": "live-bot", "title": "Ring me"}, 201))["todo"]
        ring = await agent.listener.next_ring(timeout=5)
        assert ring.meta["todo_id"] == pushed["id"] and ring.meta["queue"] == "default"


# ---------------------------------------------------------------------------------------------
# Text no database can hold: a JSON "\ud800" escape parses into a lone surrogate, which neither
# the databases nor a response (UTF-8) can carry. It was a 500, after the write for a connection's
# config (whose every listing then failed too); now it is refused before anything is written.

LONE_SURROGATES = [
    ("POST", "/endpoints", b'{"name": "x\\ud800"}'),
    ("POST", "/todos", b'{"endpoint": "bot", "title": "t\\ud800"}'),
    ("POST", "/todos", b'{"endpoint": "bot\\uDBFF", "title": "t"}'),
    ("POST", "/todos", b'{"endpoint": "bot", "title": "t", "payload": {"a": ["\\udc00"]}}'),
    ("POST", "/todos/requeue", b'{"search": "\\ud800"}'),
    ("POST", "/webhooks", b'{"endpoint": "\\ud800", "source": "generic"}'),
    ("POST", "/webhooks/{wh}/routes", b'{"endpoint": "\\ud800"}'),
    ("PATCH", "/connections/{cn}", b'{"config": {"\\ud800": 1}}'),
    (
        "POST",
        "/connections",
        b'{"kind": "github", "name": "n", "account_key": "github.com", "secret": "x",'
        b' "config": {"a": "\\ud800"}}',
    ),
]


@pytest.mark.parametrize(("method", "path", "raw"), LONE_SURROGATES, ids=lambda v: str(v)[:48])
async def test_a_lone_surrogate_anywhere_in_a_body_is_400_and_nothing_is_written(
    alice: Api, method: str, path: str, raw: bytes
) -> None:
    await alice.ok("POST", "/endpoints", {"name": "Bot"}, status=201)
    made = await alice.ok("POST", "/webhooks", {"endpoint": "bot", "source": "generic"}, status=201)
    conn = await alice.ok(
        "POST",
        "/connections",
        {"kind": "github", "name": "gh", "account_key": "github.com", "secret": "s"},
        201,
    )
    path = path.format(wh=made["webhook"]["id"], cn=conn["connection"]["id"])
    status, payload = await alice.call(method, path, raw=raw)
    assert (status, payload["error"]) == (400, "invalid_argument"), payload
    assert "lone surrogate" in payload["message"]
    # What was there is unchanged, and every listing still answers.
    [listed] = (await alice.ok("GET", "/connections"))["connections"]
    assert listed["config"] == conn["connection"]["config"]
    assert len((await alice.ok("GET", "/endpoints"))["endpoints"]) == 1
    assert (await alice.ok("GET", "/todos"))["todos"] == []
    # A proper pair of surrogates is one character, and welcome.
    made = await alice.ok("POST", "/endpoints", {"name": "Smiling \U0001f600"}, status=201)
    assert made["endpoint"]["name"] == "Smiling \U0001f600"
