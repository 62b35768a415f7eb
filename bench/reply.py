"""Reply overhead: the time ``reply`` adds over the provider call itself.

A stand-in GitHub API (``switchboard.testing``'s ``FakeProvider``, plain HTTP on 127.0.0.1, behind
``SWITCHBOARD_GITHUB_API_URL`` with ``SWITCHBOARD_OUTBOUND_ALLOW_HTTP`` and
``SWITCHBOARD_OUTBOUND_ALLOW_CIDRS=127.0.0.0/8``) answers every comment POST at once. Three figures:

* ``provider call``: the same comment POST sent straight to the stand-in through the guarded
  outbound client (what a reply cannot avoid).
* ``send_reply`` in-process: the reply pipeline as the MCP handler calls it (checks in order, the
  pending row, the token bucket, the dial, the outcome), against a todo with a real address.
* ``reply`` over MCP: an official SDK client calling the tool on a server process, on todos minted
  by signed GitHub deliveries and claimed over MCP (the agent's view, MCP framing included).

Overhead = reply latency - provider-call latency, at p50 and p99. Each endpoint's reply bucket
holds 30 (then one every 2 s), so the replies are spread over several endpoints of one owner, one
reply per todo, all through the owner's one GitHub connection.

    .venv/bin/python -m bench.reply --db both --replies 200
"""

from __future__ import annotations

import math
import secrets
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from bench.common import (
    BenchDatabase,
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
    run,
    server_process,
    tool,
)
from bench.senders import github_bodies, github_headers
from switchboard import connections, outbound, tenancy
from switchboard.reply import send_reply
from switchboard.services import Services
from switchboard.testing import FakeProvider, claimed_todo, forge_address

# Below the bucket's burst of 30, so no call waits on the bucket.
REPLIES_PER_ENDPOINT = 25


def outbound_env(fake: FakeProvider) -> dict[str, str]:
    return {
        "SWITCHBOARD_GITHUB_API_URL": fake.base_url,
        "SWITCHBOARD_OUTBOUND_ALLOW_HTTP": "true",
        "SWITCHBOARD_OUTBOUND_ALLOW_CIDRS": "127.0.0.0/8",
    }


async def provider_calls(services: Services, fake: FakeProvider, count: int) -> Latencies:
    """The comment POST itself, through the same guarded client a reply dials with."""
    client = outbound.client_of(services)
    latencies = Latencies()
    for n in range(count + 10):
        started = time.perf_counter()
        response = await client.request(
            "POST",
            f"{fake.base_url}/repos/octocat/Hello-World/issues/1/comments",
            headers={"Authorization": "Bearer bench", "Accept": "application/vnd.github+json"},
            json_body={"body": f"provider call {n}"},
        )
        if response.status != 201:
            raise RuntimeError(f"the stand-in answered {response.status}")
        if n >= 10:  # the first ones warm the connection pool
            latencies.add(time.perf_counter() - started)
    return latencies


async def owner_with_endpoints(services: Services, count: int) -> tuple[tenancy.Owner, list[Any]]:
    human, _ = await tenancy.add_human(services.db, "bench")
    owner = tenancy.Owner(human_id=human.id)
    endpoints = []
    for n in range(count):
        endpoint, token = await tenancy.vend_endpoint(
            services.db, name=f"bench-agent-{n}", owner=owner, families=["reply"]
        )
        endpoints.append((endpoint, token))
    await connections.create_connection(
        services,
        owner,
        kind="github",
        name="bench-github",
        account_key="github.com",
        secret=f"bench-{secrets.token_hex(16)}",
    )
    return owner, endpoints


