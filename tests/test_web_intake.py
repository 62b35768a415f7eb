"""The web UI's trusted actors, routing rules and quarantine (docs/web.md, docs/routing.md), over real
HTTP against the whole app with a cookie-keeping client, on both engines; and one real browser
releasing a held todo.

Held todos come from real signed GitHub deliveries (octokit's payloads in tests/fixtures/github)
posted to the ingest URL; a sender's title and login carry ``<script>``, which every page must show
as text.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from sqlalchemy import select

from switchboard import quarantine, tenancy
from switchboard.intake_config import Caller, trust_for_create
from switchboard.models import Event, Todo, TodoEvent, Webhook
from switchboard.services import Services
from switchboard.tenancy import Owner
from switchboard.testing import github_headers, post
from switchboard.todos.operator import Actor

if TYPE_CHECKING:
    from playwright.async_api import Browser

FIXTURES = Path(__file__).parent / "fixtures" / "github"
CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
EVIL_TITLE = '<script>alert("title")</script> fix it'
EVIL_LOGIN = "<script>x</script>"


class Client:
    """A cookie-keeping client that logs in through the login form, as a browser would."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.csrf = ""

    async def get(self, path: str) -> tuple[int, str, str]:
        async with self.http.get(self.base_url + path, allow_redirects=False) as resp:
            return resp.status, await resp.text(), resp.headers.get("Location", "")

    async def post(self, path: str, data: dict[str, str], *, csrf: bool = True) -> tuple[int, str, str]:
        form = {"csrf": self.csrf, **data} if csrf else dict(data)
        async with self.http.post(self.base_url + path, data=form, allow_redirects=False) as resp:
            return resp.status, await resp.text(), resp.headers.get("Location", "")

    async def login(self, token: str) -> None:
        _, page, _ = await self.get("/ui/login")
        found = CSRF_RE.search(page)
        assert found is not None
        async with self.http.post(
            self.base_url + "/ui/login", data={"csrf": found.group(1), "token": token}, allow_redirects=False
        ) as resp:
            assert resp.status == 303
        _, board, _ = await self.get("/ui")
        csrf = CSRF_RE.search(board)
        assert csrf is not None
        self.csrf = csrf.group(1)


class World:
    """Ada (an endpoint granted ``default`` and ``triage``, a GitHub webhook trusting octocat) and
    Bob (a human of his own), each logged in."""

    def __init__(self, services: Services, base_url: str) -> None:
        self.services, self.base_url = services, base_url
        self.ada, self.bob = Client(base_url), Client(base_url)
        self.webhook = self.token = self.secret = self.ada_token = ""
        self.owner: Owner | None = None

    async def setup(self) -> World:
        db = self.services.db
        ada, ada_token = await tenancy.add_human(db, "ada")
        _, bob_token = await tenancy.add_human(db, "bob")
        self.owner = Owner(human_id=ada.id)
        await tenancy.vend_endpoint(db, name="bot", owner=self.owner, queues=["default", "triage"])
        new = await tenancy.create_webhook(
            db,
            self.services.vault,
            self.services.providers,
            endpoint_slug="bot",
            source="github",
            trust=trust_for_create(self.services.providers, "github", {"logins": ["octocat"]}),
        )
        assert new.secret is not None
        self.webhook, self.token, self.secret = new.webhook.id, new.ingest_token, new.secret
        self.ada_token = ada_token
        await self.ada.login(ada_token)
        await self.bob.login(bob_token)
        return self

    async def close(self) -> None:
        await self.ada.http.close()
        await self.bob.http.close()

    async def deliver(
        self, name: str = "issue_comment/created.payload.json", **changes: Any
    ) -> dict[str, Any]:
        """A fixture as GitHub sends it (a fresh body each time), signed with the webhook's secret."""
        payload = json.loads((FIXTURES / name).read_bytes())
        payload["sender"]["login"] = changes.pop("sender", EVIL_LOGIN)
        if "title" in changes:
            payload["issue"]["title"] = changes.pop("title")
        payload.update(changes, switchboard_test=str(uuid.uuid4()))
        body = json.dumps(payload).encode()
        status, answer, _ = await post(
            self.base_url,
            self.token,
            body,
            github_headers(self.secret, body, name.split("/")[0], str(uuid.uuid4())),
        )
        assert status == 202, answer
        return answer

    async def held(self) -> str:
        """A held todo: an untrusted commenter's delivery, with ``<script>`` in title and login."""
        answer = await self.deliver(title=EVIL_TITLE)
        assert answer["disposition"] == "quarantined", answer
        page = await quarantine.list_held(
            self.services.db,
            Caller(Actor("human:test"), scopes=[self.owner]),
            webhook_id=self.webhook,
            limit=1,
        )
        return str(page.rows[0]["id"])

    async def webhook_row(self) -> Webhook:
        async with self.services.db.read() as s:
            found = await s.get(Webhook, self.webhook)
        assert found is not None
        return found

    async def todo(self, todo_id: str) -> Todo:
        async with self.services.db.read() as s:
            found = await s.get(Todo, todo_id)
        assert found is not None
        return found

    async def todos_on(self, queue: str) -> list[Todo]:
        async with self.services.db.read() as s:
            return list((await s.scalars(select(Todo).where(Todo.queue == queue))).all())


