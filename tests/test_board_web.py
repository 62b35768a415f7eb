"""The board and the todo page over real HTTP: filters, per-state counts, Newer/Newest, filters kept
across a todo, the operator's buttons (cancel and bulk only after a confirmation page), history,
result and finish time, the raw payload download, and honest "no reply address" wording."""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
from sqlalchemy import select, update

from switchboard import tenancy, todos
from switchboard.db import Database, utcnow
from switchboard.models import Endpoint, Todo, TodoEvent
from switchboard.testing import add_todo

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


class Browser:
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

    async def login(self, token: str) -> None:
        _, text = await self.get("/ui/login")
        found = CSRF_RE.search(text)
        assert found is not None
        async with self.http.post(
            self.base_url + "/ui/login", data={"csrf": found.group(1), "token": token}, allow_redirects=False
        ) as resp:
            assert resp.status == 303
        _, board = await self.get("/ui")
        found = CSRF_RE.search(board)
        assert found is not None
        self.csrf = found.group(1)


@pytest.fixture
async def browser(base_url: str) -> AsyncIterator[Browser]:
    b = Browser(base_url)
    yield b
    await b.http.close()


@pytest.fixture
async def other(base_url: str) -> AsyncIterator[Browser]:
    b = Browser(base_url)
    yield b
    await b.http.close()


async def _ada(db: Database, browser: Browser, queues: list[str] | None = None) -> Endpoint:
    _, token = await tenancy.add_human(db, "ada")
    await browser.login(token)
    owner = await tenancy.resolve_owner(db, human="ada")
    endpoint, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner, queues=queues or ["default"])
    return endpoint


async def _dead(db: Database, endpoint: Endpoint, title: str = "dies") -> str:
    todo = await add_todo(db, endpoint, title=title)
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(max_attempts=1))
    await todos.claim(db, endpoint, todo.id)
    await todos.fail(db, endpoint, todo.id)
    return todo.id


def _titles(page: str) -> list[str]:
    return re.findall(r'<a href="/ui/todos/[^"]+">([^<]+)</a>', page)


def _without_done(location: str) -> str:
    """A redirect's target without its notice parameter, if the notice travels in the URL."""
    return re.sub(r"[?&]done=[a-z_]+$", "", location)


def _link(page: str, label: str) -> str | None:
    found = re.search(r'<a [^>]*href="([^"]+)"[^>]*>' + re.escape(label), page)
    return html.unescape(found.group(1)) if found else None


async def _state(db: Database, todo_id: str) -> Todo:
    async with db.read() as s:
        row = await s.get(Todo, todo_id)
    assert row is not None
    return row


