"""Logging set-up, and an access log that never prints an ingest token.

The ingest URL's token is the only credential that travels in a path (``/webhooks/{token}``); the
access log shows its first characters only. Bearer tokens travel in headers, which are never logged.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

_INGEST_PATH = re.compile(r"(/webhooks/)([A-Za-z0-9_-]{0,8})[A-Za-z0-9_-]*")


def redact_path(path: str) -> str:
    return _INGEST_PATH.sub(r"\1\2…", path)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data)


def configure_logging(level: int, as_json: bool = False) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if as_json else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class RedactingAccessLogger(AbstractAccessLogger):
    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        self.logger.info(
            '%s "%s %s" %s %.1fms',
            request.remote,
            request.method,
            redact_path(request.path),
            response.status,
            time * 1000,
        )
