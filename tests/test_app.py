"""The composed app: what every HTTP surface (ingest, the API, /mcp) does alike."""

from __future__ import annotations

import aiohttp
import pytest
from sqlalchemy import func, select

from switchboard import tenancy
from switchboard.models import Team, Todo
from switchboard.services import Services
from switchboard.testing import vend

ACCEPT = "application/json, text/event-stream"
GZIP_JUNK = b"\x1f\x8bnot gzip at all"


@pytest.mark.parametrize("where", ["mcp", "api", "ingest"])
async def test_a_body_whose_content_encoding_does_not_decode_is_400_json(
    services: Services, base_url: str, where: str
) -> None:
    db = services.db
    human, human_token = await tenancy.add_human(db, "ada")
    endpoint, token = await vend(db, owner=tenancy.Owner(human_id=human.id))
    created = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug=endpoint.slug, source="generic"
    )
    url, headers = {
        "mcp": (f"{base_url}/mcp", {"Authorization": f"Bearer {token}", "Accept": ACCEPT}),
        "api": (f"{base_url}/api/v1/teams", {"Authorization": f"Bearer {human_token}"}),
        "ingest": (f"{base_url}/webhooks/{created.ingest_token}", {}),
    }[where]
    headers = {**headers, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=GZIP_JUNK, headers=headers) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"] == "invalid_body"
        # Nothing was stored, and the server still answers.
        async with http.get(f"{base_url}/healthz") as resp:
            assert resp.status == 200
    async with db.read() as s:
        assert (await s.scalar(select(func.count()).select_from(Todo))) == 0
        assert (await s.scalar(select(func.count()).select_from(Team))) == 0
