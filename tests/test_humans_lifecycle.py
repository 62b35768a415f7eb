"""A human's token over its life (issue 13, item 4): rotate, revoke and remove from the CLI, self-rotation
and self-revocation over the API, the account page's one-time reveal, and web sessions listed and
ended. The old token is grepped for in every response, page, log line and stored value."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from alembic import command
from click.testing import CliRunner, Result
from sqlalchemy import bindparam, select, text

from switchboard import migrate, tenancy
from switchboard.api import PREFIX
from switchboard.cli import main
from switchboard.db import Database, utcnow
from switchboard.ids import token_hash
from switchboard.models import Base, Human, UTCDateTime, WebSession
from switchboard.services import Services

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
SBO_RE = re.compile(r"sbo_[A-Za-z0-9_-]{20,}")
KEY = base64.b64encode(bytes(range(100, 132))).decode()


# ---------------------------------------------------------------------------------------------
# Clients: the operator's CLI, a human's API client, a browser. Each keeps what it was told.


class Seen:
    """Everything any client was answered, to grep for tokens that must not be there."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __str__(self) -> str:
        return "\n".join(self.texts)


class Cli:
    def __init__(self, database_url: str, seen: Seen) -> None:
        env = {
            "SWITCHBOARD_DATABASE_URL": database_url,
            "SWITCHBOARD_BASE_URL": "https://switchboard.example.test",
            "SWITCHBOARD_SECRET_ENCRYPTION_KEY": KEY,
        }
        self.runner, self.seen = CliRunner(env=env), seen

    async def __call__(self, *args: str, input: str | None = None) -> Result:
        # The CLI runs its own event loop: in a thread, beside the server on this one.
        result = await asyncio.to_thread(self.runner.invoke, main, list(args), input, catch_exceptions=False)
        self.seen.texts += [result.stdout, result.stderr]
        return result

    async def ok(self, *args: str, input: str | None = None) -> dict[str, Any]:
        result = await self(*args, "--json", input=input)
        assert result.exit_code == 0 and result.stderr == "", (args, result.stdout, result.stderr)
        answer: dict[str, Any] = json.loads(result.stdout)
        return answer

    async def err(self, *args: str, code: str, exit_code: int = 1) -> str:
        result = await self(*args)
        assert result.exit_code == exit_code and result.stdout == "", (args, result.stdout, result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"error: {code}"), line
        return line