@pytest.fixture
async def world(services: Services, base_url: str) -> AsyncIterator[World]:
    w = await World(services, base_url).setup()
    yield w
    await w.close()


def assert_no_raw_script(page: str) -> None:
    # The only <script> a page could carry is one a sender wrote: none may reach the markup.
    assert "<script" not in page.lower()


# ---------------------------------------------------------------------------------------------
# Creating a webhook: the trusted-actors choice


async def test_create_requires_the_trust_choice_for_kinds_with_actors_and_refuses_it_for_others(
    world: World,
) -> None:
    before = len(await tenancy.list_webhooks(world.services.db))
    base = {"endpoint": "bot", "source": "github", "name": "acme/api"}

    status, page, _ = await world.ada.post("/ui/webhooks", base)
    assert status == 400 and "choose the trusted actors" in page
    # The form comes back open with what was typed.
    assert 'value="acme/api"' in page and '<details class="create" open>' in page

    status, page, _ = await world.ada.post("/ui/webhooks", {**base, "trust": "allow_all", "actors": "hubot"})
    assert status == 400 and "allow all trusts everyone" in page
    assert "hubot</textarea>" in page and 'value="allow_all" checked' in page

    status, page, _ = await world.ada.post("/ui/webhooks", {**base, "trust": "list", "actors": ""})
    assert status == 400 and "logins is empty" in page

    status, page, _ = await world.ada.post(
        "/ui/webhooks", {"endpoint": "bot", "source": "generic", "trust": "allow_all"}
    )
    assert status == 400 and "trusted actors are not available" in page
    assert len(await tenancy.list_webhooks(world.services.db)) == before

    # Allowed: a list with a match mode, allow all, and a kind without actors with no choice.
    status, _, location = await world.ada.post(
        "/ui/webhooks", {**base, "trust": "list", "actors": "Hubot, octocat\nmonalisa", "match": "author"}
    )
    assert status == 303 and location == "/ui/webhooks/new"
    status, _, _ = await world.ada.post(
        "/ui/webhooks", {"endpoint": "bot", "source": "github", "trust": "allow_all"}
    )
    assert status == 303
    status, _, _ = await world.ada.post("/ui/webhooks", {"endpoint": "bot", "source": "generic", "trust": ""})
    assert status == 303
    made = {(w["name"], w["source"]): w["trust"] for w in await tenancy.list_webhooks(world.services.db)}
    assert made[("acme/api", "github")] == {"logins": ["Hubot", "monalisa", "octocat"], "match": "author"}
    assert made[(None, "github")] == {"allow_all": True}
    assert made[(None, "generic")] is None


# ---------------------------------------------------------------------------------------------
# A webhook's page: trusted actors


