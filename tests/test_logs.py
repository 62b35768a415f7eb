"""Logs: an ingest token is a credential and travels in the path, so every spelling of an ingest
path is shortened, in any message, traceback or HTTP-parser error, by either formatter."""

from __future__ import annotations

import json
import logging
import sys

import pytest
from aiohttp.http_exceptions import LineTooLong

from switchboard.logs import JsonFormatter, RedactingFilter, redact_path

TOKEN = "wh_" + "Q" * 32


@pytest.mark.parametrize(
    "path",
    [
        f"/webhooks/{TOKEN}",
        f"/webhooks//{TOKEN}",
        f"/WEBHOOKS/{TOKEN}",
        f"/webhooks/{TOKEN}/extra",
        f"//webhooks/{TOKEN}?x=1",
    ],
)
def test_every_spelling_of_an_ingest_path_is_redacted(path: str) -> None:
    redacted = redact_path(path)
    assert TOKEN not in redacted and TOKEN[:8] in redacted


def test_the_log_filter_redacts_an_http_parser_error_naming_the_request_line() -> None:
    """aiohttp logs an over-long request line (the whole ingest URL) with a traceback."""
    try:
        raise LineTooLong(f"/webhooks/{TOKEN}?x=aaaa"[:100] + "...", "8190")
    except LineTooLong:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "aiohttp.server",
        logging.ERROR,
        __file__,
        1,
        "Error handling request from %s",
        ("127.0.0.1",),
        exc_info,
    )
    assert RedactingFilter().filter(record)
    text = logging.Formatter().format(record)
    assert TOKEN not in text
    assert "Traceback" not in text and "\n" not in text
    assert record.levelno == logging.WARNING and "127.0.0.1" in text


def test_the_log_filter_redacts_tokens_in_any_message_and_traceback() -> None:
    try:
        raise RuntimeError(f"failed on /webhooks/{TOKEN}")
    except RuntimeError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "switchboard.x", logging.ERROR, __file__, 1, "posting to %s", (f"/webhooks/{TOKEN}",), exc_info
    )
    assert RedactingFilter().filter(record)
    for formatter in (logging.Formatter(), JsonFormatter()):
        text = formatter.format(record)
        assert TOKEN not in text and "RuntimeError" in text


def test_the_time_of_a_line_reads_as_the_standard_formatters_every_second() -> None:
    """The time's text is made once a second (``logs._TimeCachingFormatter``): each line still shows its own
    second and milliseconds, in both formats, as the standard formatter writes them."""
    from switchboard.logs import _TimeCachingFormatter

    plain, standard = _TimeCachingFormatter("%(asctime)s %(message)s"), logging.Formatter()
    as_json = JsonFormatter()
    for created in (1_800_000_000.25, 1_800_000_000.75, 1_800_000_001.5, 1_800_000_000.125):
        record = logging.LogRecord("switchboard.x", logging.INFO, __file__, 1, "m %s%%", ("x",), None)
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert plain.formatTime(record) == standard.formatTime(record)
        assert plain.format(record) == f"{standard.formatTime(record)} m x%"
        fmt = "%Y-%m-%dT%H:%M:%S"
        assert json.loads(as_json.format(record))["ts"] == standard.formatTime(record, fmt)


def test_a_filtered_record_keeps_its_message_formatted_once() -> None:
    record = logging.LogRecord(
        "switchboard.x",
        logging.INFO,
        __file__,
        1,
        "posting %s to %s (100%%)",
        ("x", f"/webhooks/{TOKEN}"),
        None,
    )
    assert RedactingFilter().filter(record)
    assert record.args is None and record.getMessage() == f"posting x to /webhooks/{TOKEN[:8]}… (100%)"


async def test_an_access_line_is_written_as_the_request_was_with_the_token_shortened() -> None:
    """Made whole by the access logger: a ``%`` in the path stays, and the token is shortened even
    where no ``RedactingFilter`` is installed (a test's or an embedding application's handler)."""
    from aiohttp.test_utils import make_mocked_request
    from aiohttp.web import Response

    from switchboard.logs import ACCESS_NOTE, RedactingAccessLogger

    logger, lines = logging.getLogger("switchboard.test_access"), []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Keep()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        access = RedactingAccessLogger(logger, "")
        assert access.enabled
        request = make_mocked_request("POST", f"/webhooks/{TOKEN}%25s?x=%d")
        request[ACCESS_NOTE] = "webhook=wh_1 event=100%"
        access.log(request, Response(status=202), 0.0015)
        logger.setLevel(logging.WARNING)
        assert not RedactingAccessLogger(logger, "").enabled
    finally:
        logger.removeHandler(handler)
    [line] = lines
    assert TOKEN not in line and f'"POST /webhooks/{TOKEN[:8]}…" 202 1.5ms webhook=wh_1 event=100%' in line
