"""The server's log holds one line per record: text a request chose (its decoded path, above all)
can never start a line of its own in the log, nor reach the operator's terminal as an escape
sequence. Anyone who reaches the port chooses a path, and ``%0a`` decodes to a line break."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from yarl import URL

from switchboard.logs import PLAIN_FORMAT, RedactingFilter, _TimeCachingFormatter
from switchboard.testing import ServeProcesses

FORGED = "2026-12-06 03:00:00,000 WARNING switchboard: forged line"


async def test_a_path_with_a_line_break_or_an_escape_stays_on_its_access_line(
    switchboard_serve: ServeProcesses,
) -> None:
    sb = await switchboard_serve.start()
    paths = [
        "/x%0A" + FORGED.replace(" ", "%20") + "%1B[31m",  # a 404
        "/webhooks/ab%0D%0A" + FORGED.replace(" ", "%20"),  # ingest's own route (405 on GET)
        "/ui/%E2%80%AEevil",  # a bidi override: reorders what a terminal shows
    ]
    async with aiohttp.ClientSession() as http:
        for path in paths:
            async with http.get(URL(sb.base_url + path, encoded=True)) as resp:
                assert resp.status in (302, 404, 405)
    assert await sb.stop() == 0
    log = sb.check_log()
    for line in log.splitlines():
        assert not line.startswith(FORGED), log
    assert "\x1b" not in log and "\u202e" not in log and "\r" not in log
    # Each request is still its one access line, with what was escaped shown as an escape.
    assert '"GET /x\\x0a2026-12-06 03:00:00,000 WARNING switchboard: forged line\\x1b[31m" 404' in log
    (ingest,) = [line for line in log.splitlines() if '"GET /webhooks/ab' in line]
    assert "\\x0d\\x0a2026…" in ingest and ingest.endswith("ms") and " 405 " in ingest
    assert '"GET /ui/\\u202eevil"' in log


@pytest.mark.parametrize("path", ["/api/v1/todos\n" + FORGED, "/ui/board\x1b]0;owned\x07"])
def test_a_record_naming_a_request_path_is_one_line(path: str) -> None:
    """Surfaces log the request's path in some warnings (the database unavailable on a page or an
    API call, a web UI conflict): the filter every record passes keeps such a record to one line."""
    record = logging.LogRecord(
        "switchboard.web",
        logging.WARNING,
        __file__,
        1,
        "web UI: database unavailable on %s %s: %s",
        ("GET", path, "OSError"),
        None,
    )
    assert RedactingFilter().filter(record)
    text = _TimeCachingFormatter(PLAIN_FORMAT).format(record)
    assert "\n" not in text and "\x1b" not in text and "\x07" not in text
    assert "\\x0a" in text or "\\x1b" in text
