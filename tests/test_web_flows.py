"""Safe flows and health at a glance (issue 10 items 3, 5, 7), over real HTTP against the whole app:

* a rotated signing secret keeps verifying for the overlap, and "expire old now" ends it;
* a paused webhook is answered 503 with Retry-After and stores nothing, until resumed;
* a team is deleted only once it owns nothing, and the refusal says what is left;
* notices appear only after the action (a hand-made ``?done=`` shows nothing), once;
* login returns to the page asked for, and only to a page of this UI;
* the endpoints and webhooks pages show activity, live MCP sessions, backlog, deliveries and refusals;
* the API refuses duplicate JSON keys, over-long titles, and answers a revoked endpoint with 409.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from sqlalchemy import func, select

from switchboard import tenancy, todos
from switchboard.api.routing import PREFIX
from switchboard.delivery_records import DELIVERY_RECORDER
from switchboard.models import Event, Team, Webhook
from switchboard.services import Services
from switchboard.testing import connect, counts, github_headers, make_webhook, post

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
WHSEC_RE = re.compile(r"whsec_[A-Za-z0-9_-]{20,}")
BODY = json.dumps({"action": "opened", "issue": {"number": 1, "title": "t"}}).encode()


class Browser:
    """A cookie-keeping client that logs in through the login form."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.csrf = ""

    async def get(self, path: str) -> tuple[aiohttp.ClientResponse, str]:
        async with self.http.get(self.base_url + path, allow_redirects=False) as resp:
            return resp, await resp.text()

    async def post(self, path: str, data: dict[str, str] | None = None) -> tuple[aiohttp.ClientResponse, str]:
        form = {"csrf": self.csrf, **(data or {})}
        async with self.http.post(self.base_url + path, data=form, allow_redirects=False) as resp:
            return resp, await resp.text()

    async def login(self, token: str, next_: str | None = None) -> aiohttp.ClientResponse:
        _, page = await self.get("/ui/login" + (f"?next={next_}" if next_ else ""))
        found = CSRF_RE.search(page)
        assert found is not None
        form = {"csrf": found.group(1), "token": token}
        hidden = re.search(r'name="next" value="([^"]*)"', page)
        if hidden:
            form["next"] = hidden.group(1).replace("&amp;", "&")
        async with self.http.post(self.base_url + "/ui/login", data=form, allow_redirects=False) as resp:
            if resp.status == 303:
                _, board = await self.get("/ui")
                csrf = CSRF_RE.search(board)
                assert csrf is not None
                self.csrf = csrf.group(1)
            return resp


@pytest.fixture
async def browser(base_url: str) -> AsyncIterator[Browser]:
    b = Browser(base_url)
    yield b
    await b.http.close()


async def api(
    base_url: str, token: str, method: str, path: str, body: Any = None, raw: bytes | None = None
) -> tuple[int, dict[str, Any]]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method, f"{base_url}{PREFIX}{path}", data=data, headers={"Authorization": f"Bearer {token}"}
        ) as resp,
    ):
        return resp.status, await resp.json()


async def ada(services: Services) -> str:
    _, token = await tenancy.add_human(services.db, "ada")
    return token


# ---------------------------------------------------------------------------------------------
# Webhook secrets: the overlap after a rotation