async def test_board_filters_counts_and_search(browser: Browser, db: Database) -> None:
    bot = await _ada(db, browser, ["default", "ci"])
    forge = {
        "kind": "forge_comment",
        "provider": "github",
        "display": "github github.com/acme/api#7",
        "repo": "acme/api",
    }
    slack = {"kind": "slack_thread", "provider": "slack", "display": "slack T1/C0456", "channel": "C0456"}
    await add_todo(
        db, bot, title="Build RED on main", queue="ci", source="github", kind="check_run.completed"
    )
    await add_todo(
        db, bot, title="Issue commented", source="github", kind="issue_comment.created", reply_to=forge
    )
    await add_todo(
        db, bot, title="Help in channel", source="slack", kind="event_callback.message", reply_to=slack
    )
    old = await add_todo(db, bot, title="Ancient history")
    async with db.write() as s:
        await s.execute(
            update(Todo).where(Todo.id == old.id).values(created_at=utcnow() - timedelta(days=40))
        )
    await _dead(db, bot, "Dead one")

    _, page = await browser.get("/ui")
    assert len(_titles(page)) == 5
    assert re.search(r'aria-current="page">all <span class="count">5</span>', page)
    assert '>dead <span class="count">1</span>' in page and '>pending <span class="count">4</span>' in page
    # The queue, source and kind filters are lists of what exists, not free text.
    assert '<select id="f-queue" name="queue">' in page and '<option value="ci">ci</option>' in page
    assert '<option value="check_run.completed">' in page and '<option value="slack">slack</option>' in page

    cases = {
        "q=build+red": ["Build RED on main"],
        "source=slack": ["Help in channel"],
        "kind=issue_comment.created": ["Issue commented"],
        "queue=ci": ["Build RED on main"],
        "place=acme/api": ["Issue commented"],
        "place=C0456": ["Help in channel"],
        "state=dead": ["Dead one"],
        f"to={(utcnow() - timedelta(days=30)).date().isoformat()}": ["Ancient history"],
        f"from={(utcnow() - timedelta(days=1)).date().isoformat()}&source=github": [
            "Issue commented",
            "Build RED on main",
        ],
    }
    for query, titles in cases.items():
        resp, page = await browser.get(f"/ui?{query}")
        assert resp.status == 200 and _titles(page) == titles, (query, _titles(page))
    # Counts follow the other filters: two github todos, none of them dead.
    _, page = await browser.get("/ui?source=github")
    assert '>all <span class="count">2</span>' in page and '>dead <span class="count">0</span>' in page
    resp, page = await browser.get("/ui?from=yesterday")
    assert resp.status == 400 and "from must be a date" in page and len(_titles(page)) == 5
    resp, page = await browser.get("/ui?q=" + "x" * 500)
    assert resp.status == 400


async def test_newer_newest_and_filters_kept_across_a_todo(browser: Browser, db: Database) -> None:
    bot = await _ada(db, browser)
    for n in range(7):
        await add_todo(db, bot, title=f"item {n}")
    _, first = await browser.get("/ui?limit=2&q=item")
    assert _titles(first) == ["item 6", "item 5"] and _link(first, "← Newer") is None
    older = _link(first, "Older todos")
    assert older is not None
    _, second = await browser.get(older)
    assert _titles(second) == ["item 4", "item 3"]
    newer, newest = _link(second, "← Newer"), _link(second, "« Newest")
    assert newer is not None and newest is not None
    _, back_up = await browser.get(newer)
    assert _titles(back_up) == ["item 6", "item 5"]
    assert parse_qs(urlsplit(newest).query) == {"limit": ["2"], "q": ["item"]}

    # A todo link carries the board's filters and page; its way back returns there.
    todo_link = re.search(r'<a href="(/ui/todos/[^"]+)">item 4</a>', second)
    assert todo_link is not None
    _, detail = await browser.get(html.unescape(todo_link.group(1)))
    back = _link(detail, "← Board")
    assert back is not None and back == older
    # A back= naming anything else is dropped.
    todo_id = html.unescape(todo_link.group(1)).split("/")[3].split("?")[0]
    _, detail = await browser.get(f"/ui/todos/{todo_id}?back=evil%3Dx%26state%3Ddead")
    assert _link(detail, "← Board") == "/ui?state=dead"