async def in_process(bench_db: BenchDatabase, fake: FakeProvider, replies: int, report: Report) -> None:
    services = make_services(
        bench_db,
        new_key(),
        github_api_url=fake.base_url,
        outbound_allow_http=True,
        outbound_allow_cidrs="127.0.0.0/8",
    )
    try:
        _, endpoints = await owner_with_endpoints(services, math.ceil((replies + 5) / REPLIES_PER_ENDPOINT))
        direct = await provider_calls(services, fake, replies)
        latencies = Latencies()
        done = 0
        for n in range(replies + 5):
            endpoint, _ = endpoints[n // REPLIES_PER_ENDPOINT]
            todo = await claimed_todo(services.db, endpoint, forge_address("github", "github.com"))
            started = time.perf_counter()
            outcome = await send_reply(services, endpoint, todo.id, f"Benchmark reply {n}: the work is done.")
            elapsed = time.perf_counter() - started
            if outcome["state"] != "sent":
                raise RuntimeError(f"reply {n} was {outcome}")
            if n >= 5:  # warm-up: first statements, the bucket rows
                latencies.add(elapsed)
                done += 1
        report_row(report, bench_db.engine, "send_reply (in-process)", direct, latencies)
    finally:
        await outbound.close_client(services)
        await services.db.dispose()


async def over_mcp(bench_db: BenchDatabase, fake: FakeProvider, replies: int, report: Report) -> None:
    key = new_key()
    services = make_services(
        bench_db,
        key,
        github_api_url=fake.base_url,
        outbound_allow_http=True,
        outbound_allow_cidrs="127.0.0.0/8",
    )
    try:
        per = REPLIES_PER_ENDPOINT
        _, endpoints = await owner_with_endpoints(services, math.ceil((replies + 5) / per))
        hooks = []
        for endpoint, _ in endpoints:
            hook = await tenancy.create_webhook(
                services.db,
                services.vault,
                services.providers,
                endpoint_slug=endpoint.slug,
                source="github",
                # Every delivery becomes work (the senders are the benchmark's own), none is held.
                trust={"allow_all": True},
            )
            hooks.append(hook)
        direct = await provider_calls(services, fake, replies)
    finally:
        await outbound.close_client(services)
        await services.db.dispose()
    latencies = Latencies()
    bodies = github_bodies(replies + 5)
    async with (
        server_process(bench_db, key, env=outbound_env(fake)) as server,
        aiohttp.ClientSession() as http,
    ):
        n = 0
        for (_endpoint, token), hook in zip(endpoints, hooks, strict=True):
            assert hook.secret is not None
            url = f"{server.base_url}/webhooks/{hook.ingest_token}"
            async with mcp_client(server.base_url, token) as client:
                for _ in range(per):
                    if n >= replies + 5:
                        break
                    event, body = bodies[n % len(bodies)]
                    async with http.post(
                        url, data=body, headers=github_headers(hook.secret, event, body)
                    ) as r:
                        answer = await r.json(content_type=None)
                    if r.status != 202:
                        raise RuntimeError(f"ingest answered {r.status}: {answer}")
                    todo_id = answer["todos"][0]["id"]
                    claimed = await tool(client, "claim", todo_id=todo_id)
                    if not claimed.get("reply_to"):
                        raise RuntimeError(f"todo {todo_id} has no reply address")
                    started = time.perf_counter()
                    outcome = await tool(client, "reply", todo_id=todo_id, text=f"Benchmark reply {n}: done.")
                    elapsed = time.perf_counter() - started
                    if outcome.get("state") != "sent":
                        raise RuntimeError(f"reply {n} was {outcome}")
                    await tool(client, "complete", todo_id=todo_id)
                    if n >= 5:
                        latencies.add(elapsed)
                    n += 1
    report_row(report, bench_db.engine, "reply over MCP", direct, latencies)


def report_row(report: Report, engine: str, path: str, direct: Latencies, reply: Latencies) -> None:
    d, r = direct.summary(), reply.summary()
    report.add(
        engine=engine,
        path=path,
        replies=r.get("n", 0),
        provider_p50_ms=d.get("p50_ms"),
        provider_p99_ms=d.get("p99_ms"),
        reply_p50_ms=r.get("p50_ms"),
        reply_p99_ms=r.get("p99_ms"),
        overhead_p50_ms=round(float(r["p50_ms"]) - float(d["p50_ms"]), 3),
        overhead_p99_ms=round(float(r["p99_ms"]) - float(d["p99_ms"]), 3),
    )


async def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--replies", type=int, default=200, help="timed replies per path (bound)")
    p.add_argument("--no-mcp", action="store_true", help="skip the server process and MCP path")
    p.add_argument("--quick", action="store_true", help="30 replies per path")
    args = p.parse_args()
    if args.quick:
        args.replies = 30
    if args.replies < 1:
        p.error("--replies must be positive")
    print(machine())
    report = Report("reply_overhead", args.json_path)
    fake = await FakeProvider("github", tls_on=False).start()
    try:
        for engine in engines_of(args.db):
            heading(f"reply overhead on {engine}: {args.replies} replies per path")
            async with private_database(engine) as bench_db:
                await in_process(bench_db, fake, args.replies, report)
            if not args.no_mcp:
                async with private_database(engine) as bench_db:
                    await over_mcp(bench_db, fake, args.replies, report)
            # The stand-in keeps every request; the benchmark does not need them.
            fake.requests.clear()
    finally:
        await fake.close()


if __name__ == "__main__":
    run(main)