async def test_the_old_secret_verifies_during_the_overlap_until_expired(
    services: Services, base_url: str
) -> None:
    token = await ada(services)
    ingest, old, webhook_id = await make_webhook(services, "github")
    assert old is not None
    status, answer = await api(base_url, token, "POST", f"/webhooks/{webhook_id}/rotate")
    assert status == 200 and answer["webhook"]["previous_secret_expires_at"] is not None
    new = answer["secret"]

    # Both secrets verify while the provider is being updated.
    for n, secret in enumerate((old, new)):
        body = json.dumps({"action": "opened", "issue": {"number": n, "title": f"t{n}"}}).encode()
        status, answer, _ = await post(base_url, ingest, body, github_headers(secret, body, "issues"))
        assert status == 202, answer

    # After a leak: expire it now. Only the new one verifies.
    status, answer = await api(base_url, token, "POST", f"/webhooks/{webhook_id}/expire-previous-secret")
    assert status == 200 and answer["expired"] is True
    assert answer["webhook"]["previous_secret_expires_at"] is None
    body = json.dumps({"action": "opened", "issue": {"number": 9, "title": "late"}}).encode()
    status, answer, _ = await post(base_url, ingest, body, github_headers(old, body, "issues"))
    assert status == 401 and answer["error"] == "signature_invalid"
    status, _, _ = await post(base_url, ingest, body, github_headers(new, body, "issues"))
    assert status == 202
    status, answer = await api(base_url, token, "POST", f"/webhooks/{webhook_id}/expire-previous-secret")
    assert status == 200 and answer["expired"] is False


@pytest.mark.parametrize("settings_overrides", [{"secret_overlap_seconds": 0}])
async def test_with_no_overlap_a_rotation_ends_the_old_secret_at_once(
    services: Services, base_url: str
) -> None:
    token = await ada(services)
    ingest, old, webhook_id = await make_webhook(services, "github")
    assert old is not None
    status, answer = await api(base_url, token, "POST", f"/webhooks/{webhook_id}/rotate")
    assert status == 200 and answer["webhook"]["previous_secret_expires_at"] is None
    status, _, _ = await post(base_url, ingest, BODY, github_headers(old, BODY, "issues"))
    assert status == 401


async def test_a_replaced_provider_secret_overlaps_too(services: Services, base_url: str) -> None:
    from switchboard.testing import slack_headers

    token = await ada(services)
    ingest, old, webhook_id = await make_webhook(services, "slack")
    assert old is not None
    status, _ = await api(
        base_url, token, "PUT", f"/webhooks/{webhook_id}/secret", {"secret": "new-signing-1234"}
    )
    assert status == 200
    body = json.dumps({"type": "event_callback", "event_id": "Ev1", "event": {"type": "message"}}).encode()
    status, answer, _ = await post(base_url, ingest, body, slack_headers(old, body))
    assert status == 202, answer


# ---------------------------------------------------------------------------------------------
# Pausing a webhook


async def test_a_paused_webhook_is_answered_503_with_retry_after_and_stores_nothing(
    services: Services, base_url: str
) -> None:
    token = await ada(services)
    ingest, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    status, answer = await api(
        base_url, token, "PATCH", f"/webhooks/{webhook_id}", {"paused": True, "name": "api"}
    )
    assert status == 200 and answer["webhook"]["paused"] is True and answer["webhook"]["name"] == "api"
    status, answer, headers = await post(base_url, ingest, BODY, github_headers(secret, BODY, "issues"))
    assert status == 503 and answer["error"] == "paused" and int(headers["Retry-After"]) > 0
    assert await counts(services) == (0, 0)

    status, answer = await api(base_url, token, "PATCH", f"/webhooks/{webhook_id}", {"paused": False})
    assert status == 200 and answer["webhook"]["paused"] is False and answer["webhook"]["name"] == "api"
    status, _, _ = await post(base_url, ingest, BODY, github_headers(secret, BODY, "issues"))
    assert status == 202
    # Too long a name is refused, not cut.
    status, answer = await api(base_url, token, "PATCH", f"/webhooks/{webhook_id}", {"name": "n" * 101})
    assert status == 400 and answer["error"] == "invalid_argument"


