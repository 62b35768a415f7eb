"""The web UI in a real browser (Debian's Chromium through Playwright, the ``chromium`` fixture):
what a person sees and does, at a desktop width and at a phone's 390 px.

* a reload after each one-time reveal shows nothing and repeats nothing;
* every destructive action goes through its confirmation page, and "No" changes nothing;
* no page scrolls sideways at 390 px (tables scroll inside their box);
* a U+202E in a sender's title is shown in logical order.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from switchboard import tenancy, todos
from switchboard.db import Database
from switchboard.models import Connection, Endpoint, Membership, Route, Team, Webhook, WebSession
from switchboard.services import Services

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

SBK_RE = re.compile(r"sbk_[A-Za-z0-9_-]{20,}")
WHSEC_RE = re.compile(r"whsec_[A-Za-z0-9_-]{20,}")
SBO_RE = re.compile(r"sbo_[A-Za-z0-9_-]{20,}")
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}


async def logged_in(chromium: Browser, base_url: str, token: str, viewport: dict[str, int] = DESKTOP) -> Page:
    page = await (await chromium.new_context(viewport=viewport)).new_page()  # type: ignore[arg-type]
    await page.goto(f"{base_url}/ui/login")
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base_url}/ui")
    return page


async def count(db: Database, model: Any) -> int:
    async with db.read() as s:
        return int(await s.scalar(select(func.count()).select_from(model)) or 0)


async def reload_shows_nothing(page: Page) -> None:
    response = await page.reload()
    assert response is not None and response.status == 410
    text = await page.inner_text("main")
    assert "Nothing to show" in text and "did not repeat" in text
    assert not (SBK_RE.search(text) or WHSEC_RE.search(text) or SBO_RE.search(text))


async def test_a_reload_after_each_reveal_changes_nothing(
    chromium: Browser, base_url: str, services: Services
) -> None:
    db = services.db
    _, token = await tenancy.add_human(db, "ada")
    page = await logged_in(chromium, base_url, token)

    # Vend: the token once, then nothing; one endpoint.
    await page.goto(f"{base_url}/ui/endpoints")
    await page.click("summary")
    await page.fill("#name", "triage bot")
    await page.click("form.card button[type=submit]")
    assert page.url == f"{base_url}/ui/endpoints/token"
    assert SBK_RE.search(await page.inner_text("main"))
    await reload_shows_nothing(page)
    assert await count(db, Endpoint) == 1

    # Create a webhook: URL and secret once; a reload makes no second webhook.
    await page.goto(f"{base_url}/ui/webhooks")
    await page.click("summary")
    await page.select_option("#source", "github")
    await page.fill("#name", "acme/api issues")
    await page.check("#trust-all")
    await page.click("form.card button[type=submit]")
    assert page.url == f"{base_url}/ui/webhooks/new"
    created = WHSEC_RE.search(await page.inner_text("main"))
    assert created is not None and "Webhook created" in await page.inner_text("h1")
    await reload_shows_nothing(page)
    assert await count(db, Webhook) == 1

    # Rotate (through its confirmation): the new secret once; a reload rotates nothing.
    await page.goto(f"{base_url}/ui/webhooks")
    await page.click("text=Rotate secret…")
    assert "Rotate this webhook's signing secret?" in await page.inner_text("h1")
    await page.click("text=Yes, rotate it")
    assert "Webhook secret rotated" in await page.inner_text("h1")
    rotated = WHSEC_RE.search(await page.inner_text("main"))
    assert rotated is not None and rotated.group(0) != created.group(0)
    assert "previous secret is still accepted until" in await page.inner_text("main")
    await reload_shows_nothing(page)
    async with db.read() as s:
        webhook = await s.scalar(select(Webhook))
    assert webhook is not None
    assert tenancy.webhook_secret(services.vault, webhook) == rotated.group(0)

    # Your own token: shown once after the rotation; a reload neither shows nor rotates again.
    await page.goto(f"{base_url}/ui/account")
    await page.fill("#token", token)
    await page.click("text=Rotate my token")
    new = SBO_RE.search(await page.inner_text("main"))
    assert new is not None
    await reload_shows_nothing(page)
    assert await tenancy.human_by_token(db, new.group(0)) is not None

    # The pages the reveals lead back to say nothing they should not.
    for path in ("/ui", "/ui/endpoints", "/ui/webhooks", "/ui/account"):
        await page.goto(base_url + path)
        text = await page.content()
        assert not (SBK_RE.search(text) or WHSEC_RE.search(text) or SBO_RE.search(text)), path


async def world(services: Services) -> dict[str, Any]:
    """Ada owns an endpoint with a webhook routed to a second one, a connection, and a team with Bob."""
    db = services.db
    _, ada = await tenancy.add_human(db, "ada")
    await tenancy.add_human(db, "bob")
    owner = await tenancy.resolve_owner(db, human="ada")
    await tenancy.vend_endpoint(db, name="bot", owner=owner)
    await tenancy.vend_endpoint(db, name="helper", owner=owner)
    created = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="bot", source="github"
    )
    await tenancy.add_route(db, created.webhook.id, "helper")
    await tenancy.add_team(db, "platform", "ada")
    await tenancy.set_member(db, "platform", "bob", "member")
    await tenancy.add_team(db, "empty", "ada")
    return {"token": ada, "webhook": created.webhook.id}


async def add_connection(page: Page, base_url: str) -> None:
    await page.goto(f"{base_url}/ui/connections")
    await page.click("summary")
    await page.select_option("#kind", "github")
    await page.fill("#name", "acme-bot")
    await page.fill("#secret", "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2)
    await page.click("form.card button[type=submit]")


async def state(services: Services) -> tuple[Any, ...]:
    """Everything a destructive action could change, to compare before and after "No"."""
    async with services.db.read() as s:
        return (
            tuple((await s.execute(select(Endpoint.slug, Endpoint.state).order_by(Endpoint.slug))).all()),
            tuple((await s.execute(select(Webhook.id, Webhook.secret_ciphertext, Webhook.paused_at))).all()),
            await s.scalar(select(func.count()).select_from(Route)),
            tuple((await s.execute(select(Connection.id, Connection.fingerprint))).all()),
            tuple((await s.execute(select(Team.slug).order_by(Team.slug))).all()),
            await s.scalar(select(func.count()).select_from(Membership)),
            await s.scalar(select(func.count()).select_from(WebSession)),
        )


async def test_every_destructive_action_needs_the_confirmation(
    chromium: Browser, base_url: str, services: Services
) -> None:
    made = await world(services)
    page = await logged_in(chromium, base_url, made["token"])
    elsewhere = await logged_in(chromium, base_url, made["token"])  # a second session to end
    await add_connection(page, base_url)

    # No list page carries a one-click destructive form: each danger action is a link to a page.
    for path in ("/ui/endpoints", "/ui/webhooks", "/ui/connections", "/ui/teams", "/ui/account"):
        await page.goto(base_url + path)
        assert await page.locator("form[method=post] button.danger").count() == 0, path

    actions = [
        ("/ui/endpoints", "Revoke…", "Revoke endpoint"),
        ("/ui/webhooks", "Rotate secret…", "Rotate this webhook's signing secret?"),
        ("/ui/webhooks", "remove…", "Remove this route?"),
        ("/ui/webhooks", "Delete…", "Delete this webhook?"),
        ("/ui/connections", "Rotate…", "Rotate connection acme-bot?"),
        ("/ui/connections", "Delete…", "Delete connection acme-bot?"),
        ("/ui/teams", "Remove…", "Remove bob from team platform?"),
        ("/ui/teams", "Delete team…", "Delete team"),
        ("/ui/account", "End…", "End this session?"),
        ("/ui/account", "End all other sessions…", "End every other session?"),
    ]
    before = await state(services)
    for path, link, question in actions:
        await page.goto(base_url + path)
        await page.locator("a.button", has_text=link).first.click()
        assert question in await page.inner_text("h1"), (link, page.url)
        assert await page.locator('form input[name="confirm"][value="yes"]').count() == 1
        await page.click("text=No, go back")
        assert page.url.startswith(base_url + path), (link, page.url)
        assert await state(services) == before, link

    # And each one does its work once confirmed.
    await page.goto(f"{base_url}/ui/teams")
    await page.locator("section.card", has_text="empty").locator("a.button", has_text="Delete team…").click()
    await page.click("text=Yes, delete it")
    assert "Team deleted." in await page.inner_text(".flash")
    await page.goto(f"{base_url}/ui/account")
    await page.locator("a.button", has_text="End…").first.click()
    await page.click("text=Yes, end it")
    assert "Session ended." in await page.inner_text(".flash")
    await elsewhere.goto(f"{base_url}/ui/endpoints")
    assert "/ui/login" in elsewhere.url
    await page.goto(f"{base_url}/ui/webhooks")
    await page.locator("a.button", has_text="Delete…").first.click()
    await page.click("text=Yes, delete it")
    assert "Webhook deleted." in await page.inner_text(".flash")
    await page.goto(f"{base_url}/ui/endpoints")
    await page.locator("a.button", has_text="Revoke…").first.click()
    await page.click("text=Yes, revoke it")
    assert "Endpoint revoked." in await page.inner_text(".flash")
    # The notice was the action's, once: a reload does not show it again.
    await page.reload()
    assert await page.locator(".flash").count() == 0
    async with services.db.read() as s:
        assert await s.get(Webhook, made["webhook"]) is None
        assert await s.scalar(select(Team.slug).where(Team.slug == "empty")) is None
        assert await s.scalar(select(Endpoint.state).where(Endpoint.slug == "bot")) == "revoked"


async def seed_board(services: Services, handle: str = "ada") -> str:
    _, token = await tenancy.add_human(services.db, handle)
    owner = await tenancy.resolve_owner(services.db, human=handle)
    endpoint, _ = await tenancy.vend_endpoint(services.db, name="triage bot", owner=owner, families=["reply"])
    await todos.push(services.db, endpoint_slug=endpoint.slug, title="x" * 300)
    await todos.push(services.db, endpoint_slug=endpoint.slug, title="abc\u202edef tail")
    for n in range(30):
        await todos.push(services.db, endpoint_slug=endpoint.slug, title=f"todo number {n} about the build")
    return token


async def test_no_page_scrolls_sideways_at_390_px(
    chromium: Browser, base_url: str, services: Services
) -> None:
    token = await seed_board(services)
    await tenancy.create_webhook(
        services.db, services.vault, services.providers, endpoint_slug="triage-bot", source="github"
    )
    page = await logged_in(chromium, base_url, token, PHONE)
    first = await page.locator("td.title a").first.get_attribute("href")
    assert first is not None
    for path in (
        "/ui",
        "/ui/endpoints",
        "/ui/webhooks",
        "/ui/connections",
        "/ui/teams",
        "/ui/account",
        first,
    ):
        await page.goto(base_url + path)
        widths = await page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert widths[0] <= widths[1] == 390, (path, widths)
    # The board's table is wider than the phone: it scrolls inside its box instead.
    await page.goto(f"{base_url}/ui")
    box = await page.evaluate(
        "(() => { const b = document.querySelector('.scroll'); return [b.scrollWidth, b.clientWidth]; })()"
    )
    assert box[0] > box[1]
    # The navigation wraps: Log out is on the screen.
    logout = await page.locator("header.top button", has_text="Log out").bounding_box()
    assert logout is not None and logout["x"] + logout["width"] <= 390


async def test_a_right_to_left_override_in_a_title_renders_in_logical_order(
    chromium: Browser, base_url: str, services: Services
) -> None:
    token = await seed_board(services)
    page = await logged_in(chromium, base_url, token)
    link = page.locator("td.title a", has_text="abc")
    # The override is shown as its escape, as the CLI shows it, not obeyed.
    assert await link.inner_text() == "abc\\u202edef tail"
    # And the letters after it are laid out left to right: "d" is left of "f".
    positions = await link.evaluate(
        """a => {
            const text = a.firstChild, at = i => {
                const r = document.createRange(); r.setStart(text, i); r.setEnd(text, i + 1);
                return r.getBoundingClientRect().left;
            };
            const s = text.textContent;
            return [at(s.indexOf("def")), at(s.indexOf("def") + 2)];
        }"""
    )
    assert positions[0] < positions[1]
    await link.click()
    assert await page.inner_text("h1") == "abc\\u202edef tail"
