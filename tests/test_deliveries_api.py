"""A webhook's delivery log over real HTTP (issue 10 item 1): a routed delivery with its todo, its
duplicate and a refused (401) one; a 429 flood recorded in bounded rows; the detail with redacted
headers and the raw body; redeliver (a new, marked delivery minting new todos); a test delivery;
another tenant's 404; and the CLI's ``webhook deliveries|redeliver|test``."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.cli import main
from switchboard.delivery_records import DELIVERY_RECORDER
from switchboard.ingest import INGEST_LIMITER
from switchboard.models import DeliveryRecord, Event, Todo
from switchboard.services import Services
from switchboard.testing import TEST_ENCRYPTION_KEY, github_headers, make_webhook, post

PUSH = json.dumps(
    {"ref": "refs/heads/main", "repository": {"full_name": "acme/api"}, "commits": [], "after": "abc"}
).encode()
ISSUE = json.dumps(
    {
        "action": "opened",
        "issue": {"number": 7, "title": "It broke", "html_url": "https://github.com/acme/api/issues/7"},
        "repository": {"full_name": "acme/api", "html_url": "https://github.com/acme/api"},
        "sender": {"login": "someone"},
    }
).encode()


class Api:
    def __init__(self, http: aiohttp.ClientSession, base_url: str, token: str) -> None:
        self.http, self.base_url, self.token = http, base_url, token

    async def call(self, method: str, path: str) -> tuple[int, Any]:
        async with self.http.request(
            method, f"{self.base_url}{PREFIX}{path}", headers={"Authorization": f"Bearer {self.token}"}
        ) as r:
            payload = await r.json()
            assert r.status < 500, payload
            return r.status, payload

    async def ok(self, method: str, path: str, status: int = 200) -> Any:
        got, payload = await self.call(method, path)
        assert got == status, (method, path, got, payload)
        return payload


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _flush(server: Any) -> None:
    await server.app[DELIVERY_RECORDER].flush()


async def test_log_shows_routed_duplicate_and_refused_with_todos(
    services: Services, server: Any, base_url: str, http: aiohttp.ClientSession
) -> None:
    _, ada_token = await tenancy.add_human(services.db, "ada")
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    ada = Api(http, base_url, ada_token)

    headers = github_headers(secret, ISSUE, "issues", delivery="d-1")
    status, first, _ = await post(base_url, token, ISSUE, headers)
    assert status == 202 and first["disposition"] == "routed"
    status, again, _ = await post(base_url, token, ISSUE, headers)
    assert again["disposition"] == "duplicate"
    status, _, _ = await post(
        base_url, token, ISSUE, {**headers, "X-Hub-Signature-256": "sha256=" + "0" * 64}
    )
    assert status == 401
    await _flush(server)

    page = await ada.ok("GET", f"/webhooks/{webhook_id}/deliveries")
    rows = page["deliveries"]
    assert [r["disposition"] for r in rows] == ["refused", "duplicate", "routed"]  # newest first
    refused, dup, routed = rows
    assert (refused["status"], refused["reason"], refused["stored"]) == (401, "signature_invalid", False)
    assert refused["detail"] == "signature mismatch"
    assert dup["original"] == routed["id"] and dup["delivery_key"] == routed["delivery_key"]
    todo_id = first["todos"][0]["id"]
    assert [t["id"] for t in routed["todos"]] == [todo_id]
    assert (routed["status"], routed["verified"], routed["event"]) == (202, True, "issues.opened")
    # Linked both ways: the todo names the delivery that minted it.
    shown = (await ada.ok("GET", f"/todos/{todo_id}"))["todo"]
    assert shown["delivery"] == {"id": routed["id"], "webhook": webhook_id}
    assert page["next_before"] is None and page["next_after"] is None

    # Cursor pages: one row at a time, both ways, no gaps or repeats.
    one = await ada.ok("GET", f"/webhooks/{webhook_id}/deliveries?limit=1")
    assert [r["id"] for r in one["deliveries"]] == [refused["id"]] and one["next_after"] is None
    two = await ada.ok("GET", f"/webhooks/{webhook_id}/deliveries?limit=1&before={one['next_before']}")
    assert [r["id"] for r in two["deliveries"]] == [dup["id"]]
    three = await ada.ok("GET", f"/webhooks/{webhook_id}/deliveries?limit=1&before={two['next_before']}")
    assert [r["id"] for r in three["deliveries"]] == [routed["id"]] and three["next_before"] is None
    back = await ada.ok("GET", f"/webhooks/{webhook_id}/deliveries?limit=5&after={routed['id']}")
    assert [r["id"] for r in back["deliveries"]] == [refused["id"], dup["id"]]
    assert back["next_after"] is None and back["next_before"] == dup["id"]

    # The detail: redacted headers, the raw body byte for byte.
    detail = (await ada.ok("GET", f"/webhooks/{webhook_id}/deliveries/{routed['id']}"))["delivery"]
    assert base64.b64decode(detail["body_base64"]) == ISSUE
    assert detail["headers"]["X-Hub-Signature-256"] == "[redacted]"
    assert secret not in json.dumps(detail)
    record = (await ada.ok("GET", f"/webhooks/{webhook_id}/deliveries/{refused['id']}"))["delivery"]
    assert record["body_base64"] is None and record["headers"] == {}

    # Redeliver: a new delivery, marked, with new todos; the original stays as it was.
    made = await ada.ok("POST", f"/webhooks/{webhook_id}/deliveries/{routed['id']}/redeliver", status=201)
    assert made["redelivery_of"] == routed["id"] and made["disposition"] == "routed"
    assert len(made["todos"]) == 1 and made["todos"][0] != todo_id
    second = await ada.ok("POST", f"/webhooks/{webhook_id}/deliveries/{routed['id']}/redeliver", status=201)
    async with services.db.read() as s:
        new = await s.get(Event, made["delivery"])
        assert new is not None and new.redelivery_of == routed["id"]
        assert new.delivery_key == f"redelivery:{routed['id']}:1"
        keys = set(
            (await s.scalars(select(Event.delivery_key).where(Event.redelivery_of == routed["id"]))).all()
        )
        assert keys == {f"redelivery:{routed['id']}:1", f"redelivery:{routed['id']}:2"}
        assert await s.scalar(select(func.count()).select_from(Todo)) == 3
    assert second["delivery"] != made["delivery"]
    latest = (await ada.ok("GET", f"/webhooks/{webhook_id}/deliveries?limit=1"))["deliveries"][0]
    assert latest["id"] == second["delivery"] and latest["redelivery_of"] == routed["id"]
    assert "redelivery of" in latest["detail"]

    # A test delivery: GitHub's ping, signed, stored as ignored (no todo), in the log.
    test = await ada.ok("POST", f"/webhooks/{webhook_id}/test", status=201)
    assert (test["disposition"], test["todos"]) == ("ignored", [])
    latest = (await ada.ok("GET", f"/webhooks/{webhook_id}/deliveries?limit=1"))["deliveries"][0]
    assert (latest["id"], latest["event"], latest["verified"]) == (test["delivery"], "ping", True)
    assert latest["detail"].startswith("test delivery sent by ada")

    # Another tenant sees none of it: 404, exactly like an id that does not exist.
    _, eve_token = await tenancy.add_human(services.db, "eve")
    eve = Api(http, base_url, eve_token)
    for method, path in (
        ("GET", f"/webhooks/{webhook_id}/deliveries"),
        ("GET", f"/webhooks/{webhook_id}/deliveries/{routed['id']}"),
        ("POST", f"/webhooks/{webhook_id}/deliveries/{routed['id']}/redeliver"),
        ("POST", f"/webhooks/{webhook_id}/test"),
    ):
        status, payload = await eve.call(method, path)
        assert (status, payload["error"]) == (404, "not_found"), path
    # A delivery of another webhook is not found under this one.
    _, _, other = await make_webhook(services, "github", endpoint="ada-other")
    status, _ = await ada.call("GET", f"/webhooks/{other}/deliveries/{routed['id']}")
    assert status == 404


async def test_a_429_flood_is_recorded_in_bounded_rows(
    services: Services, server: Any, base_url: str, http: aiohttp.ClientSession
) -> None:
    _, ada_token = await tenancy.add_human(services.db, "ada")
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    server.app[INGEST_LIMITER].configure(rate=0.001, burst=1)
    headers = github_headers(secret, PUSH, "push", delivery="p-0")
    assert (await post(base_url, token, PUSH, headers))[0] == 202
    for _ in range(60):
        assert (await post(base_url, token, PUSH, headers))[0] == 429
    recorder = server.app[DELIVERY_RECORDER]
    await recorder.flush(ended_only=True)  # the minute is still open: only the rows recorded one by one
    async with services.db.read() as s:
        assert await s.scalar(select(func.count()).select_from(DeliveryRecord)) == recorder.per_minute
    await recorder.flush()  # closing the minute writes the rest as one counted row
    async with services.db.read() as s:
        rows = (await s.scalars(select(DeliveryRecord).order_by(DeliveryRecord.id))).all()
    assert len(rows) == recorder.per_minute + 1
    assert sum(r.count for r in rows) == 60
    assert {(r.status, r.reason) for r in rows} == {(429, "rate_limited")}
    counted = (await Api(http, base_url, ada_token).ok("GET", f"/webhooks/{webhook_id}/deliveries"))[
        "deliveries"
    ]
    assert sum(r["count"] for r in counted if r["disposition"] == "refused") == 60


async def test_cli_lists_redelivers_and_tests(services: Services, server: Any, base_url: str) -> None:
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    status, first, _ = await post(base_url, token, ISSUE, github_headers(secret, ISSUE, "issues", "c-1"))
    assert status == 202
    env = {
        "SWITCHBOARD_DATABASE_URL": services.settings.database_url,
        "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
    }
    runner = CliRunner(env=env)

    async def run(*args: str) -> Any:
        result = await asyncio.to_thread(runner.invoke, main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return result.stdout

    listed = json.loads(await run("webhook", "deliveries", webhook_id, "--json"))
    (row,) = listed["deliveries"]
    assert row["disposition"] == "routed" and row["todos"][0]["id"] == first["todos"][0]["id"]
    text = await run("webhook", "deliveries", webhook_id)
    assert row["id"] in text and "routed" in text and first["todos"][0]["id"] in text
    made = json.loads(await run("webhook", "redeliver", webhook_id, row["id"], "--json"))
    assert made["redelivery_of"] == row["id"] and len(made["todos"]) == 1
    tested = json.loads(await run("webhook", "test", webhook_id, "--json"))
    assert tested["disposition"] == "ignored"
    shown = json.loads(await run("webhook", "delivery", webhook_id, row["id"], "--json"))["delivery"]
    assert base64.b64decode(shown["body_base64"]) == ISSUE
    listed = json.loads(await run("webhook", "deliveries", webhook_id, "--json", "--limit", "1"))
    assert listed["deliveries"][0]["id"] == tested["delivery"] and listed["next_before"]
