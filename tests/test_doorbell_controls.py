"""Review: a doorbell carries no control characters. A todo's title is cleaned at ingest, but an
operator's todo (the API, ``switchboard todo push``) or one stored by another path keeps ESC, BEL
or a C1 control in its title: the doorbell passed them on, so an escape sequence reached the
agent's session (and the terminal showing it) inside text marked as data."""

from __future__ import annotations

import asyncio
import unicodedata

from switchboard import todos
from switchboard.db import Database
from switchboard.mcp import doorbell
from switchboard.models import Endpoint, Todo
from switchboard.services import Services
from switchboard.testing import connect, vend

HOSTILE = "Deploy\x1b[2J\x1b]0;pwned\x07 now\x9b31m\x7f\x00done"


def _controls(text: str) -> list[str]:
    return [c for c in text if unicodedata.category(c) == "Cc"]


def test_ring_params_carry_no_control_character() -> None:
    todo = Todo(
        id="td_1", queue="default", source="generic", kind="push\x1b[0m\x08", title=HOSTILE, reply_to=None
    )
    params = doorbell.ring_params(todo)
    for value in [params["content"], *params["meta"].values()]:
        assert _controls(value) == [], repr(value)
    # The words stay, as data.
    assert "Deploy" in params["content"] and "done" in params["content"]


async def _listening(bell: doorbell.Doorbell, endpoint: Endpoint) -> None:
    for _ in range(100):
        if any(s.endpoint_id == endpoint.id and s.stream_open for s in bell.sessions.values()):
            await asyncio.sleep(doorbell.STREAM_SETTLE_SECONDS * 2)
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the session never opened its notification stream")


async def test_an_operator_title_with_escapes_rings_without_them(
    db: Database, services: Services, base_url: str, bell: doorbell.Doorbell
) -> None:
    ep, token = await vend(db)
    # PostgreSQL text cannot hold NUL: the title as an operator's todo could carry it elsewhere.
    title = HOSTILE.replace("\x00", " ")
    async with connect(base_url, token, ep) as agent:
        await _listening(bell, ep)
        # As `switchboard todo push` and the operator API make it.
        todo = await todos.push(db, endpoint_slug=ep.slug, title=title)
        assert "\x1b" in todo.title  # stored as given
        await services.todos_created([todo.id])
        ring = await agent.listener.next_ring()
        assert ring.meta["todo_id"] == todo.id
        for value in [ring.content, *ring.meta.values()]:
            assert _controls(value) == [], repr(value)
