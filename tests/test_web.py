"""The web UI over real HTTP: a browser-like aiohttp client with a cookie jar against the whole app.

Every response body the client sees is kept, so the secret checks grep all pages ever served, not
just the one we happen to look at.
"""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from sqlalchemy import func, select

from switchboard import tenancy, todos
from switchboard.ids import token_hash
from switchboard.models import Connection, Endpoint, Reply, Team, Todo, Webhook, WebSession
from switchboard.testing import github_headers
from switchboard.todos import new_todo_row

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
SBK_RE = re.compile(r"sbk_[A-Za-z0-9_-]{20,}")
WHSEC_RE = re.compile(r"whsec_[A-Za-z0-9_-]{20,}")
INGEST_RE = re.compile(r"/webhooks/(wh_[A-Za-z0-9_-]{20,})")
GITHUB_LOGIN = "acme-bot"


class Browser:
    """A cookie-keeping client that records every page it was served."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        # unsafe=True: the server is an IP address (127.0.0.1), whose cookies a default jar refuses.
        self.http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.pages: list[str] = []
        self.csrf = ""

    async def close(self) -> None:
        await self.http.close()

    async def request(
        self, method: str, path: str, data: dict[str, str] | None = None, **kwargs: Any
    ) -> tuple[aiohttp.ClientResponse, str]:
        kwargs.setdefault("allow_redirects", False)
        async with self.http.request(method, self.base_url + path, data=data, **kwargs) as resp:
            text = await resp.text()
        self.pages.append(text)
        return resp, text

    async def get(self, path: str, **kwargs: Any) -> tuple[aiohttp.ClientResponse, str]:
        return await self.request("GET", path, **kwargs)

    async def post(
        self,
        path: str,
        data: dict[str, str] | None = None,
        *,
        csrf: bool = True,
        confirm: bool = False,
        **kwargs: Any,
    ) -> tuple[aiohttp.ClientResponse, str]:
        """A form POST; ``confirm`` sends what a destructive action's confirmation page sends."""
        data = dict(data or {})
        if csrf:
            data.setdefault("csrf", self.csrf)
        if confirm:
            data.setdefault("confirm", "yes")
        return await self.request("POST", path, data=data, **kwargs)

    async def post_reveal(
        self, path: str, data: dict[str, str] | None = None, **kwargs: Any
    ) -> tuple[aiohttp.ClientResponse, str]:
        """A POST that makes a secret: it answers 303, and the page it leads to shows the secret."""
        resp, _ = await self.post(path, data, **kwargs)
        assert resp.status == 303, (path, resp.status)
        return await self.get(resp.headers["Location"])

    async def login(self, token: str) -> aiohttp.ClientResponse:
        resp, text = await self.get("/ui/login")
        assert resp.status == 200
        login_csrf = CSRF_RE.search(text)
        assert login_csrf is not None
        resp, _ = await self.request("POST", "/ui/login", data={"csrf": login_csrf.group(1), "token": token})
        if resp.status == 303:
            _, board = await self.get("/ui")
            found = CSRF_RE.search(board)
            assert found is not None
            self.csrf = found.group(1)
        return resp

    def everything(self) -> str:
        return "\n".join(self.pages)


@pytest.fixture
async def browser(base_url: str) -> AsyncIterator[Browser]:
    b = Browser(base_url)
    yield b
    await b.close()


@pytest.fixture
async def second_browser(base_url: str) -> AsyncIterator[Browser]:
    b = Browser(base_url)
    yield b
    await b.close()


@pytest.fixture
async def github_stub() -> AsyncIterator[dict[str, Any]]:
    """A stand-in for api.github.com on 127.0.0.1: GET /user answers for one known token."""
    state: dict[str, Any] = {"token": None, "seen": []}

    async def user(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        state["seen"].append(auth)
        if state["token"] and auth == f"Bearer {state['token']}":
            return web.json_response({"login": GITHUB_LOGIN, "id": 1})
        return web.json_response({"message": "Bad credentials"}, status=401)

    app = web.Application()
    app.router.add_get("/user", user)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    state["url"] = str(server.make_url("")).rstrip("/")
    yield state
    await server.close()


@pytest.fixture
def settings_overrides(github_stub: dict[str, Any]) -> dict[str, Any]:
    return {"github_api_url": github_stub["url"]}


async def human(db: Any, handle: str) -> str:
    _, token = await tenancy.add_human(db, handle)
    return token


def field_tag(text: str, name: str) -> str:
    """The <input> tag of a named form field."""
    found = re.search(r'<input[^>]*name="' + re.escape(name) + r'"[^>]*>', text)
    assert found is not None, f"no input named {name}"
    return found.group(0)


def assert_ui_headers(resp: aiohttp.ClientResponse) -> None:
    csp = resp.headers.get("Content-Security-Policy", "")
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "form-action 'self'" in csp
    assert "script-src" not in csp  # no scripts at all: default-src 'none' covers them
    assert resp.headers.get("X-Content-Type-Options") == "nosniff"
    assert resp.headers.get("Referrer-Policy") == "no-referrer"


# ---------------------------------------------------------------------------------------------
# Login, sessions, logout


async def test_login_sets_a_hashed_httponly_strict_session_and_logout_ends_it(
    browser: Browser, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = await human(db, "ada")

    resp, _ = await browser.get("/ui")
    assert resp.status == 303 and resp.headers["Location"] == "/ui/login?next=/ui"
    resp, _ = await browser.get("/")
    assert resp.status == 302 and resp.headers["Location"] == "/ui"

    resp = await browser.login(token)
    assert resp.status == 303
    cookie_header = next(v for v in resp.headers.getall("Set-Cookie") if v.startswith("sb_session="))
    flags = cookie_header.lower()
    assert "httponly" in flags and "samesite=strict" in flags and "path=/" in flags and "max-age=" in flags
    assert "secure" not in flags  # BASE_URL is http here
    value = cookie_header.split(";", 1)[0].split("=", 1)[1]
    async with db.read() as s:
        sessions = (await s.scalars(select(WebSession))).all()
    assert [x.id_hash for x in sessions] == [token_hash(value)]  # only the hash is stored
    assert sessions[0].expires_at > sessions[0].created_at

    resp, text = await browser.get("/ui")
    assert resp.status == 200 and "ada" in text and "Board" in text
    seen = browser.everything() + caplog.text
    assert token not in seen and value not in seen

    resp, _ = await browser.post("/ui/logout")
    assert resp.status == 303 and resp.headers["Location"].startswith("/ui/login")
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(WebSession)) == 0
    resp, text = await browser.get("/ui/login")
    assert "You are logged out." in text  # once, after logging out
    resp, text = await browser.get("/ui/login")
    assert "You are logged out." not in text
    resp, _ = await browser.get("/ui")
    assert resp.status == 303 and resp.headers["Location"] == "/ui/login?next=/ui"

    # The old cookie value, replayed by hand, is dead too.
    async with (
        aiohttp.ClientSession() as raw,
        raw.get(
            browser.base_url + "/ui", headers={"Cookie": f"sb_session={value}"}, allow_redirects=False
        ) as replay,
    ):
        assert replay.status == 303


async def test_a_wrong_token_is_refused_and_never_echoed(browser: Browser, db: Any) -> None:
    await human(db, "ada")
    wrong = "sbo_" + "x" * 43
    resp = await browser.login(wrong)
    assert resp.status == 401
    assert "not valid" in browser.pages[-1]
    assert wrong not in browser.everything()
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(WebSession)) == 0


