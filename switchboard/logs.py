"""Logging set-up, and an access log that never prints an ingest token.

The ingest URL's token is the only credential that travels in a path (``/webhooks/{token}``); the
access log shows its first characters only. Bearer tokens travel in headers, which are never logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import traceback
import unicodedata
from time import strftime, time
from typing import Any

from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web import BaseRequest, RequestKey, StreamResponse
from aiohttp.web_protocol import RequestPayloadError

from switchboard.http_refusals import parser_reason

# Whatever follows ``/webhooks/`` (any case, any number of slashes) up to the query is treated as
# the token: a mistyped path such as ``/webhooks//wh_…`` still carries a real one.
_INGEST_PATH = re.compile(r"(/webhooks/+)([^/?#\s'\"]{0,8})[^?#\s'\"]*", re.IGNORECASE)
# The same in a decoded path (``request.path``: no query, and an escape may have become a space, a
# quote or a ``?``): everything after ``/webhooks/`` is the token.
_DECODED_INGEST_PATH = re.compile(r"(/webhooks/+)([^/]{0,8}).*", re.IGNORECASE | re.DOTALL)


# What a log line shows escaped (``\x0a``, ``\u202e``), as the CLI shows sender text: control characters
# (a decoded ``%0a`` in a path would start a line of the requester's choosing in the log, an ESC an
# escape sequence in the operator's terminal), format characters (bidi overrides), line and
# paragraph separators, and lone surrogates (undecodable bytes in a path or header).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def one_line(text: str) -> str:
    """``text`` with every character of ``_ESCAPED_CATEGORIES`` shown escaped: one line, inert in
    a terminal. Nearly every line is printable already, which one C call tells."""
    if text.isprintable():
        return text
    return "".join(
        (f"\\u{ord(ch):04x}" if ord(ch) > 0xFF else f"\\x{ord(ch):02x}")
        if unicodedata.category(ch) in _ESCAPED_CATEGORIES
        else ch
        for ch in text
    )


def _shortened(match: re.Match[str]) -> str:
    return f"{match[1]}{match[2]}…"


def redact_path(path: str) -> str:
    # A function, not the template ``\1\2…``, which the re module expands in Python for every
    # match: a third of this call's cost, and every access line has a match (issue 12).
    return _INGEST_PATH.sub(_shortened, path)


class RedactingFilter(logging.Filter):
    """Applied to every record the process logs: ingest tokens are shortened in messages and
    tracebacks alike (aiohttp's parser, for one, quotes the request line of a malformed request).

    A request the HTTP parser refused is the client's mistake, not ours: one warning line, no
    traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if record.name == "aiohttp.server" and isinstance(exc, HttpProcessingError | RequestPayloadError):
            # "Error handling request from %s" names the client; "Unhandled exception" does not.
            client = record.args[0] if isinstance(record.args, tuple) and record.args else None
            # The parser quotes what it refused (a request line, a header and its value: a bearer
            # token, a cookie): only its reason is logged, never what it quoted.
            detail = parser_reason(exc)
            record.msg = "bad HTTP request%s refused: %s (%s)"
            record.args = (f" from {client}" if client else "", type(exc).__name__, detail)
            if record.levelno > logging.WARNING:
                # Lowered, never raised (a stray non-HTTP probe is logged at DEBUG).
                record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
            return True
        try:
            message = record.getMessage()
        except Exception:
            # A malformed call (arguments not matching its format): the handler reports that
            # itself; a filter must never raise into the code that logged.
            return True
        # The message is kept formatted (and redacted): the formatter would otherwise format it again.
        # One line: some messages name a request's path or a header (a page's outage warning).
        record.msg, record.args = one_line(redact_path(message)), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_path(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact_path(record.exc_text)
        return True


class _TimeCachingFormatter(logging.Formatter):
    """``logging.Formatter``, with the time's text made once a second rather than once a line
    (every request writes an access line: issue 12), and ``line``: what ``format`` makes of a
    record with a plain message, without making the record."""

    _second: tuple[int, str | None, str] = (-1, None, "")
    # The fields ``line`` fills; a format that names any other cannot be written without a record.
    _LINE_FIELDS = frozenset({"asctime", "levelname", "name", "message"})

    def __init__(self, fmt: str | None = None, datefmt: str | None = None) -> None:
        # Always ``%``-style (no ``style`` here): ``line`` fills the same format itself.
        super().__init__(fmt, datefmt)
        self._line_format = fmt if fmt is not None else logging.PercentStyle.default_format
        self._lined = self._LINE_FIELDS.issuperset(re.findall(r"%\((\w+)\)", self._line_format))

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return self._time_text(record.created, record.msecs, datefmt)

    def _time_text(self, created: float, msecs: float, datefmt: str | None) -> str:
        second = int(created)
        cached, cached_format, text = self._second
        if cached != second or cached_format != datefmt:
            text = strftime(datefmt or self.default_time_format, self.converter(created))
            self._second = (second, datefmt, text)
        # The same text as the standard Formatter's: its milliseconds only when no format is given.
        if datefmt or not self.default_msec_format:
            return text
        return self.default_msec_format % (text, msecs)

    def line(self, name: str, levelname: str, message: str, created: float) -> str | None:
        """``format`` of a record of logger ``name`` at ``levelname``, made at ``created``, whose
        message is ``message`` as it is (no arguments, no traceback); None when this format names a
        field other than the time, the level, the logger and the message."""
        if not self._lined:
            return None
        # The milliseconds as ``LogRecord`` computes them (gh-89047).
        msecs = int((created - int(created)) * 1000) + 0.0
        fields = {"levelname": levelname, "name": name, "message": message}
        if self.usesTime():
            fields["asctime"] = self._time_text(created, msecs, self.datefmt)
        return self._line_format % fields


class JsonFormatter(_TimeCachingFormatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_text:
            # Already formatted (and redacted) by RedactingFilter.
            data["exc"] = record.exc_text
        elif record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data)

    def line(self, name: str, levelname: str, message: str, created: float) -> str:
        data = {
            "ts": self._time_text(created, 0.0, "%Y-%m-%dT%H:%M:%S"),
            "level": levelname.lower(),
            "logger": name,
            "message": message,
        }
        return json.dumps(data)


class LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``configure_logging`` installs: a ``StreamHandler`` that also takes access lines
    made whole (``RedactingAccessLogger``) without a ``LogRecord``, the filter and the formatter's
    record-by-record path. A request's access line through the logging module cost about a
    fifteenth of an ingested delivery's CPU under load (issue 12, bench/HISTORY.md).

    Access lines are kept until the event loop's turn ends and written together, one write for
    the turn's requests instead of one each. A record never overtakes a line kept before it: the
    kept lines are written first. ``flush`` (which ``logging.shutdown`` calls at exit) writes them
    too. A process killed outright loses the lines of its last turn, as any buffered log does."""

    def __init__(self) -> None:
        super().__init__()
        self._kept: list[str] = []
        # The loop whose end-of-turn write is due (another loop's, after a restart, is scheduled again).
        self._due_on: asyncio.AbstractEventLoop | None = None

    def access(self, name: str, message: str) -> bool:
        """Keep ``message`` as a line of logger ``name`` at INFO, formatted as a record of it would
        be; False when this handler's formatter cannot (the caller then logs a record)."""
        formatter = self.formatter
        if not isinstance(formatter, _TimeCachingFormatter):
            return False
        line = formatter.line(name, "INFO", message, time())
        if line is None:
            return False
        # Under the handler's lock: a record logged on another thread (SQLite's writer) flushes the
        # kept lines, and a line appended to the list it had just taken would be lost.
        self.acquire()
        try:
            self._kept.append(line + self.terminator)
        finally:
            self.release()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return True
        if self._due_on is not loop:
            self._due_on = loop
            loop.call_soon(self._turn_ended)
        return True

    def _turn_ended(self) -> None:
        self._due_on = None
        self.flush()

    def flush(self) -> None:
        self.acquire()
        try:
            if self._kept:
                lines, self._kept = self._kept, []
                try:
                    self.stream.write("".join(lines))
                except Exception:
                    # As ``emit`` does on a failing stream: the log must never raise into a request.
                    if logging.raiseExceptions:
                        traceback.print_exc(file=sys.stderr)
            super().flush()
        finally:
            self.release()

    def emit(self, record: logging.LogRecord) -> None:
        if self._kept:
            self.flush()
        super().emit(record)


def lean_handler(logger: logging.Logger) -> LineHandler | None:
    """The ``LineHandler`` an INFO record of ``logger`` would reach and nothing else would see,
    with no filter but its ``RedactingFilter``; None otherwise (a test's ``caplog``, an embedding
    application's handler, a filter anywhere on the way: the record is then logged as usual)."""
    if not logger.isEnabledFor(logging.INFO):
        return None
    node: logging.Logger | None = logger
    while node is not None:
        if node.filters:
            return None
        if node.handlers:
            handlers = node.handlers
            if node.parent is not None or len(handlers) != 1:
                return None
            handler = handlers[0]
            if (
                not isinstance(handler, LineHandler)
                or handler.level > logging.INFO
                or len(handler.filters) != 1
                or not isinstance(handler.filters[0], RedactingFilter)
            ):
                return None
            return handler
        if not node.propagate:
            return None
        node = node.parent
    return None


PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: int, as_json: bool = False) -> None:
    handler = LineHandler()
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter() if as_json else _TimeCachingFormatter(PLAIN_FORMAT))
    # No format here names the calling function, file or line: finding them walked the caller's
    # frames for every record (the logging module's own documented optimisation).
    logging._srcfile = None
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # LOG_LEVEL=DEBUG is for Switchboard's own loggers. The database drivers log every statement
    # with its parameters at DEBUG: request bodies, and a signing secret stored in plaintext when
    # no encryption key is configured. They never go below INFO.
    # SQLAlchemy's engine logs statements at INFO (its echo), so it stays at WARNING.
    for name, floor in DRIVER_LOGGERS.items():
        logging.getLogger(name).setLevel(max(level, floor))