async def test_the_webhook_page_shows_and_edits_trusted_actors(world: World) -> None:
    url = f"/ui/webhooks/{world.webhook}"
    status, page, _ = await world.ada.get(url)
    assert status == 200 and "trusted GitHub login: octocat" in page
    assert "Nothing held in quarantine." in page and 'value="list" checked' in page

    status, _, location = await world.ada.post(
        f"{url}/trust", {"trust": "list", "actors": "octocat hubot", "match": "both"}
    )
    assert status == 303 and location == url
    assert (await world.webhook_row()).trust == {"logins": ["hubot", "octocat"], "match": "both"}
    _, page, _ = await world.ada.get(url)
    assert "Trusted actors saved" in page and "(match: both)" in page

    status, page, _ = await world.ada.post(
        f"{url}/trust", {"trust": "list", "actors": "x", "match": "nobody"}
    )
    assert status == 400 and "invalid_trust: match must be" in page
    # The refused form keeps what was typed; nothing changed.
    assert "x</textarea>" in page
    assert (await world.webhook_row()).trust == {"logins": ["hubot", "octocat"], "match": "both"}

    status, _, _ = await world.ada.post(f"{url}/trust", {"trust": "allow_all"})
    assert status == 303 and (await world.webhook_row()).trust == {"allow_all": True}


async def test_another_scopes_webhook_and_held_todos_are_404_and_a_post_without_csrf_is_refused(
    world: World,
) -> None:
    held = await world.held()
    url = f"/ui/webhooks/{world.webhook}"
    for path in (
        url,
        f"/ui/quarantine?webhook={world.webhook}",
        f"/ui/quarantine/{held}/discard",
        f"/ui/todos/{held}",
    ):
        status, page, _ = await world.bob.get(path)
        assert status == 404, path
        assert EVIL_TITLE not in html.unescape(page)
    for path, data in (
        (f"{url}/trust", {"trust": "allow_all"}),
        (f"{url}/rules", {"do": "save", "rules": ""}),
        (f"/ui/quarantine/{held}/release", {}),
        (f"/ui/quarantine/{held}/release", {"trust": "yes"}),
        (f"/ui/quarantine/{held}/discard", {"confirm": "yes", "reason": "mine now"}),
    ):
        status, _, _ = await world.bob.post(path, data)
        assert status == 404, path
    # Bob's own list shows nothing of Ada's.
    status, page, _ = await world.bob.get("/ui/quarantine")
    assert status == 200 and "Nothing is held." in page and held not in page

    # Ada's own forms without the session's CSRF token change nothing.
    for path, data in (
        (f"/ui/quarantine/{held}/release", {}),
        (f"/ui/quarantine/{held}/discard", {"confirm": "yes", "reason": "spam"}),
        (f"{url}/trust", {"trust": "allow_all"}),
        (f"{url}/rules", {"do": "save", "rules": '{"rules": [], "default_action": {"type": "drop"}}'}),
    ):
        status, page, _ = await world.ada.post(path, data, csrf=False)
        assert status == 403 and "security token" in page, path
    assert (await world.todo(held)).state == "held"
    row = await world.webhook_row()
    assert row.trust == {"logins": ["octocat"], "match": "sender"} and row.routing is None


# ---------------------------------------------------------------------------------------------
# Routing rules: preview and save


async def test_rules_preview_shows_each_stored_delivery_and_saves_nothing(world: World) -> None:
    await world.deliver(sender="octocat")  # trusted: routed
    await world.deliver()  # untrusted: quarantined
    url = f"/ui/webhooks/{world.webhook}"
    rules = {
        "rules": [
            {
                "id": "agent-label",
                "name": "<b>labelled</b>",
                "expr": '(.payload.issue.labels // []) | any(.name == "agent")',
                "action": {"type": "queue"},
            }
        ],
        "default_action": {"type": "drop"},
    }
    status, page, _ = await world.ada.post(f"{url}/rules", {"do": "preview", "rules": json.dumps(rules)})
    assert status == 200 and "Dry run" in page and "Nothing was saved." in page
    rows = re.findall(r'<tr class="[a-z]*"><td><a href="/ui/webhooks/[^"]+/deliveries/(ev_[^"]+)"', page)
    assert len(rows) == 2
    # The trusted one would be dropped by the default; the untrusted one is still held by trust.
    assert ">dropped</span>" in page and ">quarantined</span>" in page
    assert (await world.webhook_row()).routing is None
    # What was typed stays in the textarea, as text.
    assert "<b>labelled</b>" not in page and "&lt;b&gt;labelled&lt;/b&gt;" in page
    typed = re.search(r'<textarea id="rules"[^>]*>([^<]*)</textarea>', page)
    assert typed is not None and json.loads(html.unescape(typed.group(1))) == rules


