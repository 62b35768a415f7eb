"""`/metrics` behind its own bearer token (SWITCHBOARD_METRICS_TOKEN): a scraper with the token reads
every series; anyone else gets a 401 that names the setting and never the token, whatever the
header holds."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest

from switchboard.services import Services
from switchboard.settings import ConfigError, load_settings

TOKEN = "scrape-0123456789-abcdefghij"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"metrics_token": TOKEN}


async def _get(base_url: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as http, http.get(f"{base_url}/metrics", headers=headers) as resp:
        return resp.status, await resp.text(), dict(resp.headers)


async def test_the_token_reads_every_series(services: Services, base_url: str) -> None:
    services.metrics.inc("switchboard_ingest_refused_total", webhook="wh_someone_else", reason="rate_limited")
    for scheme in ("Bearer", "bearer"):
        status, text, headers = await _get(base_url, {"Authorization": f"{scheme} {TOKEN}"})
        assert status == 200
        assert 'switchboard_ingest_refused_total{reason="rate_limited",webhook="wh_someone_else"} 1' in text
        assert headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer sbo_whatever"],
)
async def test_without_the_token_it_is_401_and_shows_nothing(
    services: Services, base_url: str, caplog: pytest.LogCaptureFixture, authorization: str | None
) -> None:
    services.metrics.inc("switchboard_ingest_refused_total", webhook="wh_someone_else", reason="rate_limited")
    caplog.set_level(logging.DEBUG)
    status, text, headers = await _get(
        base_url, None if authorization is None else {"Authorization": authorization}
    )
    assert status == 401
    assert headers["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert headers["Content-Type"].startswith("application/json")
    assert "wh_someone_else" not in text and "switchboard_" not in text
    assert "SWITCHBOARD_METRICS_TOKEN" in text
    assert TOKEN not in text and TOKEN not in caplog.text


async def test_a_header_of_undecodable_bytes_is_a_401_not_a_500(services: Services, base_url: str) -> None:
    # aiohttp decodes header bytes with surrogate escapes; the comparison must not raise on them.
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer \xff\xfe"
        + TOKEN.encode()
        + b"\r\n\r\n"
    )
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert TOKEN.encode() not in answer


def test_a_short_or_spaced_token_is_refused_at_startup_without_echoing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for bad in ("short-token", "a token with spaces in it", "x" * 201):
        monkeypatch.setenv("SWITCHBOARD_METRICS_TOKEN", bad)
        with pytest.raises(ConfigError, match=r"^SWITCHBOARD_METRICS_TOKEN: must be 16 to 200") as info:
            load_settings()
        assert bad not in str(info.value)
    monkeypatch.setenv("SWITCHBOARD_METRICS_TOKEN", "")
    assert load_settings().metrics_token is None
    monkeypatch.setenv("SWITCHBOARD_METRICS_TOKEN", TOKEN)
    token = load_settings().metrics_token
    assert token is not None and token.get_secret_value() == TOKEN
    assert TOKEN not in repr(load_settings())
