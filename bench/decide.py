"""Ingest's two halves in process, no HTTP: the CPU a delivery spends being decided, and being stored.

``bench.ingest`` measures what a sender sees and ``bench.profile`` where the server's time goes
under that load; both include aiohttp, the sockets and the sampler. This script calls the two
halves of ``switchboard.ingest`` directly, on the app ``switchboard serve`` builds, over a private
database, and reads the process's CPU clock around each:

* **decide**: ``ingest._decide`` (verify, the delivery keys, housekeeping, the reply address and
  echo check, the event row, intake), ``--concurrency`` deliveries at a time so that their echo
  reads are shared as under load;
* **store**: the same deliveries handed to the group-commit writer (``IngestWriter.submit``),
  ``--concurrency`` at a time, so each batch holds that many.

Each round decides and stores ``--deliveries`` fresh signed GitHub deliveries (the bodies and
headers of ``bench.senders``); the first round warms up and is not counted. The figures are µs of
this process's CPU a delivery (its threads included: SQLite's writer works on one), the median and
the least of the rounds. Use it to weigh a change to one half without the noise of HTTP and of a
second process; runs minutes apart on these machines still differ by a few percent, so compare
revisions in alternating runs.

    .venv/bin/python -m bench.decide --db postgresql
    .venv/bin/python -m bench.decide --db sqlite --rounds 9 --concurrency 32
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from bench.common import (
    Report,
    Tenant,
    engines_of,
    heading,
    machine,
    make_services,
    new_key,
    parser,
    private_database,
    provision,
    run,
)
from bench.senders import github_bodies, github_headers
from switchboard import ingest
from switchboard.app import make_app
from switchboard.db import utcnow
from switchboard.ids import token_hash
from switchboard.ingest_config import WebhookConfig
from switchboard.services import Services


async def measure(engine: str, rounds: int, deliveries: int, concurrency: int, report: Report) -> None:
    heading(f"ingest in process on {engine}: {rounds} rounds of {deliveries}, {concurrency} at a time")
    async with private_database(engine) as bench_db:
        services = make_services(bench_db, new_key())
        tenant = await provision(services)
        runner = web.AppRunner(make_app(services))
        await runner.setup()
        try:
            # The webhook's first verified delivery binds its instance, which changes its
            # configuration: decided once here, so that no round's deliveries come back ``stale``.
            [(first, body)] = _signed(runner.app, tenant, 1)
            await ingest._decide(first, services, await _config(runner.app, services, tenant), body, utcnow())
            decide: list[float] = []
            store: list[float] = []
            for round_ in range(rounds + 1):
                decided_us, stored_us = await one_round(runner.app, services, tenant, deliveries, concurrency)
                if round_:  # the first round warms up
                    decide.append(decided_us)
                    store.append(stored_us)
            report.add(
                engine=engine,
                rounds=rounds,
                deliveries=deliveries,
                concurrency=concurrency,
                decide_us=round(statistics.median(decide), 1),
                decide_min_us=round(min(decide), 1),
                store_us=round(statistics.median(store), 1),
                store_min_us=round(min(store), 1),
            )
        finally:
            await runner.cleanup()
            await services.sandbox.close()
            await services.db.dispose()


async def one_round(
    app: web.Application, services: Services, tenant: Tenant, deliveries: int, concurrency: int
) -> tuple[float, float]:
    """Decide, then store, ``deliveries`` fresh ones: µs of process CPU a delivery for each half."""
    requests = _signed(app, tenant, deliveries)
    config = await _config(app, services, tenant)
    decided: list[Any] = []
    started = time.process_time()
    for n in range(0, deliveries, concurrency):
        decided += await asyncio.gather(
            *(
                ingest._decide(r, services, config, body, utcnow())
                for r, body in requests[n : n + concurrency]
            )
        )
    between = time.process_time()
    writer = app[ingest.INGEST_WRITER]
    for n in range(0, deliveries, concurrency):
        results = await asyncio.gather(*(writer.submit(d.rows) for d in decided[n : n + concurrency]))
        if any(result.status != "stored" for result in results):
            raise RuntimeError(f"deliveries not stored: {sorted({r.status for r in results})}")
    ended = time.process_time()
    return (between - started) / deliveries * 1e6, (ended - between) / deliveries * 1e6


def _signed(app: web.Application, tenant: Tenant, count: int) -> list[tuple[web.Request, bytes]]:
    """``count`` fresh signed GitHub deliveries to the tenant's webhook, as requests and bodies."""
    assert tenant.ingest_token is not None and tenant.webhook_secret is not None
    path, secret = f"/webhooks/{tenant.ingest_token}", tenant.webhook_secret
    return [
        (make_mocked_request("POST", path, headers=github_headers(secret, event, body), app=app), body)
        for event, body in github_bodies(count)
    ]


async def _config(app: web.Application, services: Services, tenant: Tenant) -> WebhookConfig:
    """The webhook as it is in the database now, as ingest's cache would hand it to ``_decide``."""
    assert tenant.ingest_token is not None
    config = await app[ingest.INGEST_CONFIGS].read(services.db, token_hash(tenant.ingest_token))
    if config is None:
        raise RuntimeError("the bench webhook is gone")
    return config


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--rounds", type=int, default=7, help="counted rounds, after one that warms up (default 7)"
    )
    p.add_argument("--deliveries", type=int, default=2000, help="deliveries a round (default 2000)")
    p.add_argument(
        "--concurrency", type=int, default=16, help="deliveries decided and stored at a time (default 16)"
    )
    args = p.parse_args()
    for name in ("rounds", "deliveries", "concurrency"):
        if getattr(args, name) <= 0:
            p.error(f"--{name} must be positive")
    if args.concurrency > 256:
        p.error("--concurrency must be at most 256 (the writer's largest batch)")
    report = Report("decide", args.json_path)

    async def go() -> None:
        print(machine(), flush=True)
        for engine in engines_of(args.db):
            await measure(engine, args.rounds, args.deliveries, args.concurrency, report)

    run(go)


if __name__ == "__main__":
    main()