async def test_pause_and_name_from_the_web_ui_and_the_webhooks_page_shows_health(
    services: Services, base_url: str, browser: Browser, server: TestServer
) -> None:
    token = await ada(services)
    ingest, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    await browser.login(token)
    status, _, _ = await post(base_url, ingest, BODY, github_headers(secret, BODY, "issues"))
    assert status == 202
    status, _, _ = await post(
        base_url, ingest, BODY, github_headers("whsec_wrong" + "x" * 20, BODY, "issues")
    )
    assert status == 401
    await server.app[DELIVERY_RECORDER].flush()  # refusals are written off the hot path

    resp, _ = await browser.post(
        f"/ui/webhooks/{webhook_id}/edit", {"name": "acme/api", "description": "triage"}
    )
    assert resp.status == 303
    resp, _ = await browser.post(f"/ui/webhooks/{webhook_id}/pause")
    assert resp.status == 303 and resp.headers["Location"] == "/ui/webhooks"
    _, page = await browser.get("/ui/webhooks")
    assert "Webhook paused" in page and ">paused<" in page and "acme/api" in page and "triage" in page
    assert "1 refused" in page and "signature_invalid 1" in page and "last delivery</span> <time" in page
    assert "in the last day" in page
    status, _, _ = await post(base_url, ingest, BODY, github_headers(secret, BODY, "issues"))
    assert status == 503
    resp, _ = await browser.post(f"/ui/webhooks/{webhook_id}/resume")
    _, page = await browser.get("/ui/webhooks")
    assert "Webhook resumed" in page and ">paused<" not in page
    async with services.db.read() as s:
        assert (await s.get(Webhook, webhook_id)).paused_at is None  # type: ignore[union-attr]
        assert await s.scalar(select(func.count()).select_from(Event)) == 1


async def test_the_endpoints_page_shows_activity_sessions_and_backlog(
    services: Services, base_url: str, browser: Browser
) -> None:
    token = await ada(services)
    owner = await tenancy.resolve_owner(services.db, human="ada")
    endpoint, sbk = await tenancy.vend_endpoint(services.db, name="bot", owner=owner)
    for n in range(3):
        await todos.push(services.db, endpoint_slug="bot", title=f"work {n}")
    await browser.login(token)
    _, page = await browser.get("/ui/endpoints")
    assert 'last activity</span> <span class="muted">never</span>' in page
    assert "0 live MCP sessions" in page and "3 pending, oldest" in page
    async with connect(base_url, sbk, endpoint) as agent:
        await agent.client.call_tool("claim_next", {})
        _, page = await browser.get("/ui/endpoints")
        assert "1 live MCP session<" in page and "2 pending, oldest" in page
        assert "last activity</span> <time" in page


# ---------------------------------------------------------------------------------------------
# Teams


async def test_a_team_is_deleted_only_once_it_owns_nothing(services: Services, base_url: str) -> None:
    token = await ada(services)
    _, bob = await tenancy.add_human(services.db, "bob")
    status, _ = await api(base_url, token, "POST", "/teams", {"slug": "platform"})
    assert status == 201
    await api(base_url, token, "PUT", "/teams/platform/members/bob", {"role": "admin"})
    status, _ = await api(base_url, token, "POST", "/endpoints", {"name": "team bot", "team": "platform"})
    assert status == 201

    status, answer = await api(base_url, bob, "DELETE", "/teams/platform")
    assert status == 403  # an admin, not an owner
    status, answer = await api(base_url, token, "DELETE", "/teams/platform")
    assert status == 409 and "1 active endpoint(s) (team-bot)" in answer["message"]
    await api(base_url, token, "POST", "/endpoints/team-bot/revoke")
    status, answer = await api(base_url, token, "DELETE", "/teams/platform")
    assert status == 409 and "revoked endpoint(s)" in answer["message"]

    status, _ = await api(base_url, token, "POST", "/teams", {"slug": "empty"})
    _, eve = await tenancy.add_human(services.db, "eve")
    status, _ = await api(base_url, eve, "DELETE", "/teams/empty")
    assert status == 404
    status, answer = await api(base_url, token, "DELETE", "/teams/empty")
    assert status == 200 and answer == {"team": "empty", "deleted": True}
    async with services.db.read() as s:
        assert await s.scalar(select(Team.slug).where(Team.slug == "empty")) is None


# ---------------------------------------------------------------------------------------------
# Notices and login