async def test_saving_rules_refuses_with_the_stable_code_and_names_the_rule_and_delivery(
    world: World,
) -> None:
    await world.deliver(sender="octocat")
    async with world.services.db.read() as s:
        event = await s.scalar(select(Event.id).where(Event.webhook_id == world.webhook))
    url = f"/ui/webhooks/{world.webhook}"

    def doc(expr: str, rule_id: str = "r1") -> str:
        return json.dumps({"rules": [{"id": rule_id, "expr": expr, "action": {"type": "queue"}}]})

    status, page, _ = await world.ada.post(f"{url}/rules", {"do": "save", "rules": doc("env.HOME", "leaky")})
    assert status == 400 and "forbidden_function" in page and '<span class="mono">leaky</span>' in page

    status, page, _ = await world.ada.post(f"{url}/rules", {"do": "save", "rules": doc(".payload | ")})
    assert status == 400 and "invalid_expression" in page

    status, page, _ = await world.ada.post(f"{url}/rules", {"do": "save", "rules": '{"rules": [}'})
    assert status == 400 and "invalid_rule: the rule set is not valid JSON" in page and "line 1" in page

    status, page, _ = await world.ada.post(
        f"{url}/rules", {"do": "save", "rules": '{"rules": [], "rules": []}'}
    )
    assert status == 400 and "names the key" in page

    queue = json.dumps(
        {"rules": [{"id": "r1", "expr": "true", "action": {"type": "queue", "queue": "nope"}}]}
    )
    status, page, _ = await world.ada.post(f"{url}/rules", {"do": "save", "rules": queue})
    assert status == 400 and "not_granted" in page

    # A rule that faults on a stored delivery: refused, naming the rule and the delivery, with the
    # dry run's table shown (the faulting row marked).
    status, page, _ = await world.ada.post(
        f"{url}/rules", {"do": "save", "rules": doc('.payload.issue.number + "x"', "adds")}
    )
    assert status == 400 and "invalid_rule" in page
    assert '<span class="mono">adds</span>' in page and f"/deliveries/{event}" in page
    assert 'class="fault"' in page and "Saving these rules would be refused" in page
    assert (await world.webhook_row()).routing is None

    # A good one is saved, and the page shows it.
    good = doc('.event == "issue_comment.created"', "comments")
    status, _, location = await world.ada.post(f"{url}/rules", {"do": "save", "rules": good})
    assert status == 303 and location == url
    stored = (await world.webhook_row()).routing
    assert stored is not None and stored["rules"][0]["id"] == "comments"
    _, page, _ = await world.ada.get(url)
    assert "Routing rules saved" in page and "1 rule, first match wins" in page

    # Empty clears them.
    status, _, _ = await world.ada.post(f"{url}/rules", {"do": "save", "rules": "  "})
    assert status == 303 and (await world.webhook_row()).routing is None


# ---------------------------------------------------------------------------------------------
# The quarantine


