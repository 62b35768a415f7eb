"""Review of the session and login cookies: a cookie with bytes that are not UTF-8 (set by another
program on the same host, say: cookies are not kept apart by port) is no session, not a 500."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from switchboard import tenancy
from switchboard.services import Services


async def _status(base_url: str, request: bytes) -> int:
    """The status line's code for a request sent byte for byte (no client would send these)."""
    url = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(request)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("path", [b"/ui", b"/ui/login", b"/ui/teams", b"/ui/no-such-page"])
async def test_a_session_cookie_that_is_not_utf8_is_no_session(base_url: str, path: bytes) -> None:
    request = b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nCookie: sb_session=\xff\xfe\r\n\r\n" % path
    # The login page (or the way to it), or the 404 page: what someone without a session gets.
    assert await _status(base_url, request) == {b"/ui/login": 200, b"/ui/no-such-page": 404}.get(path, 303)


async def test_a_login_cookie_that_is_not_utf8_is_a_stale_login_form(
    services: Services, base_url: str
) -> None:
    _, token = await tenancy.add_human(services.db, "ada")
    body = f"csrf=abc&token={token}".encode()
    request = (
        b"POST /ui/login HTTP/1.1\r\nHost: x\r\nConnection: close\r\nCookie: sb_login=\xff\xfe\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    # Refused as a login form that was not sent from this page (403), with a fresh form.
    assert await _status(base_url, request) == 403
