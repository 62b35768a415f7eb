"""Identifiers, tokens and the hashes we keep instead of tokens."""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import threading
import time

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _CROCKFORD.encode())
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
    # 26 characters of 5 bits: the value in the low 130 bits of 20 bytes, whose standard base32
    # (in C) is 32 characters, the first 6 always "A" (zero); then the alphabet swapped. A loop
    # over the 26 characters in Python was a fiftieth of a delivery's CPU (bench/README.md).
    text = base64.b32encode(value.to_bytes(20, "big"))[6:].translate(_TO_CROCKFORD)
    return f"{prefix}_{text.decode('ascii')}"


def new_token(prefix: str, nbytes: int = 32) -> str:
    """A bearer token such as ``sbk_…``: shown once, stored only as its SHA-256."""
    return f"{prefix}_{secrets.token_urlsafe(nbytes)}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_display(token: str) -> str:
    """The part of a token safe to show again: its prefix and first few characters."""
    head, _, rest = token.partition("_")
    return f"{head}_{rest[:6]}…"