async def test_a_notice_shows_only_after_its_action_and_only_once(
    services: Services, browser: Browser
) -> None:
    await browser.login(await ada(services))
    _, page = await browser.get("/ui/webhooks?done=webhook_deleted")
    assert "Webhook deleted" not in page and 'class="flash' not in page
    resp, _ = await browser.post("/ui/teams", {"slug": "platform"})
    assert resp.status == 303 and "done=" not in resp.headers["Location"]
    _, page = await browser.get(resp.headers["Location"])
    assert '<div class="flash notice" role="status">Team created.</div>' in page
    _, page = await browser.get(resp.headers["Location"])
    assert "Team created." not in page


async def test_login_returns_to_the_page_asked_for_and_only_to_this_ui(
    services: Services, base_url: str
) -> None:
    token = await ada(services)
    # A deep link while logged out leads to the login page, which remembers it.
    anonymous = Browser(base_url)
    try:
        resp, _ = await anonymous.get("/ui/teams?x=1")
        assert resp.status == 303 and resp.headers["Location"] == "/ui/login?next=/ui/teams?x%3D1"
    finally:
        await anonymous.http.close()
    for asked, lands in (
        ("/ui/teams?x=1", "/ui/teams?x=1"),
        ("//evil.example/ui", "/ui"),
        ("https://evil.example/ui", "/ui"),
        ("/ui/login", "/ui"),
        ("/api/v1/humans/me", "/ui"),
        ("/ui\\evil.example", "/ui"),
    ):
        browser = Browser(base_url)
        try:
            _, page = await browser.get(f"/ui/login?next={quote(asked, safe='')}")
            found = CSRF_RE.search(page)
            assert found is not None
            form = {"csrf": found.group(1), "token": token, "next": asked}
            async with browser.http.post(f"{base_url}/ui/login", data=form, allow_redirects=False) as resp:
                assert resp.status == 303 and resp.headers["Location"] == lands, (asked, resp.headers)
        finally:
            await browser.http.close()


# ---------------------------------------------------------------------------------------------
# The API's consistency


async def test_the_api_refuses_duplicate_keys_long_titles_and_a_revoked_endpoint_alike(
    services: Services, base_url: str
) -> None:
    token = await ada(services)
    status, _ = await api(base_url, token, "POST", "/endpoints", {"name": "bot"})
    assert status == 201
    status, answer = await api(
        base_url, token, "POST", "/todos", raw=b'{"endpoint": "bot", "title": "a", "title": "b"}'
    )
    assert status == 400 and answer["error"] == "duplicate_key" and "'title'" in answer["message"]
    status, answer = await api(base_url, token, "POST", "/todos", {"endpoint": "bot", "title": "t" * 301})
    assert status == 400 and "at most 300 characters" in answer["message"]
    status, answer = await api(base_url, token, "POST", "/todos", {"endpoint": "bot", "title": "t" * 300})
    assert status == 201 and answer["todo"]["title"] == "t" * 300
    await api(base_url, token, "POST", "/endpoints/bot/revoke")
    todo_status, todo_answer = await api(base_url, token, "POST", "/todos", {"endpoint": "bot", "title": "x"})
    hook_status, hook_answer = await api(
        base_url, token, "POST", "/webhooks", {"endpoint": "bot", "source": "generic"}
    )
    assert todo_status == hook_status == 409 and todo_answer["error"] == hook_answer["error"] == "conflict"


def test_bidi_and_control_characters_are_shown_as_their_escapes_in_text_and_attributes() -> None:
    from switchboard.web.html import h

    out = h('<a title="{t}">{t}</a>', t="abc\u202edef\u2066x\u200f\x07\ty\nz")
    assert "\u202e" not in out and "\u2066" not in out and "\u200f" not in out and "\x07" not in out
    shown = "abc\\u202edef\\u2066x\\u200f\\u0007\ty\nz"
    assert out == f'<a title="{shown}">{shown}</a>'
    # Ordinary right-to-left text is text: only the controls are neutralised.
    assert h("{t}", t="שלום abc") == "שלום abc"
