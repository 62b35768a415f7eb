"""Review: an agent that heartbeats a todo while it completes it (a heartbeat loop beside the work,
parallel tool calls, or two sessions of one endpoint) still completes it. On PostgreSQL a complete
whose statement saw the todo change under it (a heartbeat moves ``updated_at``) ran once more and
then answered ``conflict`` ("the lease was lost") although the caller still held the claim: the
todo stayed claimed until its lease ran out and was then handed out again, its work done twice.

The verbs are called as the MCP tools call them (``tools.call`` hands its arguments to these), so
that the heartbeats land while the complete's statement runs."""

from __future__ import annotations

import asyncio

from switchboard import todos
from switchboard.db import Database
from switchboard.errors import SwitchboardError
from switchboard.testing import add_todo, vend

TODOS = 40
HEARTBEATS = 3


async def test_a_complete_racing_heartbeats_of_its_own_claim_completes(db: Database) -> None:
    ep, _ = await vend(db)
    for _ in range(TODOS):
        await add_todo(db, ep)
    claimed = await todos.claim_next(db, ep, max=TODOS, fence=True)
    assert claimed is not None
    batch = claimed["todos"]
    assert len(batch) == TODOS

    async def heartbeats(todo: dict[str, str]) -> None:
        for _ in range(HEARTBEATS):
            try:
                await todos.heartbeat(db, ep, todo["id"], lease_token=todo["lease_token"])
            except SwitchboardError:  # completed meanwhile
                return

    refused: list[str] = []

    async def complete(todo: dict[str, str]) -> None:
        await asyncio.sleep(0)
        try:
            await todos.complete(db, ep, todo["id"], lease_token=todo["lease_token"])
        except SwitchboardError as exc:
            refused.append(f"{exc.code}: {exc.message}")

    await asyncio.gather(*[heartbeats(t) for t in batch], *[complete(t) for t in batch])
    assert refused == [], f"{len(refused)} of {TODOS} completes refused: {refused[:2]}"
    done = await todos.list_todos(db, ep, state="done", limit=200)
    assert len(done) == TODOS
