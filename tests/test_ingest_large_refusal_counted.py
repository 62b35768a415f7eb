"""A delivery refused for its size is a refusal of its webhook like any other (docs/configuration.md,
"Ingest admission"): counted per webhook in /metrics and noted in the webhook's delivery log. A
forge sends a Content-Length, so its too-large deliveries are refused from that header alone."""

from __future__ import annotations

import aiohttp

from switchboard.services import Services
from switchboard.testing import make_webhook

CAP = 5 * 1024 * 1024


async def test_a_body_over_the_cap_by_its_content_length_is_counted_for_its_webhook(
    services: Services, base_url: str
) -> None:
    token, _, webhook_id = await make_webhook(services, "generic")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base_url}/webhooks/{token}", data=b"x" * (CAP + 1)) as resp:
            assert resp.status == 413
            assert (await resp.json())["error"] == "payload_too_large"
        async with http.get(f"{base_url}/metrics") as resp:
            text = await resp.text()
    m = services.metrics
    assert m.value("switchboard_ingest_refused_total", webhook=webhook_id, reason="payload_too_large") == 1
    assert 'switchboard_ingest_total{disposition="refused",source="generic",status="413"} 1' in text
    assert token not in text


async def test_an_unknown_token_is_404_whatever_its_length(base_url: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{base_url}/webhooks/not-a-real-token-0123456789", data=b"x" * (CAP + 1)
        ) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"] == "not_found"
