"""A connection's ``config`` nested as deep as the request parser takes is refused as bad input
(400 ``invalid_argument``), never a 500 from the database column's encoder running out of stack."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.db import Database


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


async def create_with_config(db: Database, base_url: str, depth: int) -> tuple[int, dict[str, Any]]:
    """``POST /connections`` with a config nested ``depth`` levels: the status and the answer."""
    _, token = await tenancy.add_human(db, "alice")
    body = (
        b'{"kind": "github", "name": "gh", "account_key": "github.com", "secret": "gh-test-Qm7Tz1", '
        b'"config": ' + nested(depth) + b"}"
    )
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base_url}{PREFIX}/connections", data=body, headers=headers) as r,
    ):
        return r.status, await r.json()


@pytest.mark.parametrize("depth", [*range(900, 990, 4), 65])
async def test_a_deeply_nested_config_is_refused_as_bad_input(
    db: Database, base_url: str, depth: int
) -> None:
    status, answer = await create_with_config(db, base_url, depth)
    # The parser refuses the deepest (invalid_body); the rest are the config rule's.
    assert (status, answer["error"]) in ((400, "invalid_argument"), (400, "invalid_body")), answer


async def test_a_config_within_the_depth_is_kept(db: Database, base_url: str) -> None:
    status, answer = await create_with_config(db, base_url, 63)
    assert status == 201, answer