async def test_login_without_the_login_form_token_is_refused(browser: Browser, db: Any) -> None:
    token = await human(db, "ada")
    # A cross-site login attempt: no cookie from our login page, no matching field.
    resp, text = await browser.request("POST", "/ui/login", data={"csrf": "forged", "token": token})
    assert resp.status == 403
    assert token not in text
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(WebSession)) == 0


@pytest.mark.parametrize("settings_overrides", [{"base_url": "https://switchboard.example"}])
async def test_session_cookie_is_secure_and_host_prefixed_behind_https(browser: Browser, db: Any) -> None:
    token = await human(db, "ada")
    resp, text = await browser.get("/ui/login")
    login_cookie = resp.cookies["sb_login"]
    assert login_cookie["secure"] and login_cookie["httponly"] and login_cookie["samesite"] == "Strict"
    # The client is on plain http, so it would not send a Secure cookie back: do it by hand.
    csrf = CSRF_RE.search(text).group(1)  # type: ignore[union-attr]
    resp, _ = await browser.request(
        "POST",
        "/ui/login",
        data={"csrf": csrf, "token": token},
        headers={"Cookie": f"sb_login={login_cookie.value}"},
    )
    assert resp.status == 303
    cookie = next(v for v in resp.headers.getall("Set-Cookie") if v.startswith("__Host-sb_session="))
    flags = [f.strip().lower() for f in cookie.split(";")]
    assert "secure" in flags and "httponly" in flags and "samesite=strict" in flags and "path=/" in flags


# ---------------------------------------------------------------------------------------------
# CSRF and headers


async def test_posts_without_the_session_csrf_token_are_refused_and_change_nothing(
    browser: Browser, second_browser: Browser, db: Any
) -> None:
    await browser.login(await human(db, "ada"))
    await second_browser.login(await human(db, "eve"))
    form = {"name": "sneaky", "owner": "me", "queues": "default"}

    resp, text = await browser.post("/ui/endpoints", form, csrf=False)
    assert resp.status == 403 and "nothing was changed" in text
    resp, _ = await browser.post("/ui/endpoints", {**form, "csrf": "wrong"})
    assert resp.status == 403
    # Another session's token is not this session's token.
    resp, _ = await browser.post("/ui/endpoints", {**form, "csrf": second_browser.csrf})
    assert resp.status == 403
    resp, _ = await browser.post("/ui/teams", {"slug": "sneaky"}, csrf=False)
    assert resp.status == 403
    resp, _ = await browser.post("/ui/logout", csrf=False)
    assert resp.status == 403

    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(Endpoint)) == 0
        assert await s.scalar(select(func.count()).select_from(Team)) == 0
        assert await s.scalar(select(func.count()).select_from(WebSession)) == 2
    # Still logged in: the refused logout did not end the session.
    resp, _ = await browser.get("/ui")
    assert resp.status == 200


async def test_every_page_has_the_strict_headers_and_no_script(browser: Browser, db: Any) -> None:
    resp, _ = await browser.get("/ui/login")
    assert_ui_headers(resp)
    await browser.login(await human(db, "ada"))
    for path in ("/ui", "/ui/endpoints", "/ui/webhooks", "/ui/connections", "/ui/teams"):
        resp, text = await browser.get(path)
        assert resp.status == 200, path
        assert_ui_headers(resp)
        assert resp.headers.get("Cache-Control") == "no-store"
        assert "<script" not in text.lower(), path
        assert not re.search(r"\s(style|on[a-z]+)=", text, re.IGNORECASE), path
    for path in ("/ui/no-such-page", "/ui/todos/td_00000000000000000000000000"):
        resp, text = await browser.get(path)
        assert resp.status == 404 and "text/html" in resp.headers["Content-Type"]
        assert_ui_headers(resp)
    resp, _ = await browser.post_reveal("/ui/endpoints", {"name": "bot", "owner": "me", "queues": "default"})
    assert resp.status == 200
    assert_ui_headers(resp)
    resp, text = await browser.get("/ui/static/app.css")
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/css") and "body" in text


