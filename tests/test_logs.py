"""Logs: an ingest token is a credential and travels in the path, so every spelling of an ingest
path is shortened, in any message, traceback or HTTP-parser error, by either formatter."""

from __future__ import annotations

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
