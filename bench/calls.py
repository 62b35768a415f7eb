"""One agent's calls over MCP, one at a time: what each costs the server, the database and the client.

The claim rows of ``bench/claim.py`` run 16 agents on two cores shared by the clients, the server
and PostgreSQL, so a rate there mixes every process's cost with the contention between them. Here
one SDK client session calls one tool at a time, and the CPU each process spent is divided by the
calls: a split of the server's cost that the machine's load moves much less.

Rows, interleaved round by round (each kind once per round, Switchboard and the floor alike, the
median of the rounds reported):

* ``refused``: ``complete`` without its ``todo_id``, answered with the tool error
  ``invalid_argument``: the whole MCP path (HTTP, the endpoint's token from memory, the session,
  the request's checks against the SDK's protocol surface, since 2026-12-03 in the request's own
  task rather than the SDK's dispatcher (``switchboard/mcp/tool_calls.py``), the arguments
  checked) and no statement.
* ``empty claim``: ``claim_next`` on an endpoint with no pending todo: the MCP path plus one claim
  statement that finds nothing.
* ``cycle``: ``claim_next`` then ``complete`` of the todo it brought, per call (the agent's loop).
* ``floor cycle``: the same loop against ``bench/bare_mcp.py`` (the SDK serving two no-op tools of
  those names, no store), per call.
* ``floor cycle, waiting``: the floor again, each call waiting first, doing nothing, so that it
  takes as long as a Switchboard call (the wait is searched for before the rounds;
  ``BENCH_FLOOR_DELAY_MS``). On this machine a process that waits pays for it: each sleep and wake
  costs CPU, in the server and in the client, so this row separates what Switchboard's waits for
  its database cost from the work it does.

    .venv/bin/python -m bench.calls --db both --calls 1000 --rounds 3
"""

from __future__ import annotations

import contextlib
import functools
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bulk import analyze, bulk_pending
from bench.common import (
    Report,
    engines_of,
    heading,
    machine,
    make_services,
    mcp_client,
    new_key,
    parser,
    private_database,
    provision,
    run,
    server_process,
    tool,
)
from bench.cpu import CpuMeter

# Untimed calls of each kind before the first round: statement caches, pools, imports.
WARM_UP = 50
# Cycles timed on each side to find how much longer a Switchboard call takes than a floor call.
CALIBRATION = 100
WAITING = "floor cycle, waiting"
# Servers tried while searching for the waiting floor's delay.
SEARCH_STEPS = 6


async def refused(client: Any) -> None:
    result = await client.call_tool("complete", {})
    if not result.is_error:
        raise RuntimeError("complete without todo_id was not refused")


async def cycle(client: Any) -> None:
    got = await tool(client, "claim_next")
    if "todo" not in got:
        raise RuntimeError("the backlog ran out: raise it or lower --calls")
    await tool(client, "complete", todo_id=got["todo"]["id"], result={"ok": True})


async def timed(
    call: Callable[[], Awaitable[None]], calls: int, per_call: int, meter: CpuMeter
) -> dict[str, float]:
    """``calls`` awaits of ``call`` (each ``per_call`` tool calls); CPU and wall time per tool call."""
    meter.start()
    started = time.perf_counter()
    for _ in range(calls):
        await call()
    wall = time.perf_counter() - started
    n = calls * per_call
    return {**meter.per(n, "call"), "wall_ms_per_call": round(wall * 1000 / n, 3)}


def medians(samples: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(s[key] for s in samples), 3) for key in samples[0]}


