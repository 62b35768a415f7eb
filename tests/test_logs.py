"""Logs: an ingest token is a credential and travels in the path, so every spelling of an ingest
path is shortened, in any message, traceback or HTTP-parser error, by either formatter."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys

import pytest
from aiohttp.http_exceptions import LineTooLong

from switchboard import logs
from switchboard.logs import (
    PLAIN_FORMAT,
    JsonFormatter,
    LineHandler,
    RedactingFilter,
    _TimeCachingFormatter,
    configure_logging,
    lean_handler,
    redact_path,
)

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


def _line_handler(formatter: logging.Formatter) -> tuple[LineHandler, io.StringIO]:
    stream = io.StringIO()
    handler = LineHandler()
    handler.setStream(stream)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(formatter)
    return handler, stream


@pytest.mark.parametrize("as_json", [False, True])
def test_an_access_line_written_without_a_record_reads_as_the_record_would(
    monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """``LineHandler.access`` skips the logging module's record; what it writes must still be,
    character for character, what the same handler writes for a record of that line, in both
    formats and at any millisecond."""
    message = f'127.0.0.1 "POST /webhooks/{TOKEN[:8]}…" 202 3.1ms webhook=wh_1 event=100% "q"'
    formatter = JsonFormatter() if as_json else _TimeCachingFormatter(PLAIN_FORMAT)
    for created in (1_800_000_000.0, 1_800_000_000.9996, 1_800_000_001.5, 1_800_000_000.4567):
        handler, stream = _line_handler(formatter)
        monkeypatch.setattr(logs, "time", lambda created=created: created)
        assert handler.access("aiohttp.access", message)  # no running loop: written at once
        record = logging.LogRecord("aiohttp.access", logging.INFO, __file__, 1, message, None, None)
        record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
        assert stream.getvalue() == handler.format(record) + "\n"


def test_a_format_naming_other_fields_takes_the_record_path() -> None:
    handler, stream = _line_handler(_TimeCachingFormatter("%(asctime)s %(process)d %(message)s"))
    assert not handler.access("aiohttp.access", "GET /")
    assert stream.getvalue() == ""
    handler, stream = _line_handler(logging.Formatter("%(message)s"))
    assert not handler.access("aiohttp.access", "GET /")


async def test_access_lines_are_written_when_the_loops_turn_ends_and_before_any_later_record() -> None:
    handler, stream = _line_handler(_TimeCachingFormatter("%(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("switchboard.test_lines")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        assert handler.access("aiohttp.access", "first") and handler.access("aiohttp.access", "second")
        assert stream.getvalue() == ""  # kept for the turn
        logger.warning("a warning")  # written after the lines kept before it
        assert stream.getvalue() == (
            "aiohttp.access INFO first\n"
            "aiohttp.access INFO second\n"
            "switchboard.test_lines WARNING a warning\n"
        )
        assert handler.access("aiohttp.access", "third")
        await asyncio.sleep(0)  # the turn ends
        assert stream.getvalue().endswith("a warning\naiohttp.access INFO third\n")
        assert handler.access("aiohttp.access", "fourth")
        handler.flush()  # as logging.shutdown does at exit
        assert stream.getvalue().endswith("third\naiohttp.access INFO fourth\n")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


def test_a_failing_stream_does_not_raise_into_the_request(capsys: pytest.CaptureFixture[str]) -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError("gone")

    handler = LineHandler()
    handler.setStream(Broken())
    handler.setFormatter(_TimeCachingFormatter(PLAIN_FORMAT))
    assert handler.access("aiohttp.access", "GET /")
    assert "BrokenPipeError" in capsys.readouterr().err


def test_the_lean_path_is_taken_only_when_nothing_else_would_see_the_record() -> None:
    """A test's ``caplog``, an embedding application's handler or filter, a logger that does not
    propagate, or a level above INFO: the access line then goes through the logging module."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    access = logging.getLogger("aiohttp.access")
    try:
        configure_logging(logging.INFO)
        [handler] = root.handlers
        assert isinstance(handler, LineHandler) and lean_handler(access) is handler

        extra = logging.NullHandler()
        root.addHandler(extra)
        assert lean_handler(access) is None
        root.removeHandler(extra)

        for holder in (access, logging.getLogger("aiohttp"), handler):
            only = logging.Filter("x")
            holder.addFilter(only)
            assert lean_handler(access) is None
            holder.removeFilter(only)

        access.addHandler(extra)
        assert lean_handler(access) is None
        access.removeHandler(extra)

        access.propagate = False
        assert lean_handler(access) is None
        access.propagate = True

        root.setLevel(logging.WARNING)
        assert lean_handler(access) is None
        root.setLevel(logging.INFO)
        handler.setLevel(logging.WARNING)
        assert lean_handler(access) is None
        handler.setLevel(logging.NOTSET)
        assert lean_handler(access) is handler
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


async def test_no_line_is_lost_while_another_thread_logs_records() -> None:
    """Records from another thread (SQLite's writer logs from its own) flush the kept lines while
    the event loop keeps adding to them: every line and every record is written exactly once."""
    import threading

    handler, stream = _line_handler(_TimeCachingFormatter("%(message)s"))
    logger = logging.getLogger("switchboard.test_threads")
    logger.addHandler(handler)
    logger.propagate = False
    count = 3000
    try:
        writer = threading.Thread(target=lambda: [logger.warning("record %d", n) for n in range(count)])
        writer.start()
        for n in range(count):
            handler.access("aiohttp.access", f"line {n}")
            if n % 50 == 0:
                await asyncio.sleep(0)
        writer.join()
        handler.flush()
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    written = stream.getvalue().splitlines()
    lines, records = [f"line {n}" for n in range(count)], [f"record {n}" for n in range(count)]
    assert sorted(written) == sorted(lines + records)
    # The loop's lines keep their order among themselves.
    assert [w for w in written if w.startswith("line")] == lines