class Api:
    def __init__(self, http: aiohttp.ClientSession, base_url: str, token: str, seen: Seen) -> None:
        self.http, self.base_url, self.token, self.seen = http, base_url, token, seen

    async def call(self, method: str, path: str, token: str | None = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        async with self.http.request(method, f"{self.base_url}{PREFIX}{path}", headers=headers) as r:
            body = await r.text()
            self.seen.texts.append(body)
            assert r.status < 500, (r.status, body)
            if r.status == 200:
                assert r.headers["Cache-Control"] == "no-store"
            return r.status, json.loads(body)

    async def ok(self, method: str, path: str) -> Any:
        status, payload = await self.call(method, path)
        assert status == 200, (method, path, payload)
        return payload


class Browser:
    def __init__(self, base_url: str, seen: Seen, user_agent: str = "test-browser/1.0") -> None:
        self.base_url, self.seen = base_url, seen
        self.http = aiohttp.ClientSession(
            cookie_jar=aiohttp.CookieJar(unsafe=True), headers={"User-Agent": user_agent}
        )
        self.csrf = ""

    async def request(
        self, method: str, path: str, data: dict[str, str] | None = None
    ) -> tuple[aiohttp.ClientResponse, str]:
        async with self.http.request(method, self.base_url + path, data=data, allow_redirects=False) as r:
            body = await r.text()
        self.seen.texts.append(body)
        return r, body

    async def post(self, path: str, data: dict[str, str] | None = None) -> tuple[aiohttp.ClientResponse, str]:
        return await self.request("POST", path, {"csrf": self.csrf, **(data or {})})

    async def login(self, token: str) -> int:
        _, page = await self.request("GET", "/ui/login")
        found = CSRF_RE.search(page)
        assert found is not None
        resp, _ = await self.request("POST", "/ui/login", {"csrf": found.group(1), "token": token})
        if resp.status == 303:
            _, board = await self.request("GET", "/ui")
            csrf = CSRF_RE.search(board)
            assert csrf is not None
            self.csrf = csrf.group(1)
        return resp.status

    async def logged_in(self) -> bool:
        resp, _ = await self.request("GET", "/ui")
        assert resp.status in (200, 303)
        return resp.status == 200


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def cli(database_url: str, seen: Seen) -> Cli:
    return Cli(database_url, seen)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def browsers(base_url: str, seen: Seen) -> AsyncIterator[list[Browser]]:
    made = [Browser(base_url, seen, f"test-browser/{n}") for n in range(3)]
    yield made
    for b in made:
        await b.http.close()


async def stored(services: Services) -> str:
    """Every stored value, to prove a token is kept only as its hash."""
    parts: list[str] = []
    async with services.db.read() as s:
        for table in Base.metadata.sorted_tables:
            for row in await s.execute(text(f'SELECT * FROM "{table.name}"')):
                parts += [
                    bytes(v).decode("latin-1") if isinstance(v, bytes | memoryview) else str(v) for v in row
                ]
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# CLI


async def test_rotate_issues_a_new_token_once_and_ends_every_web_session(
    cli: Cli,
    http: aiohttp.ClientSession,
    base_url: str,
    browsers: list[Browser],
    services: Services,
    seen: Seen,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    old = (await cli.ok("human", "add", "alice"))["token"]
    seen.texts.clear()  # the one place the old token was meant to appear
    api = Api(http, base_url, old, seen)
    assert (await api.ok("GET", "/humans/me"))["human"]["token_state"] == "active"
    first, second, _ = browsers
    assert await first.login(old) == 303 and await second.login(old) == 303

    rotated = await cli.ok("human", "rotate", "alice")
    new = rotated["token"]
    assert SBO_RE.fullmatch(new) and new != old
    assert rotated["sessions_ended"] == 2 and rotated["human"]["token_state"] == "active"
    assert rotated["human"]["token_prefix"] == new[:10] + "…"
    assert rotated["human"]["token_rotated_at"] is not None

    # The old token is refused everywhere at once; the new one works.
    assert (await api.call("GET", "/humans/me"))[0] == 401
    assert (await api.call("GET", "/humans/me", new))[0] == 200
    assert not await first.logged_in() and not await second.logged_in()
    assert await first.login(old) == 401
    assert await first.login(new) == 303 and await first.logged_in()

    # Text output: the new token once, with the warning; the token before it stops working.
    result = await cli("human", "rotate", "alice")
    assert result.exit_code == 0 and "shown once" in result.stdout
    (newest,) = SBO_RE.findall(result.stdout)
    assert "web sessions ended: 1" in result.stdout
    assert (await api.call("GET", "/humans/me", new))[0] == 401
    assert (await api.call("GET", "/humans/me", newest))[0] == 200
    (row,) = (await cli.ok("human", "list"))["humans"]
    assert row["token_prefix"] == newest[:10] + "…" and row["token_state"] == "active"

    await cli.err("human", "rotate", "nobody", code="not_found")
    await cli.err("human", "rotate", code="usage", exit_code=2)
    everything = str(seen) + caplog.text + await stored(services)
    assert old not in everything
    assert new not in await stored(services) and newest not in await stored(services)
    assert token_hash(newest) in await stored(services)


async def test_revoke_refuses_the_token_but_keeps_the_human_until_a_rotation(
    cli: Cli,
    http: aiohttp.ClientSession,
    base_url: str,
    browsers: list[Browser],
    services: Services,
    seen: Seen,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    old = (await cli.ok("human", "add", "alice"))["token"]
    seen.texts.clear()
    await cli.ok("team", "add", "ops", "--owner", "alice")
    await cli.ok("endpoint", "vend", "--name", "Alice Bot", "--owner", "alice")
    browser = browsers[0]
    assert await browser.login(old) == 303
    api = Api(http, base_url, old, seen)

    revoked = await cli.ok("human", "revoke", "alice")
    assert revoked["revoked"] is True and revoked["already_revoked"] is False
    assert revoked["sessions_ended"] == 1 and revoked["human"]["token_state"] == "revoked"
    assert revoked["human"]["revoked_at"] is not None
    assert (await api.call("GET", "/humans/me"))[0] == 401
    assert not await browser.logged_in() and await browser.login(old) == 401

    # The human stays, with the team and the endpoint.
    (row,) = (await cli.ok("human", "list"))["humans"]
    assert row["handle"] == "alice" and row["token_state"] == "revoked"
    (team,) = (await cli.ok("team", "list"))["teams"]
    assert team["members"] == [{"handle": "alice", "role": "owner"}]
    (endpoint,) = (await cli.ok("endpoint", "list", "--owner", "alice"))["endpoints"]
    assert endpoint["state"] == "active"
    listing = await cli("human", "list")
    assert "revoked" in listing.stdout

    again = await cli.ok("human", "revoke", "alice")
    assert again["already_revoked"] is True and again["sessions_ended"] == 0
    await cli.err("human", "revoke", "nobody", code="not_found")

    # A rotation issues a new token; the revoked one stays dead.
    new = (await cli.ok("human", "rotate", "alice"))["token"]
    assert (await api.call("GET", "/humans/me", new))[0] == 200
    assert (await api.call("GET", "/humans/me"))[0] == 401
    assert old not in str(seen) + caplog.text + await stored(services)


async def test_remove_is_refused_while_anything_depends_on_the_human_and_says_what_to_do(
    cli: Cli, services: Services
) -> None:
    await cli.ok("human", "add", "alice")
    await cli.ok("human", "add", "bob")
    await cli.ok("team", "add", "ops", "--owner", "alice")
    await cli.ok("team", "add", "shared", "--owner", "bob")
    await cli.ok("team", "member", "add", "shared", "alice", "--role", "admin")
    await cli.ok("endpoint", "vend", "--name", "Alice Bot", "--owner", "alice")
    await cli.ok("endpoint", "vend", "--name", "Bob Bot", "--owner", "bob")
    hook = (await cli.ok("webhook", "create", "--endpoint", "alice-bot", "--source", "generic"))["webhook"]
    bobs = (await cli.ok("webhook", "create", "--endpoint", "bob-bot", "--source", "generic"))["webhook"]
    # Bob's webhook also delivers to Alice's endpoint; a todo waits there.
    await cli.ok("webhook", "route", "add", bobs["id"], "--endpoint", "alice-bot")
    await cli.ok("todo", "push", "--endpoint", "alice-bot", "--title", "one")
    await cli.ok("todo", "push", "--endpoint", "alice-bot", "--title", "two")
    conn = (
        await cli.ok(
            "connection",
            "add",
            "--owner",
            "alice",
            "--kind",
            "github",
            "--name",
            "gh",
            "--account-key",
            "github.com",
            input="ghp_removaltest0000000000000000000000000",
        )
    )["connection"]

    line = await cli.err("human", "remove", "alice", code="conflict")
    for needed in (
        "alice-bot",
        "switchboard endpoint revoke SLUG",
        hook["id"],
        "switchboard webhook delete ID",
        conn["id"],
        "switchboard connection delete ID",
        "team ops",
        "--role owner",
    ):
        assert needed in line, (needed, line)
    assert "team shared" not in line  # bob still owns that one

    # Each step clears its own blocker, and the refusal says what is left.
    await cli.ok("webhook", "delete", hook["id"])
    await cli.ok("endpoint", "revoke", "alice-bot")
    line = await cli.err("human", "remove", "alice", code="conflict")
    assert "alice-bot" not in line and hook["id"] not in line and conn["id"] in line
    await cli.ok("connection", "delete", conn["id"])
    line = await cli.err("human", "remove", "alice", code="conflict")
    assert "team ops" in line and "connection" not in line
    # Another owner for ops: alice is an owner still, but no longer the last one.
    await cli.ok("team", "member", "add", "ops", "bob", "--role", "owner")

    removed = await cli.ok("human", "remove", "alice")
    assert removed == {
        "human": "alice",
        "removed": True,
        "memberships": 2,
        "sessions": 0,
        "revoked_endpoints": 1,
        "todos": 2,
    }
    assert [h["handle"] for h in (await cli.ok("human", "list"))["humans"]] == ["bob"]
    teams = {t["slug"]: t["members"] for t in (await cli.ok("team", "list"))["teams"]}
    assert teams == {
        "ops": [{"handle": "bob", "role": "owner"}],
        "shared": [{"handle": "bob", "role": "owner"}],
    }
    (left,) = (await cli.ok("webhook", "list"))["webhooks"]
    assert left["id"] == bobs["id"] and left["routes"] == []
    assert [e["slug"] for e in (await cli.ok("endpoint", "list"))["endpoints"]] == ["bob-bot"]
    await cli.err("human", "remove", "alice", code="not_found")
    # The handle is free again.
    await cli.ok("human", "add", "alice")


async def test_remove_takes_memberships_and_sessions_with_the_human(
    cli: Cli, browsers: list[Browser], services: Services
) -> None:
    token = (await cli.ok("human", "add", "alice"))["token"]
    await cli.ok("human", "add", "bob")
    await cli.ok("team", "add", "ops", "--owner", "bob")
    await cli.ok("team", "member", "add", "ops", "alice", "--role", "owner")
    assert await browsers[0].login(token) == 303 and await browsers[1].login(token) == 303
    removed = await cli.ok("human", "remove", "alice")
    assert (removed["memberships"], removed["sessions"], removed["revoked_endpoints"]) == (1, 2, 0)
    assert not await browsers[0].logged_in()
    async with services.db.read() as s:
        assert (await s.scalars(select(WebSession))).all() == []
    result = await cli("human", "remove", "bob")
    assert result.exit_code == 1 and "team ops" in result.stderr  # the last owner, once alice is gone


# ---------------------------------------------------------------------------------------------
# API


async def test_self_rotation_over_the_api_is_one_time_and_first_wins(
    cli: Cli,
    http: aiohttp.ClientSession,
    base_url: str,
    browsers: list[Browser],
    services: Services,
    seen: Seen,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    old = (await cli.ok("human", "add", "alice"))["token"]
    bobs = (await cli.ok("human", "add", "bob"))["token"]
    seen.texts.clear()
    alice, bob = Api(http, base_url, old, seen), Api(http, base_url, bobs, seen)
    assert await browsers[0].login(old) == 303
    assert await browsers[1].login(bobs) == 303

    rotated = await alice.ok("POST", "/humans/me/rotate")
    new = rotated["token"]
    assert SBO_RE.fullmatch(new) and rotated["sessions_ended"] == 1
    assert rotated["human"]["handle"] == "alice" and "teams" not in rotated["human"]
    assert (await alice.call("GET", "/humans/me"))[0] == 401
    assert (await alice.call("POST", "/humans/me/rotate"))[0] == 401
    assert not await browsers[0].logged_in()
    # Bob is untouched.
    assert await browsers[1].logged_in() and (await bob.call("GET", "/humans/me"))[0] == 200

    # Two rotations with one token at once: one wins, the other is refused like any stale token.
    alice.token = new
    answers = await asyncio.gather(*(alice.call("POST", "/humans/me/rotate") for _ in range(4)))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200, 401, 401, 401], answers
    (winner,) = [payload["token"] for status, payload in answers if status == 200]
    assert (await alice.call("GET", "/humans/me", winner))[0] == 200
    # Nothing here mentions an old token: not the answers, the logs or the database.
    assert old not in str(seen) + caplog.text + await stored(services)
    assert new not in await stored(services)
    assert str(seen).count(new) == 1 and str(seen).count(winner) == 1


async def test_self_revocation_over_the_api(
    cli: Cli, http: aiohttp.ClientSession, base_url: str, browsers: list[Browser], seen: Seen
) -> None:
    token = (await cli.ok("human", "add", "alice"))["token"]
    api = Api(http, base_url, token, seen)
    assert await browsers[0].login(token) == 303
    revoked = await api.ok("POST", "/humans/me/revoke")
    assert revoked["revoked"] is True and revoked["sessions_ended"] == 1
    assert revoked["human"]["token_state"] == "revoked"
    assert (await api.call("GET", "/humans/me"))[0] == 401
    assert (await api.call("POST", "/humans/me/rotate"))[0] == 401  # only the operator brings it back
    assert not await browsers[0].logged_in()
    new = (await cli.ok("human", "rotate", "alice"))["token"]
    assert (await api.call("GET", "/humans/me", new))[0] == 200


async def test_web_sessions_listed_and_ended_over_the_api(
    cli: Cli,
    http: aiohttp.ClientSession,
    base_url: str,
    browsers: list[Browser],
    services: Services,
    seen: Seen,
) -> None:
    token = (await cli.ok("human", "add", "alice"))["token"]
    bobs = (await cli.ok("human", "add", "bob"))["token"]
    alice, bob = Api(http, base_url, token, seen), Api(http, base_url, bobs, seen)
    assert (await alice.ok("GET", "/humans/me/sessions")) == {"sessions": []}
    for b in browsers[:2]:
        assert await b.login(token) == 303
    assert await browsers[2].login(bobs) == 303

    sessions = (await alice.ok("GET", "/humans/me/sessions"))["sessions"]
    assert sorted(s["user_agent"] for s in sessions) == ["test-browser/0", "test-browser/1"]
    for session in sessions:
        assert set(session) == {"id", "created_at", "last_seen_at", "expires_at", "user_agent"}
        assert session["id"].startswith("ws_")
    async with services.db.read() as s:
        hashes = [row.id_hash for row in (await s.scalars(select(WebSession))).all()]
    cookies = [c.value for b in browsers for c in b.http.cookie_jar if c.key == "sb_session"]
    assert len(hashes) == 3 and len(cookies) == 3
    assert not any(secret in str(seen) for secret in hashes + cookies)

    # Bob cannot end Alice's session: to him it does not exist.
    one = next(s for s in sessions if s["user_agent"] == "test-browser/0")
    status, payload = await bob.call("DELETE", f"/humans/me/sessions/{one['id']}")
    assert status == 404 and payload["error"] == "not_found"
    assert await browsers[0].logged_in()

    assert (await alice.ok("DELETE", f"/humans/me/sessions/{one['id']}")) == {
        "session": one["id"],
        "ended": True,
    }
    assert not await browsers[0].logged_in() and await browsers[1].logged_in()
    assert (await alice.call("DELETE", f"/humans/me/sessions/{one['id']}"))[0] == 404
    assert (await alice.ok("DELETE", "/humans/me/sessions")) == {"ended": 1}
    assert not await browsers[1].logged_in() and await browsers[2].logged_in()
    assert (await alice.ok("GET", "/humans/me/sessions")) == {"sessions": []}


async def test_lifecycle_answers_match_the_documented_schemas(
    cli: Cli, http: aiohttp.ClientSession, base_url: str, browsers: list[Browser], seen: Seen
) -> None:
    from jsonschema import Draft202012Validator

    token = (await cli.ok("human", "add", "alice"))["token"]
    api = Api(http, base_url, token, seen)
    assert await browsers[0].login(token) == 303
    async with http.get(f"{base_url}{PREFIX}/openapi.json") as r:
        doc = await r.json()

    def check(template: str, method: str, payload: Any) -> None:
        schema = doc["paths"][PREFIX + template][method.lower()]["responses"]["200"]["content"][
            "application/json"
        ]["schema"]
        Draft202012Validator({**schema, "components": doc["components"]}).validate(payload)

    check("/humans/me", "GET", await api.ok("GET", "/humans/me"))
    sessions = await api.ok("GET", "/humans/me/sessions")
    check("/humans/me/sessions", "GET", sessions)
    ref = sessions["sessions"][0]["id"]
    check("/humans/me/sessions/{id}", "DELETE", await api.ok("DELETE", f"/humans/me/sessions/{ref}"))
    check("/humans/me/sessions", "DELETE", await api.ok("DELETE", "/humans/me/sessions"))
    rotated = await api.ok("POST", "/humans/me/rotate")
    check("/humans/me/rotate", "POST", rotated)
    api.token = rotated["token"]
    check("/humans/me/revoke", "POST", await api.ok("POST", "/humans/me/revoke"))


# ---------------------------------------------------------------------------------------------
# Web UI


async def test_the_account_page_rotates_with_a_reveal_a_reload_cannot_repeat(
    cli: Cli,
    http: aiohttp.ClientSession,
    base_url: str,
    browsers: list[Browser],
    services: Services,
    seen: Seen,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    old = (await cli.ok("human", "add", "alice"))["token"]
    seen.texts.clear()
    here, elsewhere, _ = browsers
    assert await here.login(old) == 303 and await elsewhere.login(old) == 303
    api = Api(http, base_url, old, seen)

    resp, page = await here.request("GET", "/ui/account")
    assert resp.status == 200 and "this session" in page and "test-browser/1" in page
    assert 'href="/ui/account"' in page  # the header links here
    assert page.count('/end"') == 1  # one "End" button: for the other session, not this one

    # A wrong current token, or none, or no CSRF token: refused, nothing changed.
    resp, page = await here.post("/ui/account/rotate", {"token": "sbo_wrong-token-wrong-token"})
    assert resp.status == 403 and "not your current token" in page and "sbo_wrong" not in page
    resp, page = await here.post("/ui/account/rotate", {"token": ""})
    assert resp.status == 400
    resp, _ = await here.request("POST", "/ui/account/rotate", {"token": old})
    assert resp.status == 403
    assert (await api.call("GET", "/humans/me"))[0] == 200 and await elsewhere.logged_in()

    resp, _ = await here.post("/ui/account/rotate", {"token": old})
    assert resp.status == 303 and resp.headers["Location"] == "/ui/account/token"
    waiting = await stored(services)  # the new token is waiting, sealed, on this session's row
    resp, page = await here.request("GET", "/ui/account/token")
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    (new,) = set(SBO_RE.findall(page))
    assert new not in waiting
    # A reload shows nothing.
    resp, page = await here.request("GET", "/ui/account/token")
    assert resp.status == 410 and not SBO_RE.search(page)
    assert str(seen).count(new) == 1

    # This session stays; every other one ended; the old token is dead and the new one works.
    assert await here.logged_in() and not await elsewhere.logged_in()
    assert (await api.call("GET", "/humans/me"))[0] == 401
    assert (await api.call("GET", "/humans/me", new))[0] == 200
    resp, page = await here.request("GET", "/ui/account")
    assert new[:10] in page and old[:10] not in page
    async with services.db.read() as s:
        assert [r.reveal for r in (await s.scalars(select(WebSession))).all()] == [None]
    assert old not in str(seen) + caplog.text + await stored(services)
    assert new not in caplog.text + await stored(services)


async def test_a_reveal_opens_only_with_its_own_session_and_only_for_a_while(
    cli: Cli, browsers: list[Browser], services: Services
) -> None:
    from switchboard.web import once

    old = (await cli.ok("human", "add", "alice"))["token"]
    here = browsers[0]
    assert await here.login(old) == 303
    resp, _ = await here.post("/ui/account/rotate", {"token": old})
    assert resp.status == 303
    async with services.db.read() as s:
        row = (await s.scalars(select(WebSession))).one()
    assert row.reveal is not None
    cookie = next(c.value for c in here.http.cookie_jar if c.key == "sb_session")
    assert once.unseal("sbw_another-cookie", row.id_hash, row.reveal) is None
    assert once.unseal(cookie, "0" * 64, row.reveal) is None
    opened = once.unseal(cookie, row.id_hash, row.reveal)
    assert opened is not None and opened[0] == "token"
    token = opened[1]["token"]
    assert SBO_RE.fullmatch(token)
    stale = once.seal(cookie, row.id_hash, "token", {"token": token})
    real_now = once.utcnow
    try:
        once.utcnow = lambda: real_now() + once.REVEAL_TTL  # type: ignore[assignment]
        assert once.unseal(cookie, row.id_hash, stale) is None
    finally:
        once.utcnow = real_now  # type: ignore[assignment]


async def test_sessions_are_ended_one_by_one_or_all_others_from_the_account_page(
    cli: Cli, base_url: str, services: Services, seen: Seen
) -> None:
    token = (await cli.ok("human", "add", "alice"))["token"]
    bobs = (await cli.ok("human", "add", "bob"))["token"]
    hostile = '<script>alert(1)</script> "quoted"'
    here, other, third = (Browser(base_url, seen, ua) for ua in ("mine/1", hostile, "third/3"))
    bob = Browser(base_url, seen, "bob/1")
    try:
        for b in (here, other, third):
            assert await b.login(token) == 303
        assert await bob.login(bobs) == 303
        _, page = await here.request("GET", "/ui/account")
        assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page

        async with services.db.read() as s:
            refs = {r.user_agent: r.ref for r in (await s.scalars(select(WebSession))).all()}
        # Another human's session is not Alice's to end.
        resp, _ = await here.post(f"/ui/account/sessions/{refs['bob/1']}/end")
        assert resp.status == 404 and await bob.logged_in()

        # Ending one asks first: without the confirmation page's yes nothing ends.
        resp, _ = await here.post(f"/ui/account/sessions/{refs[hostile]}/end")
        assert resp.status == 303 and resp.headers["Location"] == f"/ui/account/sessions/{refs[hostile]}/end"
        _, page = await here.request("GET", resp.headers["Location"])
        assert "End this session?" in page and "<script>" not in page and await other.logged_in()
        resp, _ = await here.post(f"/ui/account/sessions/{refs[hostile]}/end", {"confirm": "yes"})
        assert resp.status == 303 and resp.headers["Location"] == "/ui/account"
        _, page = await here.request("GET", "/ui/account")
        assert "Session ended" in page
        _, page = await here.request("GET", "/ui/account")
        assert "Session ended" not in page  # a notice is shown once
        assert not await other.logged_in() and await third.logged_in() and await here.logged_in()

        resp, _ = await here.post("/ui/account/sessions/end-others", {"confirm": "yes"})
        assert resp.status == 303
        assert not await third.logged_in() and await here.logged_in() and await bob.logged_in()
        _, page = await here.request("GET", "/ui/account")
        assert "End all other sessions" not in page

        # Ending one's own session by hand is logging out.
        resp, _ = await here.post(f"/ui/account/sessions/{refs['mine/1']}/end", {"confirm": "yes"})
        assert resp.status == 303 and resp.headers["Location"].startswith("/ui/login")
        assert not await here.logged_in()
    finally:
        for b in (here, other, third, bob):
            await b.http.close()


async def test_last_seen_is_refreshed_but_not_on_every_page(
    cli: Cli, browsers: list[Browser], services: Services
) -> None:
    from switchboard.web.session import LAST_SEEN_EVERY

    token = (await cli.ok("human", "add", "alice"))["token"]
    assert await browsers[0].login(token) == 303
    async with services.db.write() as s:
        row = (await s.scalars(select(WebSession))).one()
        first = row.last_seen_at
    assert await browsers[0].logged_in()
    async with services.db.read() as s:
        assert (await s.scalars(select(WebSession))).one().last_seen_at == first
    async with services.db.write() as s:
        row = (await s.scalars(select(WebSession))).one()
        row.last_seen_at = first - LAST_SEEN_EVERY
    assert await browsers[0].logged_in()
    async with services.db.read() as s:
        assert (await s.scalars(select(WebSession))).one().last_seen_at > first - LAST_SEEN_EVERY


async def test_a_login_racing_a_rotation_does_not_outlive_it(
    services: Services, base_url: str, seen: Seen
) -> None:
    """The login reads the token, then opens its session under the human's row lock: a rotation that
    committed in between leaves no session opened with the old token."""
    from switchboard import humans

    _, old = await tenancy.add_human(services.db, "alice")
    browser = Browser(base_url, seen)
    try:
        real = tenancy.human_by_token

        async def read_then_rotate(db: Database, token: str) -> Human | None:
            found = await real(db, token)
            await humans.rotate_token(db, handle="alice")
            return found

        tenancy.human_by_token = read_then_rotate  # type: ignore[assignment]
        try:
            assert await browser.login(old) == 401
        finally:
            tenancy.human_by_token = real  # type: ignore[assignment]
        async with services.db.read() as s:
            assert (await s.scalars(select(WebSession))).all() == []
    finally:
        await browser.http.close()


# ---------------------------------------------------------------------------------------------
# Migration


async def test_sessions_open_at_upgrade_get_a_name_and_a_last_seen(database_url: str) -> None:
    config = migrate.alembic_config(database_url)
    await asyncio.to_thread(command.downgrade, config, "0001")
    database = Database(database_url)
    now = bindparam("now", utcnow(), type_=UTCDateTime())
    try:
        async with database.write() as conn:
            await conn.execute(
                text(
                    "INSERT INTO humans (id, handle, token_hash, token_display, created_at) "
                    "VALUES ('hu_1', 'alice', :h, 'sbo_abcdef…', :now)"
                ).bindparams(now),
                {"h": "a" * 64},
            )
            for n in range(2):
                await conn.execute(
                    text(
                        "INSERT INTO web_sessions (id_hash, human_id, csrf_token, created_at, expires_at) "
                        "VALUES (:h, 'hu_1', 'c', :now, :now)"
                    ).bindparams(now),
                    {"h": str(n) * 64},
                )
    finally:
        await database.dispose()
    await migrate.upgrade_async(database_url)
    database = Database(database_url)
    try:
        async with database.read() as s:
            rows = (await s.scalars(select(WebSession))).all()
            human = (await s.scalars(select(Human))).one()
        assert len({r.ref for r in rows}) == 2 and all(r.ref.startswith("ws_") for r in rows)
        assert all(r.last_seen_at == r.created_at for r in rows)
        assert human.revoked_at is None and human.token_rotated_at is None
    finally:
        await database.dispose()
