"""What Switchboard tells operators, at its edges: a token quoted by aiohttp's parser in a refused
request, and one after an encoded space or quote in an ingest path, never reach the log; /metrics
renders counters and sums exactly (``:g`` kept six digits, so a counter past a million moved in
steps)."""

from __future__ import annotations

import asyncio
import io
import logging

from aiohttp import web
from aiohttp.test_utils import TestServer, make_mocked_request

from switchboard.logs import PLAIN_FORMAT, RedactingAccessLogger, RedactingFilter, _TimeCachingFormatter
from switchboard.metrics import Metrics

BEARER = "sbk_" + "S" * 40
INGEST = "wh_" + "Q" * 32


async def test_a_bearer_token_in_a_malformed_header_never_reaches_the_log() -> None:
    """aiohttp's parser quotes the offending header line in its error, and the filter logs that
    text as the warning's detail: a client's Authorization header with one bad byte puts its
    bearer token in the server log at the default level."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(_TimeCachingFormatter(PLAIN_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", ok)
    server = TestServer(app)
    await server.start_server()
    try:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + BEARER.encode() + b"\x01\r\n\r\n"
        )
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 5)
        writer.close()
        await asyncio.sleep(0.05)
    finally:
        await server.close()
        root.removeHandler(handler)
    assert b" 400 " in status
    text = stream.getvalue()
    assert "bad HTTP request" in text  # the parser error was logged ...
    assert BEARER not in text  # ... without the credential it quoted


def test_counters_are_rendered_exactly_past_a_million() -> None:
    """``{value:g}`` keeps six significant digits: a counter at 1,234,567 is exposed as
    1.23457e+06 and stays there for the next 4 increments (rate() reads 0, then a jump)."""
    m = Metrics()
    m.inc("switchboard_ingest_total", 1_234_567, source="github", status="202", disposition="routed")
    before = m.render()
    m.inc("switchboard_ingest_total", 1, source="github", status="202", disposition="routed")
    after = m.render()
    assert before != after
    assert 'switchboard_ingest_total{disposition="routed",source="github",status="202"} 1234568' in after


def test_a_histogram_sum_is_rendered_without_losing_precision() -> None:
    m = Metrics()
    m.describe("switchboard_ingest_seconds", "histogram", "t")
    for _ in range(1000):
        m.observe("switchboard_ingest_seconds", 1.001, source="github")
    m.observe("switchboard_ingest_seconds", 0.0001, source="github")
    line = next(x for x in m.render().splitlines() if x.startswith("switchboard_ingest_seconds_sum"))
    assert abs(float(line.rsplit(" ", 1)[1]) - 1001.0001) < 1e-6, line


def test_the_access_line_shortens_a_token_after_an_encoded_space_or_quote() -> None:
    """``request.path`` is percent-decoded: ``/webhooks/%20<token>`` (a URL pasted with a stray
    space) reaches the access logger as ``/webhooks/ <token>``, and the pattern, which stops at
    whitespace and quotes, shortens nothing."""
    logger, lines = logging.getLogger("switchboard.test_review_access"), []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    keep = Keep()
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)
    try:
        access = RedactingAccessLogger(logger, "")
        for raw in (f"/webhooks/%20{INGEST}", f"/webhooks/%22{INGEST}", f"/webhooks/%3F{INGEST}"):
            access.log(make_mocked_request("POST", raw), web.Response(status=404), 0.001)
    finally:
        logger.removeHandler(keep)
    assert len(lines) == 3
    for line in lines:
        assert INGEST not in line, line
