"""Doorbell latency: from a signed delivery's POST to the ``notifications/claude/channel`` ring
arriving at an official ``mcp`` SDK client session over Streamable HTTP.

A server process (``bench/serve.py``) on 127.0.0.1; one agent session (the SDK ``Client``, bearer
``sbk_`` token, stateful with the GET notification stream) listening; one sender POSTs signed GitHub
deliveries one at a time. For each delivery: the 202 time (ingest acknowledgement) and the time the
ring naming the minted todo reached the client's notification handler, both measured from the
moment the POST started. A ring that does not arrive within ``--ring-timeout`` counts as missed
(a hint only: the todo is still on the queue).

    .venv/bin/python -m bench.doorbell --db both --deliveries 200
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from mcp.client.extension import ClientExtension, NotificationBinding
from pydantic import BaseModel, ConfigDict

from bench.common import (
    Latencies,
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
from bench.senders import github_bodies, github_headers

CHANNEL_METHOD = "notifications/claude/channel"


class ChannelParams(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str
    meta: dict[str, Any] = {}


class ChannelListener(ClientExtension):
    """Records when each ring arrives, keyed by the todo it names (the SDK drops notification
    methods it does not know unless a binding registers them)."""

    identifier = "dev.switchboard/bench-channel"

    def __init__(self) -> None:
        self.heard: dict[str, float] = {}
        self.arrived = asyncio.Event()

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [NotificationBinding(method=CHANNEL_METHOD, params_type=ChannelParams, handler=self._heard)]

    async def _heard(self, params: ChannelParams) -> None:
        todo_id = str(params.meta.get("todo_id", ""))
        self.heard.setdefault(todo_id, time.perf_counter())
        self.arrived.set()

    async def wait_for(self, todo_id: str, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while todo_id not in self.heard:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.arrived.clear()
            if todo_id in self.heard:
                break
            try:
                await asyncio.wait_for(self.arrived.wait(), left)
            except TimeoutError:
                return None
        return self.heard[todo_id]


async def measure(engine: str, deliveries: int, ring_timeout: float, report: Report) -> None:
    heading(f"doorbell on {engine}: {deliveries} signed deliveries, one listening session")
    async with private_database(engine) as bench_db:
        key = new_key()
        services = make_services(bench_db, key)
        try:
            tenant = await provision(services, families=())
        finally:
            await services.db.dispose()
        assert tenant.ingest_token is not None and tenant.webhook_secret is not None
        async with server_process(bench_db, key) as server:
            url = f"{server.base_url}/webhooks/{tenant.ingest_token}"
            listener = ChannelListener()
            async with aiohttp.ClientSession() as http:
                async with mcp_client(server.base_url, tenant.endpoint_token, [listener]) as client:
                    tools = await client.list_tools()
                    assert any(t.name == "claim_next" for t in tools.tools)
                    ack = Latencies()
                    ring = Latencies()
                    missed = 0
                    bodies = github_bodies(deliveries + 1)
                    # The first delivery also waits for the GET stream to be registered.
                    for n in range(deliveries + 1):
                        event, body = bodies[n % len(bodies)]
                        started = time.perf_counter()
                        async with http.post(
                            url, data=body, headers=github_headers(tenant.webhook_secret, event, body)
                        ) as r:
                            answer = await r.json(content_type=None)
                            acked = time.perf_counter()
                        if r.status != 202 or not answer.get("todos"):
                            raise RuntimeError(f"ingest answered {r.status}: {answer}")
                        todo_id = answer["todos"][0]["id"]
                        heard = await listener.wait_for(todo_id, ring_timeout)
                        if n == 0:
                            continue
                        ack.add(acked - started)
                        if heard is None:
                            missed += 1
                        else:
                            ring.add(heard - started)
                        # Drain it so the queue stays as small as a working agent keeps it.
                        await tool(client, "claim", todo_id=todo_id)
                        await tool(client, "complete", todo_id=todo_id)
        report.add(
            engine=engine,
            deliveries=deliveries,
            missed_rings=missed,
            **{f"ack_{k}": v for k, v in ack.summary().items() if k != "n"},
            **{f"ring_{k}": v for k, v in ring.summary().items()},
        )


async def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--deliveries", type=int, default=200, help="deliveries, sent one at a time (bound)")
    p.add_argument("--ring-timeout", type=float, default=10.0, help="seconds to wait for each ring")
    args = p.parse_args()
    if args.deliveries < 1 or args.ring_timeout <= 0:
        p.error("--deliveries and --ring-timeout must be positive")
    print(machine())
    report = Report("doorbell", args.json_path)
    for engine in engines_of(args.db):
        await measure(engine, args.deliveries, args.ring_timeout, report)


if __name__ == "__main__":
    run(main)