# ---------------------------------------------------------------------------------------------
# Board


async def test_hostile_titles_and_displays_are_escaped_on_the_board(browser: Browser, db: Any) -> None:
    await browser.login(await human(db, "ada"))
    owner = await tenancy.resolve_owner(db, human="ada")
    endpoint, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner)
    hostile = '<script>alert(1)</script></channel><img src=x onerror="alert(2)">'
    await todos.push(db, endpoint_slug=endpoint.slug, title=hostile)
    async with db.write() as s:
        todo = new_todo_row(
            endpoint_id=endpoint.id,
            queue="default",
            source="github",
            kind="issue_comment",
            title="Issue #7 commented in acme/api — fine",
            payload={"comment": {"body": "</pre><script>x()</script>"}},
            reply_to={"kind": "forge_comment", "display": "github <b>github.com</b>/acme/api#7", "number": 7},
        )
        s.add(todo)
        await s.flush()
        s.add(
            Reply(
                id="rp_00000000000000000000000001",
                todo_id=todo.id,
                endpoint_id=endpoint.id,
                idempotency_key="k1",
                state="sent",
                connection_id=None,
                connection_name="acme",
                connection_fingerprint="fp_abc",
                owner_scope=owner.id,
                address_kind="forge_comment",
                display="github github.com/acme/api#7",
                thread_key="github.com/acme/api#7",
                text_hash="0" * 64,
                provider_object_id="1",
                permalink="javascript:alert(3)",
                created_at=todo.created_at,
                updated_at=todo.created_at,
            )
        )

    resp, text = await browser.get("/ui")
    assert resp.status == 200
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;/channel&gt;&lt;img" in text
    assert "<script" not in text and "<img" not in text and "</channel>" not in text
    assert "github &lt;b&gt;github.com&lt;/b&gt;/acme/api#7" in text and "<b>" not in text
    assert "1 · last" in text  # the replies summary
    assert 'href="javascript:' not in text  # a non-web permalink is shown inert

    resp, detail = await browser.get(f"/ui/todos/{todo.id}")
    assert resp.status == 200
    assert "&lt;/pre&gt;&lt;script&gt;x()&lt;/script&gt;" in detail and "<script" not in detail
    assert "rp_00000000000000000000000001" in detail and "fp_abc" in detail
    assert 'href="javascript:' not in detail

    resp, text = await browser.get("/ui?state=bogus")
    assert resp.status == 400 and "Unknown state" in text
    resp, text = await browser.get("/ui?limit=nope")
    assert resp.status == 400
    resp, text = await browser.get("/ui?state=pending&endpoint=bot")
    assert resp.status == 200 and "&lt;script&gt;" in text and "Issue #7" in text


# ---------------------------------------------------------------------------------------------
# Endpoints


async def test_vend_form_leaves_reply_and_connection_verbs_unchecked_and_flags_the_latter(
    browser: Browser, db: Any
) -> None:
    await browser.login(await human(db, "ada"))
    resp, text = await browser.get("/ui/endpoints")
    assert resp.status == 200
    reply_box = field_tag(text, "reply")
    conn_box = field_tag(text, "connection_verbs")
    assert 'type="checkbox"' in reply_box and "checked" not in reply_box
    assert 'type="checkbox"' in conn_box and "checked" not in conn_box
    flagged = text[text.index('name="connection_verbs"') :][:600]
    assert "hands the agent the owner's outbound credentials" in flagged


async def test_endpoint_token_is_revealed_once_and_never_again(
    browser: Browser, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await browser.login(await human(db, "ada"))
    resp, text = await browser.post_reveal(
        "/ui/endpoints", {"name": "Triage bot", "owner": "me", "queues": "triage, ops", "reply": "on"}
    )
    assert resp.status == 200
    assert resp.headers["Cache-Control"] == "no-store"
    # A reload shows nothing, and vends nothing.
    again, gone = await browser.get("/ui/endpoints/token")
    assert again.status == 410 and not SBK_RE.search(gone)
    tokens = set(SBK_RE.findall(text))
    assert len(tokens) == 1
    token = tokens.pop()
    endpoint = await tenancy.endpoint_by_token(db, token)
    assert endpoint is not None and endpoint.queues == ["triage", "ops"]
    assert "reply" in endpoint.verbs and "list_connections" not in endpoint.verbs

    reveal_count = len(browser.pages)
    await todos.push(db, endpoint_slug=endpoint.slug, title="hello")
    for path in ("/ui", "/ui/endpoints", "/ui/webhooks", "/ui/connections", "/ui/teams"):
        resp, _ = await browser.get(path)
        assert resp.status == 200
    resp, text = await browser.get("/ui/endpoints")
    assert endpoint.token_display in text  # the display prefix is fine
    later = "\n".join(browser.pages[reveal_count:]) + caplog.text
    assert token not in later and token[:20] not in later


async def test_bad_vend_input_comes_back_with_a_message_and_creates_nothing(
    browser: Browser, db: Any
) -> None:
    await browser.login(await human(db, "ada"))
    cases = [
        ({"name": "", "owner": "me"}, "name must be"),
        ({"name": "bot", "owner": "me", "queues": "Bad Queue!"}, "queue"),
        ({"name": "bot", "owner": "me", "expires_in_days": "soon"}, "whole number"),
        ({"name": "bot", "owner": "me", "default_lease_seconds": "0"}, "default lease"),
        ({"name": "bot", "owner": "team:nope"}, "not found"),
    ]
    for form, message in cases:
        resp, text = await browser.post("/ui/endpoints", form)
        assert 400 <= resp.status < 500, form
        assert message in text, (form, text[:2000])
        assert "Vend an endpoint" in text  # the page itself, not a bare error
    resp, text = await browser.post(
        "/ui/endpoints", {"name": "Keeps <me>", "owner": "me", "queues": "bad queue"}
    )
    assert resp.status == 400 and 'value="Keeps &lt;me&gt;"' in text
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(Endpoint)) == 0


