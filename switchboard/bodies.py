"""Request bodies: how large, and how long to wait for them, decided once for the whole server.

A client that announces a body and then trickles it must not hold a connection (and a handler)
open for minutes, and a body must not be read at all when its ``Content-Length`` already says it is
too large. So every request with a body passes one rule before any handler runs (the middleware in
``switchboard.app``): its surface's size cap is checked against ``Content-Length`` first, then the
whole body is read within the surface's deadline, under the same cap while it arrives (a chunked
or compressed body has no honest length). A handler then reads it from memory with
``request.read()`` / ``post()`` / ``json()``, whatever style it uses.

Surfaces differ only in their numbers (ingest 5 MiB, MCP 4 MiB, the API 5 MiB, UI forms 64 KiB);
the refusal is ``413 payload_too_large``, ``408 request_timeout`` or ``400 invalid_body`` in the
surface's own error format, and the connection is closed after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from switchboard import content_coding

# How long a whole body may take to arrive, on every surface that does not name its own.
DEADLINE_SECONDS = 30.0
KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class BodyRule:
    """The bounds for request paths starting with ``prefix``.

    ``read_here=False`` is for a surface that bounds its body itself under the same two numbers
    (ingest, which checks ``Content-Length`` once it knows the webhook, so that a delivery refused
    for its size is counted as that webhook's refusal, and counts and times every chunk).
    """

    prefix: str
    max_bytes: int
    seconds: float
    read_here: bool = True


class BodyRefused(Exception):
    """The body is refused; ``status``, ``code`` and ``message`` make the surface's answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def size_text(n: int) -> str:
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} bytes"


def rule_for(path: str, rules: Sequence[BodyRule], default: BodyRule) -> BodyRule:
    """The first rule whose prefix the path starts with (list the longer prefixes first)."""
    return next((rule for rule in rules if path.startswith(rule.prefix)), default)


def _too_large(rule: BodyRule) -> BodyRefused:
    return BodyRefused(413, "payload_too_large", f"the body is larger than {size_text(rule.max_bytes)}")


async def admit(request: web.Request, rule: BodyRule) -> web.Request:
    """Apply ``rule`` to ``request``: the request a handler should get (its body read into memory
    when the rule reads it), or ``BodyRefused``."""
    if not rule.read_here:
        return request
    if request.content_length is not None and request.content_length > rule.max_bytes:
        # Decided from the header alone: not one byte of the body is read.
        raise _too_large(rule)
    if not request.body_exists:
        return request
    header = content_coding.header_of(request.headers)
    try:
        # An encoding not decoded here is refused before a byte of the body is read.
        coded = content_coding.check(header)
    except content_coding.Undecodable as exc:
        raise BodyRefused(exc.status, exc.code, exc.message) from None
    # The clone shares the connection and body stream; its own size cap stops the read as soon
    # as the body passes it, and its read() caches the body for the handler.
    bounded = request.clone(client_max_size=rule.max_bytes)
    try:
        async with asyncio.timeout(rule.seconds):
            await bounded.read()
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(rule) from None
    except TimeoutError:
        raise BodyRefused(
            408, "request_timeout", f"the body did not arrive within {rule.seconds:g} s"
        ) from None
    except (HttpProcessingError, RequestPayloadError, ConnectionError):
        # Broken chunking, or the client hung up.
        raise BodyRefused(400, "invalid_body", "the body was cut off or malformed") from None
    if coded:
        try:
            body = content_coding.decoded(
                await bounded.read(), header, rule.max_bytes, size_text(rule.max_bytes)
            )
        except content_coding.Undecodable as exc:
            raise BodyRefused(exc.status, exc.code, exc.message) from None
        # What ``read()`` (and ``text()``, ``json()``, ``post()`` of a form) answer from now on: the
        # decoded body, in the cache aiohttp's ``read()`` fills on its first call. aiohttp has no
        # public way to hand a request a body; tests/test_app.py holds this one to its effect.
        bounded._read_bytes = body
    return bounded
