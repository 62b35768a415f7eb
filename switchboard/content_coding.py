"""Request bodies sent with a ``Content-Encoding``: decoded here, whole or not at all.

The server reads every body as it came (``auto_decompress`` off, ``app.make_app``) and decodes it
itself. aiohttp's own decoding handed on a gzip stream that stopped short of its end as a whole,
shorter body: ingest stored the prefix and answered 202, and the sender's retry of the whole
delivery was then a duplicate. Here a compressed body is accepted only when its stream ends where
the body ends, so a body is stored as it was sent or refused.

Codings (RFC 9110 §8.4.1): ``gzip`` (also ``x-gzip``; several members in a row are one body),
``deflate`` (the zlib format, or raw deflate as some clients send it) and ``identity``, listed in
the order they were applied. The size cap applies to the decoded body, which is never made larger
than the cap plus one byte, whatever the compressed body would expand to.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from multidict import CIMultiDictProxy

# zlib's window bits for each format: gzip's header and trailer, zlib's, or none (raw deflate).
_GZIP = 16 + zlib.MAX_WBITS
_ZLIB = zlib.MAX_WBITS
_RAW = -zlib.MAX_WBITS
CODINGS = ("gzip", "x-gzip", "deflate", "identity")


class Undecodable(Exception):
    """The body is refused: ``status`` and ``code`` (``invalid_body``, ``payload_too_large``,
    ``unsupported_encoding``) and a ``message`` for the surface's own answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def header_of(headers: CIMultiDictProxy[str] | Mapping[str, str]) -> str | None:
    """The codings on a request's body as it arrives, as one ``Content-Encoding`` value: every line
    of that header, joined in order (RFC 9110 §5.3), then the ``Transfer-Encoding`` codings but
    ``chunked`` (applied after them, RFC 9112 §6.1; aiohttp undoes only ``chunked``). Reading only
    the first line left a second gzip layer on the body and never refused a coding named on the
    second line, and a ``Transfer-Encoding: gzip, chunked`` body was stored compressed. None when
    there is none."""
    named = _lines(headers, "Content-Encoding")
    named += [
        coding
        for line in _lines(headers, "Transfer-Encoding")
        for coding in line.split(",")
        if coding.strip().lower() not in ("", "chunked")
    ]
    return ", ".join(named) if named else None


def _lines(headers: CIMultiDictProxy[str] | Mapping[str, str], name: str) -> list[str]:
    getall = getattr(headers, "getall", None)
    lines = getall(name, []) if callable(getall) else [headers.get(name)]
    return [line for line in lines if isinstance(line, str)]


def codings(header: str | None) -> list[str]:
    """The codings a ``Content-Encoding`` header names, lower case, in the order they were applied
    (``identity`` left out); [] for none."""
    if not header:
        return []
    named = [c.strip().lower() for c in header.split(",")]
    return [c for c in named if c and c != "identity"]


def check(header: str | None) -> list[str]:
    """``codings(header)``, refused with ``415 unsupported_encoding`` when one is not decoded here:
    answered before any of the body is read."""
    named = codings(header)
    for coding in named:
        if coding not in CODINGS:
            shown = coding.encode("ascii", "replace").decode()[:40]
            raise Undecodable(
                415,
                "unsupported_encoding",
                f"the coding {shown!r} is not accepted (gzip, deflate and identity are)",
            )
    return named


def decoded(body: bytes, header: str | None, limit: int, limit_text: str) -> bytes:
    """``body`` with the codings of ``header`` undone, last applied first; at most ``limit`` bytes
    (else ``413 payload_too_large``, saying ``limit_text``). A stream that ends early, holds
    anything after its end or does not decode is ``400 invalid_body``."""
    for coding in reversed(check(header)):
        if not body:
            # An empty body carries no stream to decode (some clients label every body).
            return body
        body = _undo(body, coding, limit, limit_text)
    return body


def _undo(data: bytes, coding: str, limit: int, limit_text: str) -> bytes:
    if coding == "deflate":
        # The zlib format's two-byte header: deflate named in the first byte's low four bits, the
        # pair a multiple of 31. Anything else is taken as raw deflate, which some clients send
        # under this name (aiohttp's own decoding told them apart the same way).
        header = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
        wbits = _ZLIB if header else _RAW
    else:
        wbits = _GZIP
    out: list[bytes] = []
    room = limit + 1
    while True:
        stream = zlib.decompressobj(wbits=wbits)
        try:
            part = stream.decompress(data, room)
        except zlib.error:
            raise Undecodable(400, "invalid_body", f"the {coding} body does not decode") from None
        out.append(part)
        room -= len(part)
        if room <= 0 or stream.unconsumed_tail:
            # Stopped at the cap with more to come: larger than the cap, decoded or not.
            raise Undecodable(413, "payload_too_large", f"the decoded body is larger than {limit_text}")
        if not stream.eof:
            raise Undecodable(400, "invalid_body", f"the {coding} body ends before its stream does")
        data = stream.unused_data
        if not data:
            return b"".join(out)
        if wbits != _GZIP:
            raise Undecodable(400, "invalid_body", f"the {coding} body goes on after its stream ends")
        # gzip: another member follows (RFC 1952 allows several); it must be whole too.