async def test_requeue_release_and_cancel_with_a_confirmation(browser: Browser, db: Database) -> None:
    bot = await _ada(db, browser)
    dead = await _dead(db, bot, "Dead one")

    _, page = await browser.get(f"/ui/todos/{dead}")
    assert "its last attempt failed" in page and ">Requeue</button>" in page and ">Release<" not in page
    resp, _ = await browser.post(f"/ui/todos/{dead}/requeue")
    # Back to the todo page, which says what happened (the notice: in the URL or on the session).
    assert resp.status == 303 and _without_done(resp.headers["Location"]) == f"/ui/todos/{dead}"
    _, page = await browser.get(resp.headers["Location"])
    assert "Todo requeued" in page and "human:ada" in page and "attempts reset" in page
    row = await _state(db, dead)
    assert (row.state, row.attempt, row.dead_letter) == ("pending", 0, False)

    await todos.claim(db, bot, dead)
    _, page = await browser.get(f"/ui/todos/{dead}")
    assert ">Release</button>" in page and ">Requeue<" not in page
    resp, _ = await browser.post(f"/ui/todos/{dead}/release", {"back": "state=claimed"})
    assert resp.status == 303
    assert _without_done(resp.headers["Location"]) == f"/ui/todos/{dead}?back=state%3Dclaimed"
    _, page = await browser.get(resp.headers["Location"])
    assert "Claim released" in page and _link(page, "← Board") == "/ui?state=claimed"
    assert (await _state(db, dead)).state == "pending"

    # Cancel asks first: the button is a link to a page that changes nothing.
    cancel = _link(page, "Cancel…")
    assert cancel == f"/ui/todos/{dead}/cancel?back=state%3Dclaimed"
    resp, confirm = await browser.get(cancel)
    assert resp.status == 200 and "Cancelling is final" in confirm and 'name="confirm" value="yes"' in confirm
    assert (await _state(db, dead)).state == "pending"
    resp, _ = await browser.post(f"/ui/todos/{dead}/cancel")  # no confirmation: sent to the page
    assert resp.status == 303 and resp.headers["Location"] == f"/ui/todos/{dead}/cancel"
    assert (await _state(db, dead)).state == "pending"
    resp, _ = await browser.post(f"/ui/todos/{dead}/cancel", {"confirm": "yes"})
    assert resp.status == 303 and _without_done(resp.headers["Location"]) == f"/ui/todos/{dead}"
    _, page = await browser.get(resp.headers["Location"])
    assert "Todo cancelled." in page
    row = await _state(db, dead)
    assert row.state == "cancelled" and row.finished_at is not None
    _, page = await browser.get(f"/ui/todos/{dead}")
    assert "Cancel…" not in page and ">Requeue<" not in page
    assert page.count('<td><span class="mono">human:ada</span></td>') == 3  # requeue, release, cancel
    # Acting on a todo that moved on comes back as its page, saying why.
    resp, page = await browser.post(f"/ui/todos/{dead}/requeue")
    assert resp.status == 409 and "only failed todos" in page
    resp, page = await browser.get(f"/ui/todos/{dead}/cancel")
    assert resp.status == 409


async def test_members_see_no_buttons_and_others_see_nothing(
    browser: Browser, other: Browser, db: Database
) -> None:
    await tenancy.add_human(db, "ada")
    _, max_token = await tenancy.add_human(db, "max")
    _, eve_token = await tenancy.add_human(db, "eve")
    await tenancy.add_team(db, "ops", "ada")
    await tenancy.set_member(db, "ops", "max", "member")
    ops, _ = await tenancy.vend_endpoint(
        db, name="ops bot", owner=await tenancy.resolve_owner(db, team="ops")
    )
    dead = await _dead(db, ops, "Team dead letter")

    await browser.login(max_token)
    _, page = await browser.get(f"/ui/todos/{dead}")
    assert "Team dead letter" in page and ">Requeue<" not in page and "Cancel…" not in page
    _, board = await browser.get("/ui?state=dead")
    assert "Team dead letter" in board and "Requeue all" not in board
    resp, page = await browser.post(f"/ui/todos/{dead}/requeue")
    assert resp.status == 403
    resp, _ = await browser.get(f"/ui/todos/{dead}/cancel")
    assert resp.status == 403

    await other.login(eve_token)
    for path in (f"/ui/todos/{dead}", f"/ui/todos/{dead}/payload", f"/ui/todos/{dead}/cancel"):
        resp, _ = await other.get(path)
        assert resp.status == 404, path
    for action in ("requeue", "release", "cancel"):
        resp, _ = await other.post(f"/ui/todos/{dead}/{action}", {"confirm": "yes"})
        assert resp.status == 404, action
    assert (await _state(db, dead)).dead_letter
    async with db.read() as s:
        assert (await s.scalars(select(TodoEvent))).all() == []