DRIVER_LOGGERS = {
    "aiosqlite": logging.INFO,
    "asyncpg": logging.INFO,
    "sqlalchemy.engine": logging.WARNING,
    "sqlalchemy.pool": logging.WARNING,
}


# What a handler adds to its request's access line (ingest: the webhook, source, event, disposition
# and todos of a stored delivery). One line per request instead of two: a second record and write
# per delivery was a twentieth of ingest's CPU (issue 12).
ACCESS_NOTE = RequestKey("switchboard_access_note", str)


class RedactingAccessLogger(AbstractAccessLogger):
    @property
    def enabled(self) -> bool:
        # aiohttp asks once per connection; a line that would not be written is not made.
        return self.logger.isEnabledFor(logging.INFO)

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        note = request.get(ACCESS_NOTE)
        path = _DECODED_INGEST_PATH.sub(_shortened, request.path)
        line = f'{request.remote} "{request.method} {path}" {response.status} {time * 1000:.1f}ms'
        # Made whole here, with no arguments left to format (a ``%`` in it stays as it is), and
        # redacted and made one line here, note and all, whichever handler writes it: the path is
        # decoded, and ``%0a`` in it would otherwise start a log line of the requester's choosing.
        text = one_line(redact_path(f"{line} {note}" if note else line))
        handler = lean_handler(self.logger)
        if handler is None or not handler.access(self.logger.name, text):
            self.logger.info(text)
