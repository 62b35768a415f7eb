"""Identifiers, tokens and the hashes we keep instead of tokens."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_lock = threading.Lock()
_last = 0


def new_id(prefix: str) -> str:
    """A time-ordered id (48-bit milliseconds + 80 random bits, Crockford base32), e.g. ``td_01h…``.

    Time order keeps "newest first" listings cheap and index inserts local.
    """
    global _last
    with _lock:
        value = (int(time.time() * 1000) << 80) | secrets.randbits(80)
        # Within one millisecond (or if the clock steps back) keep ids increasing in this process,
        # so "newest first" by id agrees with creation order.
        if value <= _last:
            value = _last + 1
        _last = value
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"


def new_token(prefix: str, nbytes: int = 32) -> str:
    """A bearer token such as ``sbk_…``: shown once, stored only as its SHA-256."""
    return f"{prefix}_{secrets.token_urlsafe(nbytes)}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_display(token: str) -> str:
    """The part of a token safe to show again: its prefix and first few characters."""
    head, _, rest = token.partition("_")
    return f"{head}_{rest[:6]}…"
