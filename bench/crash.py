"""Crash safety under ingest load: SIGKILL the server, then the database, and count what was kept.

Two runs, each a fixed set of signed GitHub deliveries (fresh delivery ids, chosen up front) sent by
N concurrent senders. A sender re-sends a delivery, with the same ``X-GitHub-Delivery`` and body,
until it is answered 202 (after any other answer or none at all, after a 50 ms pause), as GitHub's
redelivery would; the run ends when every delivery has its 202, at ``--seconds``, or after 100
requests per delivery.

* ``server``: the server process (``bench/serve.py``) is SIGKILLed several times under load (each
  time a further share of the deliveries has been acknowledged) and restarted on the same port;
  on SQLite and on PostgreSQL. Reported: acked / stored / duplicated, which must read
  equal / equal / 0; deliveries answered as duplicates (stored before a kill, their first 202
  lost with the process); every answer by status (-1: no answer, the connection died).
* ``database``: a private PostgreSQL cluster (``bench/pgcluster.py``: ``initdb`` on a free port in
  a temporary directory, never the machine's shared server) is SIGKILLed, postmaster and every
  child, several times under load, left down for ``--down`` seconds while the server keeps
  answering, and restarted (crash recovery). Reported: whether every delivery answered 202 is
  stored, and every other answer by status: a 503 is what a sender should get while the database
  is down; anything else (a 500, say) is listed with its count.

    .venv/bin/python -m bench.crash --db both --deliveries 1500 --kills 5
    .venv/bin/python -m bench.crash --quick
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from sqlalchemy import text

from bench.common import (
    BenchDatabase,
    Report,
    engines_of,
    free_port,
    heading,
    machine,
    make_services,
    new_key,
    parser,
    percentile,
    private_database,
    provision,
    run,
    server_env,
    start_server,
    stop_server,
)
from bench.pgcluster import private_cluster
from bench.senders import Signed, github_headers, signed_bodies
from switchboard import migrate
from switchboard.db import Database

RETRY_PAUSE = 0.05
# The count bound of a run: requests per delivery, re-sends included.
MAX_SENDS_PER_DELIVERY = 100


@dataclass
class Delivery:
    id: str
    signed: Signed
    answers: list[int] = field(default_factory=list)
    disposition: str | None = None

    @property
    def acked(self) -> bool:
        return self.disposition is not None


class Load:
    """Closed-loop senders over a fixed set of deliveries, each re-sent until answered 202."""

    def __init__(self, url: str, deliveries: list[Delivery], senders: int, seconds: float) -> None:
        self.url = url
        self.deliveries = deliveries
        self.pending = deque(deliveries)
        self.unacked = len(deliveries)
        self.senders = senders
        self.deadline = time.monotonic() + seconds
        self.max_sends = len(deliveries) * MAX_SENDS_PER_DELIVERY
        self.answers: Counter[int] = Counter()
        self.acked_count = 0
        self.progress = asyncio.Event()

    async def _send(self, http: aiohttp.ClientSession, delivery: Delivery) -> tuple[int, dict[str, Any]]:
        signed = delivery.signed
        headers = github_headers(
            "", signed.event, signed.body, delivery=delivery.id, signature=signed.signature
        )
        try:
            async with http.post(self.url, data=signed.body, headers=headers) as response:
                return response.status, await response.json(content_type=None)
        except (aiohttp.ClientError, ValueError, TimeoutError):
            return -1, {}

    async def _sender(self, http: aiohttp.ClientSession) -> None:
        while self.unacked > 0 and time.monotonic() < self.deadline and self.answers.total() < self.max_sends:
            if not self.pending:
                # Every delivery left is in flight with another sender; one may come back.
                await asyncio.sleep(0.01)
                continue
            delivery = self.pending.popleft()
            status, answer = await self._send(http, delivery)
            self.answers[status] += 1
            delivery.answers.append(status)
            if status == 202:
                delivery.disposition = str(answer.get("disposition", "?"))
                self.unacked -= 1
                self.acked_count += 1
                self.progress.set()
            else:
                self.pending.append(delivery)
                await asyncio.sleep(RETRY_PAUSE)

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as http:
            await asyncio.gather(*(self._sender(http) for _ in range(self.senders)))
        self.progress.set()

    async def acked_at_least(self, count: int) -> bool:
        """Wait until ``count`` deliveries are acknowledged; False if the load ended first."""
        while self.acked_count < count:
            if self.unacked == 0 or time.monotonic() >= self.deadline:
                return False
            self.progress.clear()
            try:
                await asyncio.wait_for(self.progress.wait(), 1.0)
            except TimeoutError:
                pass
        return True


async def kill_under_load(
    load: Load, kills: int, rng: random.Random, kill: Callable[[], Awaitable[float]]
) -> list[float]:
    """Run ``kill`` (which kills and restarts, returning the seconds it took) each time another
    share of the deliveries has been acknowledged, plus up to 0.3 s, so every kill lands under
    load. Returns the restart times."""
    restarts: list[float] = []
    share = max(1, len(load.deliveries) // (kills + 1))
    for k in range(1, kills + 1):
        if not await load.acked_at_least(share * k):
            break
        await asyncio.sleep(rng.uniform(0, 0.3))
        if load.unacked == 0:
            break
        restarts.append(await kill())
    return restarts


async def stored_deliveries(url: str) -> tuple[Counter[str], Counter[str]]:
    """(events per delivery id, todos per delivery id) in the database."""
    db = Database(url)
    try:
        async with db.read() as s:
            events = Counter(str(k) for k in (await s.scalars(text("SELECT delivery_key FROM events"))).all())
            todos = Counter(
                str(k)
                for k in (
                    await s.scalars(
                        text("SELECT e.delivery_key FROM todos t JOIN events e ON e.id = t.event_id")
                    )
                ).all()
            )
    finally:
        await db.dispose()
    return events, todos


def tally(load: Load, events: Counter[str], todos: Counter[str], restarts: list[float]) -> dict[str, Any]:
    acked = {d.id for d in load.deliveries if d.acked}
    # One webhook routed to one endpoint: a delivery is stored as one event and one todo.
    stored = {k for k, n in todos.items() if n > 0}
    duplicated = sum(n - 1 for n in events.values() if n > 1) + sum(n - 1 for n in todos.values() if n > 1)
    ordered = sorted(restarts)
    return {
        "deliveries": len(load.deliveries),
        "kills": len(restarts),
        "acked": len(acked),
        "stored": len(stored),
        "duplicated": duplicated,
        "acked_not_stored": len(acked - stored),
        "stored_not_acked": len(stored - acked),
        # Stored before a kill, the first 202 lost with it: the re-send is answered as a duplicate.
        "answered_as_duplicate": sum(1 for d in load.deliveries if d.disposition == "duplicate"),
        "resent": sum(1 for d in load.deliveries if len(d.answers) > 1),
        "answers": {str(s): n for s, n in sorted(load.answers.items())},
        "restart_p50_s": round(percentile(ordered, 0.5), 2) if ordered else None,
        "restart_max_s": round(ordered[-1], 2) if ordered else None,
    }


def make_deliveries(secret: str, count: int) -> list[Delivery]:
    """``count`` deliveries, each with its own id and its own body (see ``senders.distinct``)."""
    return [Delivery(str(uuid.uuid4()), signed) for signed in signed_bodies(secret, count)]


async def tenant_of(bench_db: BenchDatabase, key: str) -> tuple[str, str]:
    services = make_services(bench_db, key)
    try:
        tenant = await provision(services)
    finally:
        await services.db.dispose()
    assert tenant.ingest_token is not None and tenant.webhook_secret is not None
    return tenant.ingest_token, tenant.webhook_secret


async def server_kills(engine: str, args: Any, report: Report) -> None:
    heading(f"kill -9 the server under load on {engine}: {args.deliveries} deliveries, {args.kills} kills")
    rng = random.Random(args.seed)
    async with private_database(engine) as bench_db:
        key = new_key()
        token, secret = await tenant_of(bench_db, key)
        port = free_port()
        env = server_env(bench_db, key, port)
        server = await start_server(bench_db.directory, env, port=port)
        load = Load(
            f"{server.base_url}/webhooks/{token}",
            make_deliveries(secret, args.deliveries),
            args.senders,
            args.seconds,
        )

        async def kill() -> float:
            nonlocal server
            await stop_server(server, kill=True)
            started = time.perf_counter()
            server = await start_server(bench_db.directory, env, port=port)
            return time.perf_counter() - started

        try:
            sending = asyncio.create_task(load.run())
            restarts = await kill_under_load(load, args.kills, rng, kill)
            await sending
        finally:
            await stop_server(server)
        events, todos = await stored_deliveries(bench_db.url)
    figures = tally(load, events, todos, restarts)
    ok = figures["acked"] == figures["stored"] == args.deliveries and figures["duplicated"] == 0
    report.add(
        engine=engine, killed="server", senders=args.senders, **figures, verdict="ok" if ok else "FAILED"
    )


async def database_kills(args: Any, report: Report) -> None:
    heading(
        f"kill -9 a private PostgreSQL under load: {args.deliveries} deliveries, {args.kills} kills, "
        f"{args.down} s down each"
    )
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="sbbench-") as tmp:
        async with private_cluster() as cluster:
            bench_db = BenchDatabase("postgresql", cluster.url, Path(tmp))
            await migrate.upgrade_async(cluster.url)
            key = new_key()
            token, secret = await tenant_of(bench_db, key)
            port = free_port()
            server = await start_server(bench_db.directory, server_env(bench_db, key, port), port=port)
            load = Load(
                f"{server.base_url}/webhooks/{token}",
                make_deliveries(secret, args.deliveries),
                args.senders,
                args.seconds,
            )
            processes: list[int] = []

            async def kill() -> float:
                processes.append(await cluster.kill9())
                await asyncio.sleep(args.down)
                return await cluster.start()

            try:
                sending = asyncio.create_task(load.run())
                restarts = await kill_under_load(load, args.kills, rng, kill)
                await sending
            finally:
                await stop_server(server)
            events, todos = await stored_deliveries(cluster.url)
    figures = tally(load, events, todos, restarts)
    others = {s: n for s, n in figures["answers"].items() if s not in ("202", "503")}
    ok = figures["acked_not_stored"] == 0 and figures["duplicated"] == 0
    report.add(
        engine="postgresql",
        killed="database",
        senders=args.senders,
        down_s=args.down,
        processes_killed=processes,
        **figures,
        # Answers that were neither the 202 nor the 503 a sender should see while the database is down.
        other_answers=others or None,
        verdict=("ok" if ok else "FAILED") + ("" if not others else " (answers other than 202/503 seen)"),
    )


async def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--deliveries", type=int, default=1500, help="deliveries per run (bound)")
    p.add_argument("--senders", type=int, default=16, help="concurrent senders")
    p.add_argument("--kills", type=int, default=5, help="SIGKILLs per run")
    p.add_argument("--down", type=float, default=1.0, help="seconds the database stays down per kill")
    p.add_argument("--seconds", type=float, default=180.0, help="time cap per run")
    p.add_argument("--seed", type=int, default=12, help="seed of the kill jitter")
    p.add_argument("--no-server", action="store_true", help="skip the server kills")
    p.add_argument("--no-database", action="store_true", help="skip the database kills")
    p.add_argument("--quick", action="store_true", help="200 deliveries, 8 senders, 3 kills, 60 s")
    args = p.parse_args()
    if args.quick:
        args.deliveries, args.senders, args.kills, args.seconds = 200, 8, 3, 60.0
    if min(args.deliveries, args.senders, args.kills) < 1 or args.seconds <= 0 or args.down < 0:
        p.error("--deliveries, --senders, --kills and --seconds must be positive")
    print(machine())
    report = Report("crash", args.json_path)
    engines = engines_of(args.db)
    if not args.no_server:
        for engine in engines:
            await server_kills(engine, args, report)
    if not args.no_database and "postgresql" in engines:
        await database_kills(args, report)
    if any(r.get("verdict", "ok") != "ok" for r in report.rows):
        print("\nsome run did not keep every acknowledged delivery exactly once (see the verdicts)")


if __name__ == "__main__":
    run(main)
