"""Admission: the flood guard is per webhook (SPEC §10), set by SWITCHBOARD_INGEST_RATE/BURST (0 =
off); X-Forwarded-For names the client only when the peer is a trusted proxy; every refusal of a
known webhook is counted per webhook and reason."""

from __future__ import annotations

import ipaddress
import json
import logging
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from switchboard.ingest import INGEST_LIMITER
from switchboard.ingest_admission import RateLimiter, client_address
from switchboard.services import Services
from switchboard.testing import counts, github_headers, make_webhook, post

TIGHT = {"ingest_rate": 0.5, "ingest_burst": 2}


def _delivery(n: int, forwarded: str | None = None) -> tuple[bytes, dict[str, str]]:
    headers = {"X-Delivery-Id": f"d-{n}"}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    return json.dumps({"n": n}).encode(), headers


async def _metrics(base_url: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{base_url}/metrics") as resp:
        return await resp.text()


@pytest.mark.parametrize("settings_overrides", [TIGHT])
async def test_the_guard_is_per_webhook_and_every_refusal_is_counted_for_its_webhook(
    services: Services, base_url: str
) -> None:
    token_a, _, webhook_a = await make_webhook(services, "generic")
    token_b, _, webhook_b = await make_webhook(services, "generic")
    # Every sender shares 127.0.0.1 (as every sender behind a proxy shares the proxy's address).
    statuses = [(await post(base_url, token_a, *_delivery(n)))[0] for n in range(3)]
    assert statuses == [202, 202, 429]
    status, answer, headers = await post(base_url, token_a, *_delivery(3))
    assert status == 429 and answer["error"] == "rate_limited" and int(headers["Retry-After"]) >= 1
    # Another webhook, same address: its own bucket.
    assert [(await post(base_url, token_b, *_delivery(n)))[0] for n in range(10, 12)] == [202, 202]
    assert await counts(services) == (4, 4)

    text = await _metrics(base_url)
    assert f'switchboard_ingest_refused_total{{reason="rate_limited",webhook="{webhook_a}"}} 2' in text
    assert f'webhook="{webhook_b}"' not in text
    for token in (token_a, token_b):
        assert token not in text


async def test_other_refusals_are_counted_per_webhook_and_unknown_tokens_name_none(
    services: Services, base_url: str
) -> None:
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    body = b'{"action": "opened"}'
    assert (await post(base_url, token, body, github_headers("whsec_wrong", body, "issues")))[0] == 401
    assert (await post(base_url, "wh_" + "A" * 32, b"{}", {}))[0] == 404
    m = services.metrics
    assert m.value("switchboard_ingest_refused_total", webhook=webhook_id, reason="signature_invalid") == 1
    # The unknown token is refused too, but is no webhook's refusal.
    prefix = "switchboard_ingest_refused_total{"
    series = [line for line in (await _metrics(base_url)).splitlines() if line.startswith(prefix)]
    assert series == [f'{prefix}reason="signature_invalid",webhook="{webhook_id}"}} 1']


@pytest.mark.parametrize("settings_overrides", [{"ingest_rate": 0}, {"ingest_burst": 0}])
async def test_a_rate_or_a_burst_of_zero_turns_the_guard_off(
    services: Services, server: TestServer, base_url: str
) -> None:
    assert server.app[INGEST_LIMITER].off
    token, _, _ = await make_webhook(services, "generic")
    assert {(await post(base_url, token, *_delivery(n)))[0] for n in range(5)} == {202}


@pytest.mark.parametrize("settings_overrides", [TIGHT])
async def test_without_a_trusted_proxy_x_forwarded_for_is_ignored(
    services: Services, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    with caplog.at_level(logging.WARNING, logger="switchboard.ingest"):
        # A sender that names a new address each time still spends the webhook's one bucket.
        statuses = [(await post(base_url, token, *_delivery(n, f"198.51.100.{n}")))[0] for n in range(3)]
    assert statuses == [202, 202, 429]
    assert "client=127.0.0.1 reason=rate_limited" in caplog.text
    assert "198.51.100." not in caplog.text


@pytest.mark.parametrize("settings_overrides", [{**TIGHT, "trusted_proxies": "127.0.0.0/8, ::1/128"}])
async def test_behind_a_trusted_proxy_the_client_is_the_right_most_untrusted_hop(
    services: Services, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    with caplog.at_level(logging.WARNING, logger="switchboard.ingest"):
        for n in range(2):
            assert (await post(base_url, token, *_delivery(n, "203.0.113.66")))[0] == 202
        # The client wrote the left part itself; the proxy (trusted) appended what it saw.
        status, _, _ = await post(base_url, token, *_delivery(2, "203.0.113.66, 198.51.100.7, 127.0.0.2"))
    assert status == 429
    assert "client=198.51.100.7 reason=rate_limited" in caplog.text
    assert "203.0.113.66" not in caplog.text


@pytest.mark.parametrize("settings_overrides", [{**TIGHT, "trusted_proxies": "10.0.0.0/8"}])
async def test_x_forwarded_for_from_a_peer_outside_the_trusted_proxies_is_ignored(
    services: Services, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    with caplog.at_level(logging.WARNING, logger="switchboard.ingest"):
        statuses = [
            (await post(base_url, token, *_delivery(n, "10.1.2.3, 198.51.100.7")))[0] for n in range(3)
        ]
    assert statuses == [202, 202, 429]
    assert "client=127.0.0.1 reason=rate_limited" in caplog.text


# ---------------------------------------------------------------------------------------------
# The pieces


PROXIES = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("2001:db8::/32"))


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        ("192.0.2.1", ["198.51.100.7"], "192.0.2.1"),  # the peer is no proxy: the header is the client's
        ("10.0.0.1", ["198.51.100.7"], "198.51.100.7"),
        ("10.0.0.1", ["203.0.113.1, 198.51.100.7, 10.0.0.2"], "198.51.100.7"),
        ("10.0.0.1", ["203.0.113.1", "198.51.100.7"], "198.51.100.7"),  # two header lines
        ("10.0.0.1", ["10.0.0.3, 10.0.0.2"], "10.0.0.3"),  # every hop a proxy: the farthest
        ("10.0.0.1", ["198.51.100.7, not-an-address"], "10.0.0.1"),  # junk: nothing left of it
        ("10.0.0.1", [], "10.0.0.1"),
        ("2001:db8::5", ["[2001:db8:1::9]:443, 198.51.100.7:5000"], "198.51.100.7"),
        ("::ffff:10.0.0.1", ["198.51.100.7"], "198.51.100.7"),
        (None, ["198.51.100.7"], "unknown"),
    ],
)
def test_client_address(peer: str | None, forwarded: list[str], client: str) -> None:
    headers: CIMultiDict[str] = CIMultiDict(("X-Forwarded-For", value) for value in forwarded)
    assert client_address(peer, headers, PROXIES) == client
    assert client_address(peer, headers, ()) == (peer or "unknown")


def test_the_limiter_keeps_a_bucket_per_key_and_forgets_idle_ones() -> None:
    limiter = RateLimiter(rate=1000.0, burst=2, max_clients=3)
    assert limiter.take("wh_a") == 0 and limiter.take("wh_a") == 0
    wait: Any = limiter.take("wh_a")
    assert 0 < wait <= 0.001
    assert limiter.take("wh_b") == 0
    limiter.configure(rate=0, burst=2)
    assert limiter.off and all(limiter.take("wh_a") == 0 for _ in range(10))
