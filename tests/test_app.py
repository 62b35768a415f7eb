"""The composed app: what every HTTP surface (ingest, the API, /mcp) does alike. Here: bodies sent
with a ``Content-Encoding``, which Switchboard decodes itself (``switchboard/content_coding.py``),
whole or not at all."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from sqlalchemy import func, select

from switchboard import tenancy
from switchboard.models import Event, Team, Todo
from switchboard.services import Services
from switchboard.testing import MCP_ACCEPT, MCP_INITIALIZE, vend

# Some of it incompressible, so that the compressed stream is longer than what is cut off below.
PAYLOAD = json.dumps({"text": os.urandom(3000).hex(), "n": list(range(500))}).encode()
WHOLE = gzip.compress(PAYLOAD)
BAD_BODIES = {
    "junk": b"\x1f\x8bnot gzip at all",
    # A stream that stops 200 bytes short: no error from zlib, only no end (aiohttp passed it on).
    "cut": WHOLE[:-200],
    # The whole stream and then more that is not another gzip member.
    "trailing": WHOLE + b"and more",
}


@dataclass
class Surface:
    url: str
    headers: dict[str, str]
    # A body the surface accepts, and the status it answers it with.
    good: bytes
    accepted: int


async def _surface(services: Services, base_url: str, where: str) -> Surface:
    db = services.db
    human, human_token = await tenancy.add_human(db, "ada")
    endpoint, token = await vend(db, owner=tenancy.Owner(human_id=human.id))
    created = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug=endpoint.slug, source="generic"
    )
    return {
        "mcp": Surface(
            f"{base_url}/mcp",
            {"Authorization": f"Bearer {token}", "Accept": MCP_ACCEPT},
            json.dumps(MCP_INITIALIZE).encode(),
            200,
        ),
        "api": Surface(
            f"{base_url}/api/v1/teams",
            {"Authorization": f"Bearer {human_token}"},
            b'{"slug": "zipped"}',
            201,
        ),
        "ingest": Surface(f"{base_url}/webhooks/{created.ingest_token}", {}, PAYLOAD, 202),
    }[where]


async def _send(surface: Surface, body: bytes, encoding: str) -> tuple[int, Any]:
    headers = {**surface.headers, "Content-Type": "application/json", "Content-Encoding": encoding}
    async with aiohttp.ClientSession() as http, http.post(surface.url, data=body, headers=headers) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if text.startswith("{") else text


async def _stored(services: Services) -> tuple[int, int, int]:
    async with services.db.read() as s:
        return (
            await s.scalar(select(func.count()).select_from(Event)) or 0,
            await s.scalar(select(func.count()).select_from(Todo)) or 0,
            await s.scalar(select(func.count()).select_from(Team)) or 0,
        )


@pytest.mark.parametrize("bad", sorted(BAD_BODIES))
@pytest.mark.parametrize("where", ["mcp", "api", "ingest"])
async def test_a_compressed_body_that_does_not_decode_whole_is_400_json(
    services: Services, base_url: str, where: str, bad: str
) -> None:
    surface = await _surface(services, base_url, where)
    status, answer = await _send(surface, BAD_BODIES[bad], "gzip")
    assert status == 400, answer
    assert answer["error"] == "invalid_body"
    # Nothing was stored, and the server still answers.
    assert await _stored(services) == (0, 0, 0)
    status, answer = await _send(surface, gzip.compress(surface.good), "gzip")
    assert status == surface.accepted, answer


@pytest.mark.parametrize("where", ["mcp", "api", "ingest"])
async def test_a_content_encoding_not_decoded_here_is_415_json(
    services: Services, base_url: str, where: str
) -> None:
    surface = await _surface(services, base_url, where)
    status, answer = await _send(surface, surface.good, "br")
    assert status == 415 and answer["error"] == "unsupported_encoding", answer
    assert "'br'" in answer["message"]
    assert await _stored(services) == (0, 0, 0)


@pytest.mark.parametrize("where", ["mcp", "api", "ingest"])
async def test_a_small_compressed_body_too_large_once_decoded_is_413(
    services: Services, base_url: str, where: str
) -> None:
    surface = await _surface(services, base_url, where)
    # About 6 KiB on the wire, 6 MiB decoded: over every surface's cap (ingest and the API 5 MiB,
    # MCP 4 MiB), and never decoded past it.
    bomb = gzip.compress(b'{"a": "' + b"0" * (6 * 1024 * 1024) + b'"}')
    assert len(bomb) < 10_000
    status, answer = await _send(surface, bomb, "gzip")
    assert status == 413 and answer["error"] == "payload_too_large", answer
    assert await _stored(services) == (0, 0, 0)


@pytest.mark.parametrize("where", ["mcp", "api", "ingest"])
async def test_a_gzip_body_is_decoded_on_every_surface(services: Services, base_url: str, where: str) -> None:
    surface = await _surface(services, base_url, where)
    status, answer = await _send(surface, gzip.compress(surface.good), "gzip")
    assert status == surface.accepted, answer
    if where == "api":
        assert answer["team"]["slug"] == "zipped"
    if where == "mcp":
        assert answer["result"]["serverInfo"]["name"]


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        # Two gzip members in a row are one body (RFC 1952).
        ("gzip", lambda data: gzip.compress(data[:100]) + gzip.compress(data[100:])),
        ("deflate", zlib.compress),
        ("deflate", _raw_deflate),
        ("identity", lambda data: data),
        # Applied in the order named: gzip first, then deflate.
        ("gzip, deflate", lambda data: zlib.compress(gzip.compress(data))),
    ],
    ids=["gzip", "x-gzip", "two-members", "deflate", "raw-deflate", "identity", "gzip-then-deflate"],
)
async def test_a_delivery_is_stored_as_it_was_before_it_was_compressed(
    services: Services, base_url: str, encoding: str, encode: Any
) -> None:
    surface = await _surface(services, base_url, "ingest")
    status, answer = await _send(surface, encode(PAYLOAD), encoding)
    assert status == 202 and answer["created"] == 1, answer
    async with services.db.read() as s:
        assert (await s.scalars(select(Event.body))).all() == [PAYLOAD]


async def test_a_sender_whose_compressed_body_was_cut_off_is_stored_whole_when_it_sends_again(
    services: Services, base_url: str
) -> None:
    surface = await _surface(services, base_url, "ingest")
    surface.headers["X-Delivery-Id"] = "d-1"
    status, answer = await _send(surface, WHOLE[:-200], "gzip")
    assert status == 400 and answer["error"] == "invalid_body", answer
    # The delivery id was not taken by a truncated copy: the retry is the delivery, not a duplicate.
    status, answer = await _send(surface, WHOLE, "gzip")
    assert status == 202 and answer["disposition"] == "routed", answer
    async with services.db.read() as s:
        assert (await s.scalars(select(Event.body))).all() == [PAYLOAD]
