"""The delivery log page in a real browser (Debian's Chromium, the ``chromium`` fixture): a routed
delivery with its todo (linked), its duplicate and a refused one; the detail page with redacted
headers and the body as a download; redeliver through its confirmation; a test delivery."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from switchboard import tenancy
from switchboard.delivery_records import DELIVERY_RECORDER
from switchboard.models import Event, Todo
from switchboard.services import Services
from switchboard.testing import github_headers, make_webhook, post

if TYPE_CHECKING:
    from playwright.async_api import Browser

ISSUE = json.dumps(
    {
        "action": "opened",
        "issue": {"number": 7, "title": "It broke", "html_url": "https://github.com/acme/api/issues/7"},
        "repository": {"full_name": "acme/api", "html_url": "https://github.com/acme/api"},
        "sender": {"login": "someone"},
    }
).encode()


async def test_the_delivery_log_page(
    chromium: Browser, server: Any, base_url: str, services: Services
) -> None:
    _, ada_token = await tenancy.add_human(services.db, "ada")
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    headers = github_headers(secret, ISSUE, "issues", delivery="b-1")
    _, first, _ = await post(base_url, token, ISSUE, headers)
    await post(base_url, token, ISSUE, headers)
    await post(base_url, token, ISSUE, {**headers, "X-Hub-Signature-256": "sha256=" + "1" * 64})
    await server.app[DELIVERY_RECORDER].flush()
    todo_id = first["todos"][0]["id"]

    page = await (await chromium.new_context(viewport={"width": 1280, "height": 800})).new_page()
    await page.goto(f"{base_url}/ui/login")
    await page.fill("#token", ada_token)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base_url}/ui")

    # From the webhooks page to its log.
    await page.goto(f"{base_url}/ui/webhooks")
    await page.click("a:text('Deliveries')")
    assert page.url == f"{base_url}/ui/webhooks/{webhook_id}/deliveries"
    rows = page.locator("tr.delivery")
    assert await rows.count() == 3
    texts = [await rows.nth(n).inner_text() for n in range(3)]
    assert "refused: signature_invalid" in texts[0] and "401" in texts[0] and "signature mismatch" in texts[0]
    assert "duplicate" in texts[1] and "duplicate of" in texts[1]
    assert "routed" in texts[2] and todo_id in texts[2] and "issues.opened" in texts[2]
    # The todo is linked from its delivery.
    await page.click(f"tr.delivery.routed a:text('{todo_id}')")
    assert page.url == f"{base_url}/ui/todos/{todo_id}"
    await page.click("a.mono:text('ev_')")  # and the todo page links back to its delivery
    assert page.url.startswith(f"{base_url}/ui/webhooks/{webhook_id}/deliveries/ev_")

    # The routed delivery's page: redacted headers, the body as a download (never rendered).
    await page.goto(f"{base_url}/ui/webhooks/{webhook_id}/deliveries")
    await page.click("tr.delivery.routed td:nth-child(2) a")
    main = await page.inner_text("main")
    assert "X-Hub-Signature-256" in main and "[redacted]" in main and secret not in main
    assert "It broke" not in main  # the body is not shown as a page
    async with page.expect_download() as waiting:
        await page.click("a:text('Download the raw body')")
    download = await waiting.value
    assert await asyncio.to_thread(Path(await download.path()).read_bytes) == ISSUE

    # Redeliver: a confirmation first; "No" changes nothing; "Yes" makes a new, marked delivery.
    original_url = page.url
    await page.click("a:text('Redeliver…')")
    assert "Redeliver this delivery?" in await page.inner_text("h1")
    assert "mints new todos" in await page.inner_text("main")
    await page.click("a:text('No, go back')")
    assert page.url == original_url
    async with services.db.read() as s:
        assert await s.scalar(select(func.count()).select_from(Event)) == 1
    await page.click("a:text('Redeliver…')")
    await page.click("button:text('Yes, redeliver it')")
    main = await page.inner_text("main")
    assert "Redelivered" in main and "redelivery of" in main
    async with services.db.read() as s:
        assert await s.scalar(select(func.count()).select_from(Todo)) == 2
        assert (
            await s.scalar(select(func.count()).select_from(Event).where(Event.redelivery_of.is_not(None)))
            == 1
        )
    await page.reload()  # a reload shows the new delivery again and redelivers nothing
    async with services.db.read() as s:
        assert await s.scalar(select(func.count()).select_from(Event)) == 2

    # A test delivery: GitHub's ping, in the log.
    await page.goto(f"{base_url}/ui/webhooks/{webhook_id}/deliveries")
    await page.click("button:text('Send test delivery')")
    assert "Test delivery sent" in await page.inner_text("main")
    await page.goto(f"{base_url}/ui/webhooks/{webhook_id}/deliveries")
    newest = await page.locator("tr.delivery").first.inner_text()
    assert "ignored" in newest and "ping" in newest and "test delivery sent by ada" in newest
