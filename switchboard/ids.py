"""Identifiers, tokens and the hashes we keep instead of tokens."""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import time

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
# Every two characters, by the 10 bits they encode; the shifts of the 13 pairs, highest first.
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
_SHIFTS = range(120, -10, -10)
_lock = threading.Lock()
_last = 0
# The ids' random bits are read from the OS in blocks of 400 ids' worth: one system call each
# (getrandom, a few microseconds on a virtual machine) cost more than the rest of an id. The
# block is dropped in a forked child, which would otherwise mint its parent's next ids.
_RANDOM_BYTES = 10
_BLOCK = _RANDOM_BYTES * 400
_random = memoryview(b"")


def _forget_random() -> None:
    global _random
    _random = memoryview(b"")


os.register_at_fork(after_in_child=_forget_random)


def new_id(prefix: str) -> str:
    """A time-ordered id (48-bit milliseconds + 80 random bits, Crockford base32), e.g. ``td_01h…``.

    Time order keeps "newest first" listings cheap and index inserts local.
    """
    global _last, _random
    with _lock:
        if len(_random) < _RANDOM_BYTES:
            _random = memoryview(os.urandom(_BLOCK))
        bits, _random = int.from_bytes(_random[:_RANDOM_BYTES]), _random[_RANDOM_BYTES:]
        value = (int(time.time() * 1000) << 80) | bits
        # Within one millisecond (or if the clock steps back) keep ids increasing in this process,
        # so "newest first" by id agrees with creation order.
        if value <= _last:
            value = _last + 1
        _last = value
    # 26 characters of 5 bits, taken two at a time (13 look-ups of 10 bits): 1.4 µs where one
    # character at a time took 3.4 (an id or two per delivery, bench/HISTORY.md 2026-12-04).
    return f"{prefix}_{''.join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])}"


def new_token(prefix: str, nbytes: int = 32) -> str:
    """A bearer token such as ``sbk_…``: shown once, stored only as its SHA-256."""
    return f"{prefix}_{secrets.token_urlsafe(nbytes)}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_display(token: str) -> str:
    """The part of a token safe to show again: its prefix and first few characters."""
    head, _, rest = token.partition("_")
    return f"{head}_{rest[:6]}…"