async def test_revoke_from_the_endpoints_page(browser: Browser, db: Any) -> None:
    await browser.login(await human(db, "ada"))
    resp, text = await browser.post_reveal("/ui/endpoints", {"name": "bot", "owner": "me"})
    token = SBK_RE.search(text).group(0)  # type: ignore[union-attr]
    # Without the confirmation page's yes, the POST leads there and changes nothing.
    resp, _ = await browser.post("/ui/endpoints/bot/revoke")
    assert resp.status == 303 and resp.headers["Location"] == "/ui/endpoints/bot/revoke"
    assert await tenancy.endpoint_by_token(db, token) is not None
    resp, text = await browser.get("/ui/endpoints/bot/revoke")
    assert resp.status == 200 and "Revoke endpoint bot?" in text and 'name="confirm" value="yes"' in text
    resp, _ = await browser.post("/ui/endpoints/bot/revoke", confirm=True)
    assert resp.status == 303
    assert await tenancy.endpoint_by_token(db, token) is None
    resp, text = await browser.get(resp.headers["Location"])
    assert "Endpoint revoked" in text and "revoked" in text


# ---------------------------------------------------------------------------------------------
# Webhooks


async def test_webhook_secret_and_ingest_url_are_shown_once(
    browser: Browser, db: Any, services: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await browser.login(await human(db, "ada"))
    await browser.post("/ui/endpoints", {"name": "bot", "owner": "me"})
    await browser.post("/ui/endpoints", {"name": "helper", "owner": "me"})

    resp, text = await browser.post_reveal(
        "/ui/webhooks", {"endpoint": "bot", "source": "github", "trust": "allow_all"}
    )
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    secret = WHSEC_RE.search(text).group(0)  # type: ignore[union-attr]
    ingest = INGEST_RE.search(text).group(1)  # type: ignore[union-attr]
    async with db.read() as s:
        webhook = await s.scalar(select(Webhook))
    assert webhook is not None and webhook.ingest_token_hash == token_hash(ingest)
    assert tenancy.webhook_secret(services.vault, webhook) == secret

    resp, _ = await browser.post(f"/ui/webhooks/{webhook.id}/routes", {"endpoint": "helper"})
    assert resp.status == 303
    resp, text = await browser.get("/ui/webhooks")
    assert "helper" in text and webhook.ingest_token_display in text

    resp, text = await browser.post_reveal(f"/ui/webhooks/{webhook.id}/rotate", confirm=True)
    assert resp.status == 200
    rotated = WHSEC_RE.search(text).group(0)  # type: ignore[union-attr]
    assert rotated != secret

    resp, text = await browser.post_reveal("/ui/webhooks", {"endpoint": "bot", "source": "slack"})
    assert resp.status == 200 and "issued by the provider" in text
    assert WHSEC_RE.search(text) is None
    async with db.read() as s:
        slack = await s.scalar(select(Webhook).where(Webhook.source == "slack"))
    assert slack is not None and slack.secret_state == "awaiting"
    provider_secret = "8f742231b10e8888abcd99yyyzzz85a5"
    resp, _ = await browser.post(f"/ui/webhooks/{slack.id}/secret", {"secret": provider_secret})
    assert resp.status == 303
    async with db.read() as s:
        assert (await s.get(Webhook, slack.id)).secret_state == "set"  # type: ignore[union-attr]
    resp, text = await browser.post(f"/ui/webhooks/{webhook.id}/secret", {"secret": "nope"})
    assert resp.status == 400 and "rotate" in text  # a minted kind's secret is not set by hand

    resp, _ = await browser.post(
        f"/ui/webhooks/{webhook.id}/routes/remove", {"endpoint": "helper"}, confirm=True
    )
    assert resp.status == 303
    resp, text = await browser.post(f"/ui/webhooks/{webhook.id}/routes", {"endpoint": "nobody"})
    assert resp.status == 404 and "nobody" in text

    for path in ("/ui", "/ui/endpoints", "/ui/webhooks", "/ui/connections", "/ui/teams"):
        await browser.get(path)
    reveals = [p for p in browser.pages if secret in p or rotated in p or ingest in p]
    assert len(reveals) == 2  # the create page and the rotate page, nothing else
    assert provider_secret not in browser.everything()
    for value in (secret, rotated, ingest, provider_secret):
        assert value not in caplog.text

    resp, _ = await browser.post(f"/ui/webhooks/{webhook.id}/delete", confirm=True)
    assert resp.status == 303
    async with db.read() as s:
        assert await s.get(Webhook, webhook.id) is None


# ---------------------------------------------------------------------------------------------
# Connections


async def test_connection_pages_show_the_fingerprint_never_the_secret(
    browser: Browser, db: Any, services: Any, github_stub: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await browser.login(await human(db, "ada"))
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2
    github_stub["token"] = secret
    resp, _ = await browser.post(
        "/ui/connections",
        {
            "owner": "me",
            "kind": "github",
            "name": "acme-bot",
            "account_key": "",
            "secret": secret,
            "targets": "acme/*",
        },
    )
    assert resp.status == 303
    resp, text = await browser.get("/ui/connections")
    fingerprint = services.vault.fingerprint(secret)
    assert fingerprint in text and "acme-bot" in text and "github.com" in text and "acme/*" in text

    # A refused form comes back with the other fields, never the secret.
    resp, text = await browser.post(
        "/ui/connections",
        {"owner": "me", "kind": "github", "name": "acme-bot", "account_key": "", "secret": secret},
    )
    assert resp.status == 409 and "already exists" in text and 'value="acme-bot"' in text
    resp, text = await browser.post(
        "/ui/connections", {"owner": "me", "kind": "carrier-pigeon", "name": "x", "secret": secret}
    )
    assert resp.status == 400 and "unknown connection kind" in text

    async with db.read() as s:
        connection = await s.scalar(select(Connection))
    assert connection is not None
    resp, _ = await browser.post(f"/ui/connections/{connection.id}/test")
    assert resp.status == 303
    resp, text = await browser.get(resp.headers["Location"])
    assert "Connection test passed" in text and f"authenticated as {GITHUB_LOGIN}" in text
    assert github_stub["seen"] == [f"Bearer {secret}"]  # the stub saw it; no page did

    new_secret = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0" * 2
    resp, _ = await browser.post(
        f"/ui/connections/{connection.id}/rotate", {"secret": new_secret}, confirm=True
    )
    assert resp.status == 303
    resp, text = await browser.get("/ui/connections")
    assert services.vault.fingerprint(new_secret) in text and fingerprint not in text
    resp, _ = await browser.post(f"/ui/connections/{connection.id}/test")
    resp, text = await browser.get(resp.headers["Location"])
    # The stub refuses the rotated secret: shown as an auth failure, in the error box.
    assert "Connection test failed" in text and '<span class="badge error">auth</span>' in text
    assert '<div class="flash error" role="alert">Connection test failed' in text

    everything = browser.everything() + caplog.text
    assert secret not in everything and new_secret not in everything
    assert secret[4:24] not in everything

    resp, _ = await browser.post(f"/ui/connections/{connection.id}/delete", confirm=True)
    assert resp.status == 303
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(Connection)) == 0


async def test_team_members_see_connections_but_cannot_manage_them(
    browser: Browser, second_browser: Browser, db: Any, services: Any
) -> None:
    await browser.login(await human(db, "ada"))
    await second_browser.login(await human(db, "bob"))
    resp, _ = await browser.post("/ui/teams", {"slug": "platform"})
    assert resp.status == 303
    resp, _ = await browser.post("/ui/teams/platform/members", {"handle": "bob", "role": "member"})
    assert resp.status == 303
    secret = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx"
    resp, _ = await browser.post(
        "/ui/connections",
        {
            "owner": "team:platform",
            "kind": "slack",
            "name": "team-slack",
            "account_key": "T0123ABC",
            "secret": secret,
        },
    )
    assert resp.status == 303
    async with db.read() as s:
        connection = await s.scalar(select(Connection))
    assert connection is not None

    # Bob's session learned of his membership at its next request.
    resp, text = await second_browser.get("/ui/connections")
    assert resp.status == 200
    assert "team-slack" in text and "T0123ABC" in text and services.vault.fingerprint(secret) in text
    assert f"/ui/connections/{connection.id}/" not in text  # no test, rotate or delete forms
    assert 'value="team:platform"' not in text  # nor the team as an owner to add connections to
    assert "you see its connections; its owners and admins manage them" in text
    for action, data in (("rotate", {"secret": "xoxb-new-secret-value-123"}), ("delete", {}), ("test", {})):
        resp, text = await second_browser.post(
            f"/ui/connections/{connection.id}/{action}", data, confirm=True
        )
        assert resp.status == 403, action
    resp, _ = await second_browser.post(
        "/ui/connections",
        {
            "owner": "team:platform",
            "kind": "slack",
            "name": "mine",
            "account_key": "T0999",
            "secret": "xoxb-x-y",
        },
    )
    assert resp.status == 403
    resp, _ = await second_browser.post("/ui/endpoints", {"name": "bobs-bot", "owner": "team:platform"})
    assert resp.status == 403
    resp, _ = await second_browser.post("/ui/teams/platform/members", {"handle": "bob", "role": "admin"})
    assert resp.status == 403

    async with db.read() as s:
        rows = (await s.scalars(select(Connection))).all()
        assert [(c.id, c.fingerprint) for c in rows] == [(connection.id, services.vault.fingerprint(secret))]
        assert await s.scalar(select(func.count()).select_from(Endpoint)) == 0
    assert secret not in browser.everything() + second_browser.everything()

    # Promoted to admin, bob manages the team's connections.
    resp, _ = await browser.post("/ui/teams/platform/members", {"handle": "bob", "role": "admin"})
    assert resp.status == 303
    resp, _ = await second_browser.post(f"/ui/connections/{connection.id}/delete", confirm=True)
    assert resp.status == 303
    # An admin cannot touch an owner.
    resp, _ = await second_browser.post("/ui/teams/platform/members/remove", {"handle": "ada"}, confirm=True)
    assert resp.status == 403
    resp, text = await browser.post("/ui/teams/platform/members/remove", {"handle": "ada"}, confirm=True)
    assert resp.status == 409 and "at least one owner" in text


# ---------------------------------------------------------------------------------------------
# Isolation between humans


async def test_another_humans_resources_are_invisible_and_404(
    browser: Browser, second_browser: Browser, db: Any
) -> None:
    await browser.login(await human(db, "ada"))
    await second_browser.login(await human(db, "eve"))
    resp, text = await browser.post("/ui/endpoints", {"name": "ada-bot", "owner": "me"})
    assert resp.status == 303
    await browser.post("/ui/webhooks", {"endpoint": "ada-bot", "source": "generic"})
    await browser.post("/ui/teams", {"slug": "adas-team"})
    await browser.post(
        "/ui/connections",
        {
            "owner": "me",
            "kind": "github",
            "name": "ada-github",
            "account_key": "",
            "secret": "ghp_secretvalue1",
        },
    )
    todo = await todos.push(db, endpoint_slug="ada-bot", title="private work item")
    async with db.read() as s:
        webhook = await s.scalar(select(Webhook))
        connection = await s.scalar(select(Connection))
    assert webhook is not None and connection is not None

    for path in ("/ui", "/ui/endpoints", "/ui/webhooks", "/ui/connections", "/ui/teams"):
        resp, text = await second_browser.get(path)
        assert resp.status == 200
        for leak in ("private work item", "ada-bot", "ada-github", webhook.id, "adas-team"):
            assert leak not in text, (path, leak)
    resp, _ = await second_browser.get(f"/ui/todos/{todo.id}")
    assert resp.status == 404
    refused = [
        ("/ui/endpoints/ada-bot/revoke", {}),
        (f"/ui/webhooks/{webhook.id}/delete", {}),
        (f"/ui/webhooks/{webhook.id}/routes", {"endpoint": "ada-bot"}),
        (f"/ui/connections/{connection.id}/delete", {}),
        (f"/ui/connections/{connection.id}/rotate", {"secret": "ghp_takeover"}),
        ("/ui/teams/adas-team/members", {"handle": "eve", "role": "owner"}),
        ("/ui/webhooks", {"endpoint": "ada-bot", "source": "generic"}),
    ]
    for path, data in refused:
        resp, _ = await second_browser.post(path, data)
        assert resp.status == 404, path

    async with db.read() as s:
        assert (await s.scalar(select(Endpoint.state).where(Endpoint.slug == "ada-bot"))) == "active"
        assert await s.get(Webhook, webhook.id) is not None
        assert (await s.get(Connection, connection.id)).fingerprint == connection.fingerprint  # type: ignore[union-attr]
        assert await s.scalar(select(func.count()).select_from(Webhook)) == 1
        assert (await s.get(Todo, todo.id)).state == "pending"  # type: ignore[union-attr]
    teams = await tenancy.list_teams(db)
    assert teams[0]["members"] == [{"handle": "ada", "role": "owner"}]


# ---------------------------------------------------------------------------------------------
# Malformed requests


async def test_malformed_requests_get_a_clear_4xx_page_and_change_nothing(browser: Browser, db: Any) -> None:
    await browser.login(await human(db, "ada"))
    url = browser.base_url + "/ui/endpoints"
    part = 'Content-Disposition: form-data; name="csrf"\r\n\r\n'
    cases: list[tuple[bytes, str, int]] = [
        (b"--xx\r\ngarbage", "multipart/form-data; boundary=xx", 400),
        (b"garbage", "multipart/form-data", 400),
        (f"--xx\r\n{part}{browser.csrf}\r\n--xx\r\nbroken".encode(), "multipart/form-data; boundary=xx", 400),
        (f"csrf={browser.csrf}&name=a%00b&owner=me".encode(), "application/x-www-form-urlencoded", 400),
        (b'{"name": "bot"}', "application/json", 403),
        (b"x" * (6 * 1024 * 1024), "application/x-www-form-urlencoded", 413),
    ]
    for body, content_type, status in cases:
        async with browser.http.post(url, data=body, headers={"Content-Type": content_type}) as resp:
            text = await resp.text()
        assert resp.status == status, (content_type, body[:60], text[:300])
        assert resp.headers["Content-Type"].startswith("text/html")
        assert_ui_headers(resp)
    for path in ("/ui/todos/td_%00", "/ui?endpoint=%00", "/ui?queue=a%00"):
        resp, text = await browser.get(path)
        assert resp.status == 400 and "contains a NUL character" in text, path
    resp, text = await browser.post("/ui/endpoints/a%00b/revoke")
    assert resp.status == 400 and "contains a NUL character" in text
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(Endpoint)) == 0


