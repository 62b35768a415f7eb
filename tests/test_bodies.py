"""One server-wide rule for request bodies (issue 13, item 7), over raw sockets: a body announced
and trickled is answered 408 at the deadline (the reproduction kept ``POST /ui/login`` open for
300 s), a ``Content-Length`` over the surface's cap is answered 413 without reading the body, and a
chunked body is cut off at the cap. Each surface answers in its own error format."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from switchboard import app as app_module
from switchboard import bodies, ingest
from switchboard.services import Services
from switchboard.testing import make_webhook

DEADLINE = 1.0
# aiohttp reads and discards what a client still sends for up to 10 s after an early answer.
LINGER = 10.0


@pytest.fixture(autouse=True)
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bodies, "DEADLINE_SECONDS", DEADLINE)


@asynccontextmanager
async def connection(base_url: str) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield reader, writer
    finally:
        writer.close()


def request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def read_answer(reader: asyncio.StreamReader, timeout: float) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in filter(None, header_lines):
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), timeout)
    return int(status_line.split()[1]), headers, body


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Did the server close the connection (EOF) within ``seconds``?"""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    return True


async def trickle(writer: asyncio.StreamWriter, stop: asyncio.Event) -> None:
    """One byte of a form every 0.1 s, as the slow-body attack did, until told to stop."""
    while not stop.is_set():
        writer.write(b"a")
        await writer.drain()
        await asyncio.sleep(0.1)


@pytest.mark.parametrize(
    ("path", "html"),
    [("/ui/login", True), ("/api/v1/teams", False), ("/mcp", False)],
)
async def test_a_trickled_body_is_answered_408_at_the_deadline_and_closed(
    base_url: str, path: str, html: bool
) -> None:
    loop = asyncio.get_running_loop()
    async with connection(base_url) as (reader, writer):
        headers = {
            "Content-Type": "application/x-www-form-urlencoded" if html else "application/json",
            "Content-Length": "10000",
        }
        writer.write(request_head("POST", path, headers))
        await writer.drain()
        started = loop.time()
        stop = asyncio.Event()
        sender = asyncio.create_task(trickle(writer, stop))
        try:
            status, answer_headers, body = await read_answer(reader, DEADLINE + 5)
        finally:
            stop.set()
            await sender
        waited = loop.time() - started
        assert status == 408 and DEADLINE - 0.2 <= waited < DEADLINE + 2, (status, waited)
        assert answer_headers["connection"].lower() == "close"
        if html:
            assert answer_headers["content-type"].startswith("text/html")
            assert b"did not arrive within" in body
            assert "frame-ancestors 'none'" in answer_headers["content-security-policy"]
        else:
            assert json.loads(body)["error"] == "request_timeout"
        if html:
            # The reproduction: the login form held the connection for 300 s and more.
            assert await closed_within(reader, LINGER + 2), "the server kept the connection open"


async def test_a_slow_body_that_arrives_in_time_is_handled(base_url: str) -> None:
    async with connection(base_url) as (reader, writer):
        form = b"token=sbo_not_a_real_token"
        writer.write(
            request_head(
                "POST",
                "/ui/login",
                {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": str(len(form))},
            )
        )
        for i in range(0, len(form), 8):
            writer.write(form[i : i + 8])
            await writer.drain()
            await asyncio.sleep(0.05)
        status, headers, _ = await read_answer(reader, 5)
    # The login form itself answers (an unknown token), not the body rule.
    assert status not in (408, 413) and headers["content-type"].startswith("text/html")


@pytest.mark.parametrize(
    ("path", "cap", "html"),
    [
        ("/ui/login", app_module.UI_MAX_BODY_BYTES, True),
        ("/api/v1/teams", app_module.API_MAX_BODY_BYTES, False),
        ("/mcp", 4 * bodies.MIB, False),
        ("/webhooks/", ingest.MAX_BODY_BYTES, False),
        ("/healthz", app_module.OTHER_MAX_BODY_BYTES, False),
    ],
)
async def test_an_oversize_content_length_is_refused_before_reading(
    services: Services, base_url: str, path: str, cap: int, html: bool
) -> None:
    if path == "/webhooks/":
        # Ingest judges the length once the token names a webhook (an unknown one is 404 first),
        # so that the refusal is counted as that webhook's.
        path += (await make_webhook(services, "generic"))[0]
    loop = asyncio.get_running_loop()
    async with connection(base_url) as (reader, writer):
        # Announce one byte more than the cap and send none of it: the answer cannot have waited.
        writer.write(
            request_head("POST", path, {"Content-Type": "application/json", "Content-Length": str(cap + 1)})
        )
        await writer.drain()
        started = loop.time()
        status, headers, body = await read_answer(reader, 5)
        assert status == 413 and loop.time() - started < DEADLINE / 2
        if html:
            assert headers["content-type"].startswith("text/html") and b"larger than" in body
        else:
            assert json.loads(body)["error"] == "payload_too_large"


@pytest.mark.parametrize(("path", "html"), [("/ui/login", True), ("/api/v1/teams", False)])
async def test_a_chunked_body_is_cut_off_at_the_cap(base_url: str, path: str, html: bool) -> None:
    async with connection(base_url) as (reader, writer):
        writer.write(
            request_head("POST", path, {"Content-Type": "text/plain", "Transfer-Encoding": "chunked"})
        )
        chunk = b"x" * (64 * bodies.KIB)

        async def send() -> None:
            # Up to 100 chunks (6.4 MiB, over every cap here), as fast as the server takes them.
            with contextlib.suppress(ConnectionError):
                for _ in range(100):
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await writer.drain()

        sender = asyncio.create_task(send())
        try:
            status, headers, _ = await read_answer(reader, DEADLINE + 5)
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        assert status == 413
        assert headers["content-type"].startswith("text/html" if html else "application/json")


async def test_ingest_keeps_its_own_bounds_beside_the_rule(
    services: Services, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest streams its body itself (it counts and times each chunk), under the numbers the rule
    lists for it; the server's other surfaces' deadline does not apply to it."""
    monkeypatch.setattr(ingest, "BODY_READ_SECONDS", 0.5)
    token, _, _ = await make_webhook(services, "generic")
    async with connection(base_url) as (reader, writer):
        writer.write(request_head("POST", f"/webhooks/{token}", {"Content-Length": "100"}) + b'{"a":')
        await writer.drain()
        status, _, body = await read_answer(reader, 5)
    assert status == 408 and json.loads(body)["error"] == "request_timeout"
