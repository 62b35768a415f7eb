"""Logging set-up, and an access log that never prints an ingest token.

The ingest URL's token is the only credential that travels in a path (``/webhooks/{token}``); the
access log shows its first characters only. Bearer tokens travel in headers, which are never logged.
"""

from __future__ import annotations

import json
import logging
import re
from time import strftime
from typing import Any

from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web import BaseRequest, RequestKey, StreamResponse
from aiohttp.web_protocol import RequestPayloadError

# Whatever follows ``/webhooks/`` (any case, any number of slashes) up to the query is treated as
# the token: a mistyped path such as ``/webhooks//wh_…`` still carries a real one.
_INGEST_PATH = re.compile(r"(/webhooks/+)([^/?#\s'\"]{0,8})[^?#\s'\"]*", re.IGNORECASE)


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
            detail = " ".join(redact_path(str(exc)).split())[:200]
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
        record.msg, record.args = redact_path(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_path(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact_path(record.exc_text)
        return True


class _TimeCachingFormatter(logging.Formatter):
    """``logging.Formatter``, with the time's text made once a second rather than once a line
    (every request writes an access line: issue 12)."""

    _second: tuple[int, str | None, str] = (-1, None, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        cached, cached_format, text = self._second
        if cached != second or cached_format != datefmt:
            text = strftime(datefmt or self.default_time_format, self.converter(record.created))
            self._second = (second, datefmt, text)
        # The same text as the standard Formatter's: its milliseconds only when no format is given.
        if datefmt or not self.default_msec_format:
            return text
        return self.default_msec_format % (text, record.msecs)


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


def configure_logging(level: int, as_json: bool = False) -> None:
    handler = logging.StreamHandler()
    handler.addFilter(RedactingFilter())
    plain = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler.setFormatter(JsonFormatter() if as_json else _TimeCachingFormatter(plain))
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
        line = f'{request.remote} "{request.method} {request.path}" {response.status} {time * 1000:.1f}ms'
        # Made whole here, with no arguments left to format (a ``%`` in it stays as it is), and
        # redacted here, note and all, whichever handler writes it.
        self.logger.info(redact_path(f"{line} {note}" if note else line))
