"""What a client is told when aiohttp's HTTP parser refuses its request.

aiohttp answers a request it cannot parse (a bad byte in a header, a line past 8,190 bytes, a bad
chunk size, a method that is not one) itself, before the application and its middlewares see it:
``RequestHandler.handle_error`` builds a plain-text 400 that quotes the offending line. That line
may be the request line with an ingest token in its path, or an ``Authorization`` header with its
bearer token, so the answer both broke the rule that every error is a JSON body and echoed a secret.
aiohttp offers no hook for that answer (its server builds the handler class itself), so
``install`` wraps the method once per process: aiohttp still logs, checks that nothing was sent yet
and closes the connection; the answer becomes Switchboard's JSON error, with the parser's reason
and never what it quoted.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

# What the parser quotes follows its reason after a colon, a newline or an opening quote: "Invalid
# header value char:\n\n  b'Authorization: …'", "Got more than 8190 bytes when reading:
# bytearray(b'/webhooks/…')", "Bad status line 'GET /…'".
_QUOTE_STARTS = re.compile(r"[:\n'\"]|\bb(?=['\"])|bytearray\(")
_PLAIN_REASON = re.compile(r"[A-Za-z0-9 ,.()/-]+")
REASON_MAX = 200


def parser_reason(exc: BaseException | None) -> str:
    """The reason the parser gave for refusing a request, without anything it quoted from it;
    its class's name when the reason is not plain words."""
    if exc is None:
        return "malformed HTTP request"
    text = getattr(exc, "message", None)
    if not isinstance(text, str):
        text = str(exc)
    reason = " ".join(_QUOTE_STARTS.split(text, maxsplit=1)[0].split())[:REASON_MAX].rstrip(" .")
    if not reason or not _PLAIN_REASON.fullmatch(reason):
        return type(exc).__name__
    return reason


_CODES = {413: "payload_too_large", 431: "invalid_argument", 500: "internal", 504: "unavailable"}


def refusal(status: int, exc: BaseException | None) -> dict[str, Any]:
    """The JSON body of aiohttp's own error answer, in the shape of every other error."""
    if status >= 500:
        # Only an exception that escaped the application's middlewares lands here: say nothing of it.
        message = "internal error" if status == 500 else "the request took too long"
        return {"error": _CODES.get(status, "internal"), "message": message}
    return {
        "error": _CODES.get(status, "invalid_argument"),
        "message": f"malformed HTTP request: {parser_reason(exc)}",
    }


def install() -> None:
    """Make aiohttp's own error answers JSON bodies, for every server in this process. Idempotent."""
    original = RequestHandler.handle_error
    if getattr(original, "_switchboard", False):
        return

    def handle_error(
        self: RequestHandler,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # aiohttp's own first: its log line, its refusal to answer once a response has begun.
        original(self, request, status, exc, message)
        response = web.Response(
            status=status, text=json.dumps(refusal(status, exc)), content_type="application/json"
        )
        response.force_close()
        return response

    handle_error._switchboard = True  # type: ignore[attr-defined]
    RequestHandler.handle_error = handle_error  # type: ignore[method-assign]