async def test_board_pages_through_older_todos(browser: Browser, db: Any) -> None:
    await browser.login(await human(db, "ada"))
    owner = await tenancy.resolve_owner(db, human="ada")
    endpoint, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner)
    for n in range(5):
        await todos.push(db, endpoint_slug=endpoint.slug, title=f"item number {n}")
    seen: list[str] = []
    path: str | None = "/ui?limit=2"
    while path is not None:
        resp, text = await browser.get(path)
        assert resp.status == 200
        seen += re.findall(r"item number \d", text)
        older = re.search(r'<a href="(/ui\?[^"]+)">Older todos', text)
        path = older.group(1).replace("&amp;", "&") if older else None
    assert seen == [f"item number {n}" for n in (4, 3, 2, 1, 0)]
    resp, text = await browser.get("/ui?before=td_00000000000000000000000000")
    assert resp.status == 400 and "no longer exists" in text


async def test_an_expired_session_is_logged_out(browser: Browser, db: Any) -> None:
    await browser.login(await human(db, "ada"))
    async with db.write() as s:
        for session in (await s.scalars(select(WebSession))).all():
            session.expires_at = session.created_at
    resp, _ = await browser.get("/ui/endpoints")
    assert resp.status == 303 and resp.headers["Location"] == "/ui/login?next=/ui/endpoints"
    resp, text = await browser.post("/ui/teams", {"slug": "late"})
    assert resp.status == 401 and "Log in again" in text
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(Team)) == 0