async def test_the_quarantine_lists_held_todos_escaped_and_counted(world: World) -> None:
    held = await world.held()
    status, page, _ = await world.ada.get("/ui/quarantine")
    assert status == 200
    assert_no_raw_script(page)
    assert html.escape(EVIL_TITLE) in page and html.escape(EVIL_LOGIN) in page
    assert "untrusted_actor" in page and f"/ui/quarantine/{held}/release" in page
    assert f"Trust {html.escape(EVIL_LOGIN)} and release" in page
    assert '<select name="queue" aria-label="queue to release to"><option value="default">' in page
    assert '<a href="/ui/quarantine">Quarantine</a>' in page or 'href="/ui/quarantine" class="active"' in page

    # Counted on the webhook's page and row, linking to the filtered list.
    _, page, _ = await world.ada.get(f"/ui/webhooks/{world.webhook}")
    assert f'href="/ui/quarantine?webhook={world.webhook}"><strong>1</strong> held todo' in page
    _, page, _ = await world.ada.get("/ui/webhooks")
    assert "1 quarantined" in page
    status, page, _ = await world.ada.get(f"/ui/quarantine?webhook={world.webhook}")
    assert status == 200 and held in page and "only." in page

    # The held todo's own page: why it is held, escaped; not on the board.
    status, page, _ = await world.ada.get(f"/ui/todos/{held}")
    assert status == 200 and "Held in quarantine" in page and "untrusted actor" in page
    assert_no_raw_script(page)
    assert "not a trusted GitHub login" in page
    _, board, _ = await world.ada.get("/ui")
    assert held not in board

    # Its delivery's page shows the event's routing trace, with what each target got.
    event = (await world.todo(held)).event_id
    status, page, _ = await world.ada.get(f"/ui/webhooks/{world.webhook}/deliveries/{event}")
    assert status == 200 and "trust (the actor was not trusted)" in page
    assert '<span class="mono">bot</span> / quarantine: held' in page
    assert_no_raw_script(page)


async def test_release_runs_routing_again_and_the_todo_page_shows_the_trace(world: World) -> None:
    held = await world.held()
    status, _, location = await world.ada.post(f"/ui/quarantine/{held}/release", {"webhook": world.webhook})
    assert status == 303 and location == f"/ui/quarantine?webhook={world.webhook}"
    _, page, _ = await world.ada.get(location)
    assert "Released: routing ran again" in page and "Nothing is held." in page
    assert (await world.todo(held)).state == "cancelled"
    made = await world.todos_on("default")
    assert len(made) == 1 and made[0].state == "pending" and EVIL_TITLE in made[0].title

    status, page, _ = await world.ada.get(f"/ui/todos/{made[0].id}")
    assert status == 200 and "a release from quarantine" in page and "released from quarantine by" in page
    assert_no_raw_script(page)
    # Releasing again: it was decided on.
    status, page, _ = await world.ada.post(f"/ui/quarantine/{held}/release", {})
    assert status == 409 and "already decided" in page


async def test_trust_and_release_adds_the_actor_and_release_to_queue_checks_the_grant(world: World) -> None:
    first, second = await world.held(), await world.held()
    status, page, _ = await world.ada.post(f"/ui/quarantine/{first}/release", {"queue": "nope"})
    assert status == 400 and "not granted" in page and (await world.todo(first)).state == "held"

    status, _, location = await world.ada.post(f"/ui/quarantine/{first}/release", {"queue": "triage"})
    assert status == 303 and location == "/ui/quarantine"
    _, page, _ = await world.ada.get(location)
    assert "Released to the queue" in page
    assert [t.state for t in await world.todos_on("triage")] == ["pending"]

    status, _, _ = await world.ada.post(f"/ui/quarantine/{second}/release", {"trust": "yes"})
    assert status == 303
    _, page, _ = await world.ada.get("/ui/quarantine")
    assert "Actor trusted and released" in page
    assert (await world.webhook_row()).trust == {"logins": sorted(["octocat", EVIL_LOGIN]), "match": "sender"}
    async with world.services.db.read() as s:
        actions = (await s.scalars(select(TodoEvent.action).where(TodoEvent.todo_id == second))).all()
    assert list(actions) == ["trust_release"]
    # The same sender's next delivery is work at once.
    assert (await world.deliver())["disposition"] == "routed"