async def _floor_wall(log_dir: Path, delay_ms: float) -> float:
    """Wall time per call of a floor whose calls wait ``delay_ms`` (a short-lived server)."""
    env = {"BENCH_FLOOR_DELAY_MS": f"{delay_ms:.3f}"}
    async with (
        server_process(None, None, module="bench.bare_mcp", log_dir=log_dir, env=env) as server,
        mcp_client(server.base_url, "bare") as client,
    ):
        for _ in range(WARM_UP // 2):
            await cycle(client)
        probe = await timed(functools.partial(cycle, client), CALIBRATION // 2, 2, CpuMeter())
        return probe["wall_ms_per_call"]


async def waiting_delay(log_dir: Path, target_ms: float, floor_ms: float) -> float:
    """The wait that makes a floor call take ``target_ms`` (Switchboard's wall time per call). An
    asyncio sleep rounds up to the event loop's timer resolution, so it is searched for (bisection
    between no wait and the whole gap, whose wall is at least the target), not computed."""
    low, high = 0.0, max(0.0, target_ms - floor_ms)
    best, best_miss = high, math.inf
    for _ in range(SEARCH_STEPS):
        delay = (low + high) / 2
        wall = await _floor_wall(log_dir, delay)
        if abs(wall - target_ms) < best_miss:
            best, best_miss = delay, abs(wall - target_ms)
        if best_miss <= 0.05 * target_ms:
            break
        low, high = (delay, high) if wall < target_ms else (low, delay)
    return best


async def measure(engine: str, calls: int, rounds: int, report: Report) -> None:
    heading(f"one agent's calls over MCP on {engine}: {calls} calls a row, {rounds} rounds")
    async with private_database(engine) as bench_db:
        key = new_key()
        services = make_services(bench_db, key)
        try:
            busy = await provision(services, handle="calls", source=None, families=())
            idle = await provision(services, handle="idle", source=None, families=())
            # Every cycle takes one todo: the rounds', the warm-up's and the calibration's.
            backlog = calls * rounds + WARM_UP + CALIBRATION
            await bulk_pending(services.db, busy.endpoint.id, busy.queue, backlog)
            if not services.db.is_sqlite:
                await analyze(services.db)
        finally:
            await services.db.dispose()
        postgres = engine == "postgresql"
        with tempfile.TemporaryDirectory(prefix="sbbench-") as log_dir:
            async with contextlib.AsyncExitStack() as stack:
                server = await stack.enter_async_context(server_process(bench_db, key))
                bare = await stack.enter_async_context(
                    server_process(None, None, module="bench.bare_mcp", log_dir=Path(log_dir))
                )
                agent = await stack.enter_async_context(mcp_client(server.base_url, busy.endpoint_token))
                idle_agent = await stack.enter_async_context(mcp_client(server.base_url, idle.endpoint_token))
                floor_agent = await stack.enter_async_context(mcp_client(bare.base_url, "bare"))

                async def empty() -> None:
                    got = await tool(idle_agent, "claim_next")
                    if not got.get("empty"):
                        raise RuntimeError("the idle endpoint had a todo")

                warm: list[Callable[[], Awaitable[None]]] = [
                    functools.partial(refused, agent),
                    empty,
                    functools.partial(cycle, agent),
                    functools.partial(cycle, floor_agent),
                ]
                for warm_call in warm:
                    for _ in range(WARM_UP // 2):
                        await warm_call()
                ours = await timed(lambda: cycle(agent), CALIBRATION // 2, 2, CpuMeter())
                floor = await timed(lambda: cycle(floor_agent), CALIBRATION // 2, 2, CpuMeter())
                target, floor_wall = ours["wall_ms_per_call"], floor["wall_ms_per_call"]
                delay = await waiting_delay(Path(log_dir), target, floor_wall)
                waiting = await stack.enter_async_context(
                    server_process(
                        None,
                        None,
                        module="bench.bare_mcp",
                        log_dir=Path(log_dir),
                        env={"BENCH_FLOOR_DELAY_MS": f"{delay:.3f}"},
                    )
                )
                waiting_agent = await stack.enter_async_context(mcp_client(waiting.base_url, "bare"))
                for _ in range(WARM_UP // 2):
                    await cycle(waiting_agent)
                pid, bare_pid = server.process.pid, bare.process.pid
                kinds: list[tuple[str, str, Callable[[], Awaitable[None]], int, int, bool]] = [
                    ("switchboard", "refused", lambda: refused(agent), 1, pid, postgres),
                    ("switchboard", "empty claim", empty, 1, pid, postgres),
                    ("switchboard", "cycle", lambda: cycle(agent), 2, pid, postgres),
                    ("bare MCP SDK", "floor cycle", lambda: cycle(floor_agent), 2, bare_pid, False),
                    ("bare MCP SDK", WAITING, lambda: cycle(waiting_agent), 2, waiting.process.pid, False),
                ]
                samples: dict[str, list[dict[str, float]]] = {kind: [] for _, kind, *_ in kinds}
                for _ in range(rounds):
                    for _, kind, call, per_call, server_pid, database in kinds:
                        meter = CpuMeter(server_pid, database=database)
                        samples[kind].append(await timed(call, calls // per_call, per_call, meter))
                for server_name, kind, *_ in kinds:
                    report.add(
                        engine=engine,
                        server=server_name,
                        kind=kind,
                        calls=calls,
                        rounds=rounds,
                        **({"delay_ms": round(delay, 3)} if kind == WAITING else {}),
                        **medians(samples[kind]),
                    )


async def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=1000, help="tool calls a row takes per round")
    p.add_argument("--rounds", type=int, default=3, help="rounds (the median is reported)")
    p.add_argument("--quick", action="store_true", help="100 calls, 1 round")
    args = p.parse_args()
    if args.quick:
        args.calls, args.rounds = 100, 1
    if args.calls < 2 or args.rounds < 1:
        p.error("--calls must be at least 2 and --rounds at least 1")
    print(machine())
    report = Report("mcp_calls", args.json_path)
    for engine in engines_of(args.db):
        await measure(engine, args.calls, args.rounds, report)


if __name__ == "__main__":
    run(main)