@pytest.mark.parametrize("settings_overrides", [{"secret_encryption_key": None}])
async def test_without_an_encryption_key_connections_are_refused_with_a_clear_page(
    browser: Browser, db: Any
) -> None:
    await browser.login(await human(db, "ada"))
    resp, text = await browser.get("/ui/connections")
    assert "SWITCHBOARD_SECRET_ENCRYPTION_KEY" in text
    secret = "ghp_no_key_configured_123456"
    resp, text = await browser.post(
        "/ui/connections",
        {"owner": "me", "kind": "github", "name": "gh", "account_key": "", "secret": secret},
    )
    assert resp.status == 409 and "switchboard keygen" in text and secret not in text
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(Connection)) == 0


async def test_a_webhook_made_in_the_ui_delivers_to_the_board(browser: Browser, db: Any) -> None:
    """The revealed URL and secret are the real ones: a signed GitHub delivery lands on the board
    with its reply address."""
    from fixtures.ingest_kit import fixture, fixture_bytes

    await browser.login(await human(db, "ada"))
    await browser.post("/ui/endpoints", {"name": "bot", "owner": "me"})
    resp, text = await browser.post_reveal(
        "/ui/webhooks", {"endpoint": "bot", "source": "github", "trust": "allow_all"}
    )
    assert resp.status == 200
    secret = WHSEC_RE.search(text).group(0)  # type: ignore[union-attr]
    ingest = INGEST_RE.search(text).group(1)  # type: ignore[union-attr]

    body = fixture_bytes("github/issues/opened.payload.json")
    async with browser.http.post(
        f"{browser.base_url}/webhooks/{ingest}", data=body, headers=github_headers(secret, body, "issues")
    ) as delivered:
        assert delivered.status == 202, await delivered.text()
    repo = fixture("github/issues/opened.payload.json")["repository"]["full_name"]

    resp, text = await browser.get("/ui")
    assert resp.status == 200
    assert "forge_comment" in text and f"github.com/{repo}#" in text
    async with db.read() as s:
        todo = await s.scalar(select(Todo))
    assert todo is not None and todo.reply_to is not None
    resp, detail = await browser.get(f"/ui/todos/{todo.id}")
    assert resp.status == 200 and todo.reply_to["display"] in detail and "No replies yet" in detail


