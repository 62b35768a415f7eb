"""Two rotations of one webhook's signing secret at the same moment (two operators, or a retried
click on PostgreSQL): each is shown a new secret, and each shown secret must verify deliveries
(the later one as the current secret, the earlier one through the overlap). Without the row
locked for the rotation, both read the same current secret, and the one that committed first was
overwritten: its secret, shown to its operator as the new one, never verified anything."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer
from sqlalchemy import text

from switchboard import humans
from switchboard.api import PREFIX
from switchboard.services import Services
from switchboard.testing import github_headers, make_webhook, post

ISSUE = (Path(__file__).parent / "fixtures" / "github" / "issues" / "opened.payload.json").read_bytes()


async def _lock_waiters(services: Services) -> int:
    async with services.db.engine.connect() as conn:
        found = await conn.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
        )
    return int(found or 0)


async def _rotate(base_url: str, token: str, webhook_id: str) -> str:
    """``POST /webhooks/{id}/rotate``, as an owner's script or the UI's form does: the new secret."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base_url}{PREFIX}/webhooks/{webhook_id}/rotate", headers=headers) as resp,
    ):
        answer = await resp.json()
    assert resp.status == 200, answer
    return str(answer["secret"])


async def test_concurrent_rotations_each_shown_secret_verifies(
    services: Services, server: TestServer
) -> None:
    token, first, webhook_id = await make_webhook(services, "github")
    assert first
    owner_token = (await humans.rotate_token(services.db, handle="ada")).token
    base_url = str(server.make_url("")).rstrip("/")
    rotations = [_rotate(base_url, owner_token, webhook_id) for _ in range(2)]
    if services.db.is_sqlite:
        # One writer at a time: the rotations cannot overlap, but the promise is the same.
        shown = await asyncio.gather(*rotations)
    else:
        # Another transaction holds the row, so both rotations start before either can finish.
        async with services.db.engine.connect() as holder:
            await holder.execute(
                text("SELECT id FROM webhooks WHERE id = :id FOR UPDATE"), {"id": webhook_id}
            )
            tasks = [asyncio.ensure_future(rotation) for rotation in rotations]
            for _ in range(200):
                if await _lock_waiters(services) >= 2:
                    break
                await asyncio.sleep(0.025)
            await holder.commit()
        shown = await asyncio.gather(*tasks)
    assert shown[0] != shown[1]

    for n, secret in enumerate(shown):
        headers = github_headers(secret, ISSUE, "issues", f"d-rotated-{n}")
        status, answer, _ = await post(base_url, token, ISSUE, headers)
        assert status == 202, f"the secret rotation {n} showed was refused: {answer}"