async def test_bulk_requeue_needs_its_confirmation_page(browser: Browser, db: Database) -> None:
    bot = await _ada(db, browser)
    dead = [await _dead(db, bot, f"Dead {n}") for n in range(2)]
    await add_todo(db, bot, title="alive")
    _, board = await browser.get("/ui?state=dead")
    offer = _link(board, "Requeue all 2 dead letters…")
    assert offer == "/ui/todos/requeue?state=dead"
    resp, confirm = await browser.get(offer)
    assert resp.status == 200 and "Requeue 2 todos?" in confirm and "state=dead" in confirm
    assert all([(await _state(db, t)).dead_letter for t in dead])
    resp, page = await browser.post("/ui/todos/requeue", {"state": "dead"})
    assert resp.status == 400 and "Confirm the requeue" in page
    assert all([(await _state(db, t)).dead_letter for t in dead])
    resp, page = await browser.post("/ui/todos/requeue", {"state": "pending", "confirm": "yes"})
    assert resp.status == 400 and "Choose the dead letters" in page
    resp, _ = await browser.post("/ui/todos/requeue", {"state": "dead", "confirm": "yes"})
    assert resp.status == 303 and _without_done(resp.headers["Location"]) == "/ui?state=dead"
    assert [(await _state(db, t)).state for t in dead] == ["pending", "pending"]
    _, board = await browser.get(resp.headers["Location"])
    assert "were requeued" in board and _titles(board) == []


async def test_the_todo_page_shows_result_history_times_and_the_raw_payload(
    browser: Browser, db: Database
) -> None:
    bot = await _ada(db, browser)
    payload: dict[str, Any] = {"items": list(range(30_000)), "note": "x"}
    todo = await todos.push(db, endpoint_slug=bot.slug, title="W" * 300, payload=payload)
    await todos.claim(db, bot, todo.id)
    await todos.complete(db, bot, todo.id, result={"merged": True})

    resp, page = await browser.get(f"/ui/todos/{todo.id}")
    assert resp.status == 200
    assert '<h1 class="title">' in page and " UTC</time>" in page
    assert "&quot;merged&quot;: true" in page and re.search(r"<dt>finished</dt><dd><time[^>]*>20", page)
    assert "pushed by hand: there is no conversation to answer" in page
    # The payload is cut between JSON values: it still parses, and says what it left out.
    shown = html.unescape(page[page.rindex("<pre>") + 5 : page.rindex("</pre>")])
    clipped = json.loads(shown)
    assert clipped["items"][-1].endswith("more items cut") and clipped["…"] == "1 more keys cut"
    assert 'href="/ui/todos/' + todo.id + '/payload"' in page
    async with browser.http.get(f"{browser.base_url}/ui/todos/{todo.id}/payload") as raw:
        body = await raw.read()
        assert raw.status == 200 and raw.content_type == "application/json"
        assert raw.headers["Content-Disposition"] == f'attachment; filename="{todo.id}-payload.json"'
        assert raw.headers["X-Content-Type-Options"] == "nosniff"
    assert json.loads(body) == payload


async def test_no_reply_address_says_why_for_each_source(
    browser: Browser, db: Database, services: Any
) -> None:
    bot = await _ada(db, browser)
    push = await add_todo(db, bot, title="a push", source="github", kind="push")
    stripe = await add_todo(db, bot, title="a charge", source="stripe", kind="charge.succeeded")
    gone = await add_todo(db, bot, title="a relic", source="zulip", kind="message")
    _, page = await browser.get(f"/ui/todos/{push.id}")
    assert "this github event (push) is not a conversation" in page
    _, page = await browser.get(f"/ui/todos/{stripe.id}")
    assert "cannot answer stripe deliveries at all" in page
    _, page = await browser.get(f"/ui/todos/{gone.id}")
    assert "zulip source is not installed" in page