# ---------------------------------------------------------------------------------------------
# How refusals come back, team roles, the todo page's edges


async def test_a_refused_change_comes_back_on_its_page_and_only_a_refused_create_form_unfolds(
    browser: Browser, second_browser: Browser, db: Any
) -> None:
    await browser.login(await human(db, "ada"))
    await second_browser.login(await human(db, "bob"))
    await browser.post("/ui/teams", {"slug": "platform"})
    await browser.post("/ui/teams/platform/members", {"handle": "bob", "role": "member"})
    resp, _ = await browser.post("/ui/endpoints", {"name": "team-bot", "owner": "team:platform"})
    assert resp.status == 303

    # A member may see the team's endpoint but not revoke it: the endpoints page says why.
    resp, text = await second_browser.post("/ui/endpoints/team-bot/revoke", confirm=True)
    assert resp.status == 403
    assert "<h1>Endpoints</h1>" in text and "only the owners and admins of team platform" in text
    assert '<details class="create">' in text  # the vend form stays folded
    async with db.read() as s:
        assert await s.scalar(select(Endpoint.state).where(Endpoint.slug == "team-bot")) == "active"

    # A refused create form unfolds with what was typed; a refused row action does not.
    resp, text = await browser.post("/ui/endpoints", {"name": "x", "owner": "me", "queues": "Bad Queue!"})
    assert resp.status == 400 and '<details class="create" open>' in text and 'value="Bad Queue!"' in text
    resp, _ = await browser.post("/ui/webhooks", {"endpoint": "team-bot", "source": "generic"})
    assert resp.status == 303
    async with db.read() as s:
        webhook = await s.scalar(select(Webhook))
    assert webhook is not None
    resp, text = await browser.post(f"/ui/webhooks/{webhook.id}/routes", {"endpoint": "no-such-bot"})
    assert resp.status == 404 and "<h1>Webhooks</h1>" in text and "no-such-bot" in text
    assert '<details class="create">' in text and '<details class="create" open>' not in text


async def test_team_roles_are_enforced_and_anyone_may_leave(
    browser: Browser, second_browser: Browser, db: Any
) -> None:
    await browser.login(await human(db, "ada"))
    await second_browser.login(await human(db, "bob"))
    carol = Browser(browser.base_url)
    try:
        await carol.login(await human(db, "carol"))
        await human(db, "dave")
        await browser.post("/ui/teams", {"slug": "platform"})
        for handle, role in (("bob", "admin"), ("carol", "member")):
            resp, _ = await browser.post("/ui/teams/platform/members", {"handle": handle, "role": role})
            assert resp.status == 303

        # An admin manages members but cannot make an owner; a member manages nobody.
        resp, text = await second_browser.post(
            "/ui/teams/platform/members", {"handle": "dave", "role": "owner"}
        )
        assert resp.status == 403 and "only a team owner" in text
        resp, text = await carol.post("/ui/teams/platform/members", {"handle": "dave", "role": "member"})
        assert resp.status == 403 and "<h1>Teams</h1>" in text
        resp, text = await browser.post("/ui/teams/platform/members", {"handle": "dave", "role": "king"})
        assert resp.status == 400 and "role must be one of" in text
        resp, text = await browser.post("/ui/teams/platform/members/remove", {"handle": "dave"}, confirm=True)
        assert resp.status == 404

        # The admin's page offers removing the member, not the owner; the member's page only leaving.
        _, text = await second_browser.get("/ui/teams")
        assert text.count('href="/ui/teams/platform/members/remove?handle=') == 2  # carol, and bob leaving
        assert 'href="/ui/teams/platform/members/remove?handle=ada"' not in text
        _, text = await carol.get("/ui/teams")
        assert text.count('href="/ui/teams/platform/members/remove?handle=') == 1 and ">Leave…</a>" in text

        # Leaving asks first: without the confirmation nothing changes.
        resp, _ = await carol.post("/ui/teams/platform/members/remove", {"handle": "carol"})
        assert resp.status == 303
        assert resp.headers["Location"] == "/ui/teams/platform/members/remove?handle=carol"
        resp, text = await carol.get(resp.headers["Location"])
        assert resp.status == 200 and "Leave team platform?" in text
        resp, _ = await carol.post("/ui/teams/platform/members/remove", {"handle": "carol"}, confirm=True)
        assert resp.status == 303
        _, text = await carol.get(resp.headers["Location"])
        assert "Member removed." in text and "You are in no team yet." in text
    finally:
        await carol.close()
    teams = await tenancy.list_teams(db)
    assert teams[0]["members"] == [{"handle": "ada", "role": "owner"}, {"handle": "bob", "role": "admin"}]