async def test_discard_asks_first_and_requires_a_reason(world: World) -> None:
    held = await world.held()
    path = f"/ui/quarantine/{held}/discard"
    status, _, location = await world.ada.post(path, {"reason": "spam", "webhook": world.webhook})
    assert status == 303 and location == f"{path}?webhook={world.webhook}"
    assert (await world.todo(held)).state == "held"

    status, page, _ = await world.ada.get(location)
    assert status == 200 and "Discard this held todo?" in page and 'name="reason"' in page
    assert_no_raw_script(page)

    status, page, _ = await world.ada.post(path, {"confirm": "yes", "reason": "  "})
    assert status == 400 and "give the reason" in page and (await world.todo(held)).state == "held"

    status, _, location = await world.ada.post(
        path, {"confirm": "yes", "reason": "spam <b>really</b>", "webhook": world.webhook}
    )
    assert status == 303 and location == f"/ui/quarantine?webhook={world.webhook}"
    _, page, _ = await world.ada.get(location)
    assert "Discarded" in page
    assert (await world.todo(held)).state == "cancelled"
    _, page, _ = await world.ada.get(f"/ui/todos/{held}")
    assert "spam &lt;b&gt;really&lt;/b&gt;" in page and "discard" in page


async def test_a_team_member_sees_held_todos_but_cannot_decide(world: World, services: Services) -> None:
    db = services.db
    await tenancy.add_team(db, "platform", "ada")
    await tenancy.set_member(db, "platform", "bob", "member")
    team = await tenancy.resolve_owner(db, team="platform")
    await tenancy.vend_endpoint(db, name="team-bot", owner=team, queues=["default"])
    new = await tenancy.create_webhook(
        db,
        services.vault,
        services.providers,
        endpoint_slug="team-bot",
        source="github",
        trust={"logins": ["octocat"]},
    )
    assert new.secret is not None
    world.webhook, world.token, world.secret = new.webhook.id, new.ingest_token, new.secret
    answer = await world.deliver()
    assert answer["disposition"] == "quarantined"
    page_of = await quarantine.list_held(db, Caller(Actor("human:test"), scopes=[team]), limit=1)
    held = str(page_of.rows[0]["id"])

    status, page, _ = await world.bob.get("/ui/quarantine")
    assert status == 200 and held in page and f"/ui/quarantine/{held}/release" not in page
    status, page, _ = await world.bob.post(f"/ui/quarantine/{held}/release", {})
    assert status == 403 and (await world.todo(held)).state == "held"
    status, page, _ = await world.bob.get(f"/ui/webhooks/{world.webhook}")
    assert status == 200 and "rules-form" not in page and "trust-form" not in page
    status, _, _ = await world.bob.post(f"/ui/webhooks/{world.webhook}/trust", {"trust": "allow_all"})
    assert status == 403


# ---------------------------------------------------------------------------------------------
# A real browser


async def test_a_person_releases_a_held_todo_in_the_browser(chromium: Browser, world: World) -> None:
    held = await world.held()
    page = await (await chromium.new_context(viewport={"width": 1280, "height": 800})).new_page()
    await page.goto(f"{world.base_url}/ui/login")
    await page.fill("#token", world.ada_token)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{world.base_url}/ui")

    await page.click("header >> text=Quarantine")
    assert page.url == f"{world.base_url}/ui/quarantine"
    row = page.locator("tr.held", has_text=held)
    # The sender's markup is text on the page, not an element.
    assert EVIL_TITLE in await row.inner_text()
    assert await page.locator("main script").count() == 0
    await row.locator("button", has_text="Release to queue").wait_for()
    await row.locator("select[name=queue]").select_option("triage")
    await row.locator("button", has_text="Release to queue").click()
    await page.wait_for_url(f"{world.base_url}/ui/quarantine")
    assert "Released to the queue" in await page.inner_text(".flash")
    assert "Nothing is held." in await page.inner_text("main")
    assert (await world.todo(held)).state == "cancelled"
    made = await world.todos_on("triage")
    assert len(made) == 1 and made[0].state == "pending"

    # The new todo's page says how it got there.
    await page.goto(f"{world.base_url}/ui/todos/{made[0].id}")
    assert "released from quarantine to queue triage" in await page.inner_text("section.trace")
