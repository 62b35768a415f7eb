"""Ids: time-ordered, unique, and never shared with a forked child (their random bits are read
from the OS in blocks, which a fork would otherwise copy)."""

from __future__ import annotations

import os
import time

from switchboard.ids import _CROCKFORD, new_id


def test_ids_are_unique_and_time_ordered_across_many_blocks() -> None:
    ids = [new_id("td") for _ in range(5_000)]  # more than ten blocks of random bits
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(i.startswith("td_") and len(i) == 29 for i in ids)


def test_a_forked_child_mints_ids_of_its_own() -> None:
    new_id("td")  # the parent holds a block of random bits
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, then straight out
        os.write(write, " ".join(new_id("td") for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode().split()
    parent = [new_id("td") for _ in range(50)]
    # Minted in the same milliseconds, the ids differ only by their random bits.
    assert len(child) == 50
    assert not {i[-16:] for i in child} & {i[-16:] for i in parent}


def test_an_id_is_its_millisecond_and_random_bits_in_crockford_base32() -> None:
    before = int(time.time() * 1000)
    made = new_id("td")
    after = int(time.time() * 1000)
    prefix, _, body = made.partition("_")
    assert prefix == "td" and len(body) == 26 and set(body) <= set(_CROCKFORD)
    value = 0
    for char in body:
        value = value * 32 + _CROCKFORD.index(char)
    # The top 48 of the 128 bits are the millisecond it was made (or one after the last id's).
    assert before <= value >> 80 <= after + 1