async def test_the_todo_page_truncates_a_huge_payload_and_the_board_marks_dead_letters(
    browser: Browser, db: Any
) -> None:
    await browser.login(await human(db, "ada"))
    owner = await tenancy.resolve_owner(db, human="ada")
    endpoint, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner)
    huge = "<" * 70_000  # each escapes to four characters: the cut is on the text, before escaping
    todo = await todos.push(db, endpoint_slug=endpoint.slug, title="big one", payload={"blob": huge})

    resp, text = await browser.get(f"/ui/todos/{todo.id}")
    assert resp.status == 200 and "Cut to about 65,536 characters" in text
    shown = text[text.rindex("<pre>") + 5 : text.rindex("</pre>")]
    assert shown.count("&lt;") < 65536 and "<" not in shown.replace("&lt;", "")
    # Cut on a JSON boundary: what is shown still parses, and says what it lost.
    assert json.loads(html.unescape(shown))["blob"].endswith("… (4472 more characters cut)")
    assert f'href="/ui/todos/{todo.id}/payload"' in text

    resp, _ = await browser.post(f"/ui/endpoints/{endpoint.slug}/revoke", confirm=True)
    assert resp.status == 303
    resp, text = await browser.get("/ui?state=dead")
    assert resp.status == 200 and "big one" in text and '<span class="badge dead">dead letter</span>' in text


async def test_head_requests_get_the_same_status_and_headers(browser: Browser, db: Any) -> None:
    resp, _ = await browser.request("HEAD", "/ui")
    assert resp.status == 303 and resp.headers["Location"] == "/ui/login?next=/ui"
    await browser.login(await human(db, "ada"))
    for path in ("/ui", "/ui/endpoints", "/ui/teams", "/ui/static/app.css"):
        resp, _ = await browser.request("HEAD", path)
        assert resp.status == 200, path
        assert_ui_headers(resp)


# ---------------------------------------------------------------------------------------------
# Forms in a charset the server cannot use, or decoding to text no database can hold: a 4xx page,
# never a 500 (aiohttp decodes a form with the charset its Content-Type names).


@pytest.mark.parametrize("path", ["/ui/endpoints", "/ui/teams", "/ui/connections", "/ui/login"])
async def test_a_form_in_a_charset_python_does_not_know_is_a_4xx_page(
    db: Any, browser: Browser, path: str
) -> None:
    await browser.login(await human(db, "ada"))
    resp, page = await browser.request(
        "POST",
        path,
        data=f"csrf={browser.csrf}&name=x&slug=x".encode(),  # type: ignore[arg-type]
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=bogus"},
    )
    assert 400 <= resp.status < 500, (resp.status, page[:300])
    assert resp.content_type == "text/html" and "could not be read" in page


@pytest.mark.parametrize("path", ["/ui/endpoints", "/ui/connections"])
async def test_a_form_field_that_decodes_to_a_lone_surrogate_is_a_4xx_page(
    db: Any, browser: Browser, path: str
) -> None:
    await browser.login(await human(db, "ada"))
    # utf-7 decodes "+2AA-" into U+D800, a lone surrogate.
    form = f"csrf={browser.csrf}&name=x+2AA-&kind=github&account_key=github.com&secret=s"
    resp, page = await browser.request(
        "POST",
        path,
        data=form.encode(),  # type: ignore[arg-type]
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-7"},
    )
    assert 400 <= resp.status < 500, (resp.status, page[:300])
    assert "not valid text" in page
    async with db.read() as s:
        assert (await s.scalar(select(func.count()).select_from(Endpoint))) == 0
        assert (await s.scalar(select(func.count()).select_from(Connection))) == 0


@pytest.mark.parametrize(
    "asked",
    [
        "/ui/../api/v1/humans/me",  # resolves to /api/v1/humans/me: not a page of this UI
        "/ui/%2e%2e/metrics",  # the same with the dots percent-encoded
        "/ui/..//evil.example",  # resolves to //evil.example on this host
    ],
)
async def test_login_next_with_dot_segments_does_not_leave_the_ui(
    browser: Browser, db: Any, asked: str
) -> None:
    """docs/web.md: a `next` that is not a path under `/ui` lands on the board. A browser resolves
    dot segments in a Location header, so these left /ui."""
    token = await human(db, "ada")
    _, text = await browser.get(f"/ui/login?next={quote(asked, safe='')}")
    found = CSRF_RE.search(text)
    assert found is not None
    resp, _ = await browser.request(
        "POST", "/ui/login", data={"csrf": found.group(1), "token": token, "next": asked}
    )
    assert resp.status == 303
    assert resp.headers["Location"] == "/ui", resp.headers["Location"]


async def test_a_head_request_does_not_burn_a_one_time_reveal(browser: Browser, db: Any) -> None:
    """HEAD is a safe method (RFC 9110), and aiohttp's add_get answers it with the GET handler: a
    HEAD on the reveal page took the secret off the session's row without showing it."""
    assert (await browser.login(await human(db, "ada"))).status == 303
    resp, _ = await browser.post("/ui/endpoints", {"name": "bot", "owner": "me", "queues": "default"})
    assert resp.status == 303 and resp.headers["Location"] == "/ui/endpoints/token"
    head, _ = await browser.request("HEAD", "/ui/endpoints/token")
    assert head.status < 500  # what it says does not matter; that it takes nothing does
    resp, text = await browser.get("/ui/endpoints/token")
    assert resp.status == 200 and SBK_RE.search(text), resp.status
