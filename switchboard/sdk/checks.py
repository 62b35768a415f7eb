"""Checks a provider's ``verify`` and ``derive_address`` make on what a sender controls.

Every function here answers yes/no (or the value, or None) for any input — wrong types, non-ASCII,
lone surrogates (aiohttp decodes undecodable header bytes as ``'\\udcff'``), absurd numbers — and
never raises, so a hostile delivery is a refusal (401), never a provider fault (503).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from collections.abc import Mapping
from datetime import datetime

from switchboard.provider import same

_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogatepass")


def header_value(headers: Mapping[str, str], *names: str) -> str:
    """The first of ``names`` present with a non-blank value, stripped; "" when none is."""
    for name in names:
        value = headers.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def signature_matches(given: object, secret: str | None, message: bytes, *, prefix: str = "") -> bool:
    """Is ``given`` (a header value) ``prefix`` + the lower-case hex HMAC-SHA256 of ``message`` under
    ``secret``? Constant time over the digest; False for a missing or malformed value, a wrong prefix
    (``sha256=``, ``v0=``, compared exactly), upper-case hex or surrounding junk. Never raises."""
    if not isinstance(given, str) or not isinstance(secret, str) or not isinstance(message, bytes):
        return False
    value = given.strip()
    if not value.startswith(prefix):
        return False
    digest = value[len(prefix) :]
    expected = hmac.new(_bytes(secret), message, hashlib.sha256).hexdigest()
    return same(expected, digest)


def unix_seconds(value: object, *, millis: bool = False) -> float | None:
    """A Unix timestamp given as digits (a header) or a JSON number, in seconds; None if it is
    anything else (signs, spaces, exponents, NaN, booleans, more than 15 digits)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not value.isascii() or not value.isdigit() or not 1 <= len(value) <= 15:
            return None
        number = float(int(value))
    elif isinstance(value, int):
        if not 0 <= value < 10**15:
            return None
        number = float(value)
    elif isinstance(value, float):
        if not math.isfinite(value) or not 0 <= value < 1e15:
            return None
        number = value
    else:
        return None
    return number / 1000 if millis else number


def rfc3339(value: object) -> datetime | None:
    """An RFC 3339 timestamp with a zone (``2026-11-30T10:00:00Z``, ``…+01:00``), or None."""
    if not isinstance(value, str) or not 20 <= len(value) <= 40 or not value.isascii():
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def within(when: datetime | float | None, now: datetime, tolerance: float) -> bool:
    """Is ``when`` (an aware datetime, or Unix seconds) within ``tolerance`` seconds of ``now``, either
    side? False for None and for anything that cannot be compared."""
    if when is None:
        return False
    try:
        seconds = when.timestamp() if isinstance(when, datetime) else float(when)
        return abs(now.timestamp() - seconds) <= tolerance
    except (OverflowError, ValueError, OSError, TypeError):
        return False


def timestamp_within(value: object, now: datetime, tolerance: float, *, millis: bool = False) -> bool:
    """A Unix timestamp (digits or a JSON number; milliseconds with ``millis``) within the window."""
    return within(unix_seconds(value, millis=millis), now, tolerance)


def valid_id(value: object, pattern: re.Pattern[str]) -> str | None:
    """``value`` if it is a string that ``pattern`` matches whole, else None (never a repaired one)."""
    return value if isinstance(value, str) and pattern.fullmatch(value) else None


def valid_uuid(value: object) -> str | None:
    """A lower-case UUID (``2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9``), else None."""
    return valid_id(value, _UUID_RE)
