"""Ingest: throughput and acknowledgement latency of signed GitHub deliveries over real HTTP.

A server process (``bench/serve.py``, the app as ``switchboard serve`` builds it) on 127.0.0.1; N
concurrent closed-loop senders POST real octokit payloads signed with the webhook's secret, each
with a fresh ``X-GitHub-Delivery``. Latency is from the request leaving the sender to the 202 being
read. After the run the todo ids of every 202 are looked up in the database (an acknowledged
delivery is durable), and the server's peak RSS is read from ``/proc``.

Each row also reports the server's own CPU time per answered request (``/proc``'s user + system
time of all its threads and of its child processes, the rule workers, over the row): unlike
requests per second, it hardly moves when other work shares the machine, so it compares two runs on
a busy machine. It leaves out the PostgreSQL backends' time (their own processes) and the senders'.

``--rules 0,10`` (the default) measures the same webhook with no routing rules and with ten
(``RULES``: nine that a fixture delivery walks past, the tenth queueing it as before), so the cost of
intake's rule sandbox shows against the plain path in the same invocation.

The anchor, in the same invocation: ``bench/bare.py``, a bare aiohttp handler that reads the body
and answers 202, run in its own process the same way, under the same senders. It is measured with
every available sender driver (``--driver``: Python aiohttp tasks, or ``wrk`` with
``bench/wrk_signed.lua``), so the table also shows how far each driver itself can go: a
Switchboard row far below the bare row of its own driver is not limited by its senders.

``--processes 1,2`` also measures several server processes on one PostgreSQL database, the
production topology of the README ("several processes"), the senders spread evenly over them as a
load balancer would (``senders.spread_blast``); the bare anchor is measured with as many processes,
so every share compares like with like. SQLite is one process: its rows are measured with one.

``--rounds N`` runs all of it (the anchors, then every engine's rows) N times over, so that the
anchors and the rows alternate, and ends with each row's share of its own round's ceiling, round by
round, and their median (``shares_by_round``). These machines change speed within minutes, and the
ceiling's few seconds and a Switchboard row's may fall in different phases: one round's share can
move by a tenth either way, the median of several far less.

    .venv/bin/python -m bench.ingest --db both --senders 1,8,32 --deliveries 2000
    .venv/bin/python -m bench.ingest --quick
    .venv/bin/python -m bench.ingest --db postgresql --senders 32 --rules 0 --rounds 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from sqlalchemy import func, select, text

from bench.common import (
    Report,
    ServerProcess,
    engines_of,
    heading,
    machine,
    make_services,
    new_key,
    parser,
    positive_ints,
    private_database,
    provision,
    run,
    server_processes,
)
from bench.cpu import CpuMeter, MachineSampler
from bench.senders import DRIVERS, Signed, blast, signed_bodies, spread_blast, wrk_available
from switchboard.db import Database
from switchboard.intake_config import Caller, set_rules
from switchboard.models import Todo

CEILING = "bare aiohttp"
STORE_FLOOR = "bare store"
STORE_SECRET = "bench-bare-store-secret"


# Ten rules in the worst order for cost: each delivery walks past the nine that ask about fields of
# many event shapes (none matches the fixture deliveries) before the tenth queues it, so every
# delivery is evaluated by all ten and still becomes one todo (acked = stored holds as without rules).
RULES: list[dict[str, Any]] = [
    {"id": f"skip-{n}", "expr": expr, "action": {"type": "drop"}}
    for n, expr in enumerate(
        [
            '.event == "release.deleted"',
            ".payload.sender.login == $params.bot",
            '(.payload.issue.labels // []) | any(.name == "wontfix")',
            ".payload.repository.archived == true",
            '.headers["x-github-event"] == "star"',
            '(.payload.comment.body // "") | test("^/ignore")',
            '.actor.sender == "dependabot[bot]"',
            '(.payload.pull_request.draft // false) and .event == "pull_request.edited"',
            '.subject == null and .event == "fork"',
        ]
    )
] + [{"id": "everything", "expr": "true", "action": {"type": "queue"}}]


def rule_set(count: int) -> dict[str, Any] | None:
    """``count`` rules (the last always queues), or None for none."""
    if count == 0:
        return None
    return {"rules": RULES[: count - 1] + RULES[-1:], "params": {"bot": "our-bot"}}


def rule_counts(value: str) -> list[int]:
    """``"0,10"`` → ``[0, 10]``; a clear argparse error for anything else."""
    try:
        counts = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a comma list of integers") from None
    if not counts or any(not 0 <= n <= len(RULES) for n in counts):
        raise argparse.ArgumentTypeError(f"{value!r}: each rule count must be 0 to {len(RULES)}")
    return counts


def row(result: dict[str, Any]) -> dict[str, Any]:
    """A blast's figures without the id list (that goes to the stored check, not the report)."""
    return {k: v for k, v in result.items() if k != "todo_ids"}


async def timed_row(
    servers: list[ServerProcess],
    http: aiohttp.ClientSession,
    urls: list[str],
    driver: str,
    bodies: list[Signed],
    senders: int,
    deliveries: int,
    seconds: float,
    *,
    database: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One measured row: ``senders`` against ``urls`` (spread over the servers), with the servers'
    CPU (and PostgreSQL's with ``database``) over it. Returns the blast's result (with its todo
    ids) and the row's figures for the report."""
    meter = _meter(servers, database=database)
    machine = MachineSampler(tuple(s.process.pid for s in servers))
    meter.start()
    machine.start()
    result = await spread_blast(
        driver, http, urls, bodies, senders=senders, total=deliveries, seconds=seconds
    )
    busy = await machine.stop()
    figures = {
        "driver": driver,
        "senders": senders,
        **row(result),
        **meter.per(int(result["sent"]), "request"),
        **busy,
        **_machine_per_request(busy, result),
        "server_peak_rss_mib": round(max(s.peak_rss_mib() or 0 for s in servers), 1),
    }
    return result, figures


async def ceiling(
    drivers: list[str],
    senders: list[int],
    deliveries: int,
    seconds: float,
    report: Report,
    processes: int = 1,
) -> None:
    """The bare handler under each driver and sender count (its own bounds: it answers in well
    under a millisecond, so Switchboard's delivery count would time nothing), in ``processes``
    processes with the senders spread over them."""
    heading(f"ceiling: {CEILING} answering 202, senders {senders}, drivers {drivers}, processes {processes}")
    bodies = signed_bodies("bench-ceiling-secret")
    with tempfile.TemporaryDirectory(prefix="sbbench-") as log_dir:
        async with (
            server_processes(processes, None, None, module="bench.bare", log_dir=Path(log_dir)) as servers,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
        ):
            urls = [f"{server.base_url}/webhooks/bare" for server in servers]
            for url in urls:
                await blast("python", http, url, bodies, senders=4, total=200, seconds=30)
            for driver in drivers:
                for n in senders:
                    _, figures = await timed_row(servers, http, urls, driver, bodies, n, deliveries, seconds)
                    report.add(engine="none", server=CEILING, processes=processes, **figures)


SHARES = "share of the ceiling, round by round"


def shares_by_round(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary per Switchboard row (engine, processes, rules, sender, senders) measured in
    several rounds: its deliveries/s over the ceiling row of the same round (same sender, senders
    and processes), each round's, and their median."""
    ceilings = {
        (r["round"], r["driver"], r["senders"], r["processes"]): float(r["per_second"])
        for r in rows
        if r.get("server") == CEILING and "round" in r
    }
    shares: dict[tuple[str, int, int, str, int], list[float]] = {}
    for r in rows:
        if r.get("server") != "switchboard" or "per_second" not in r or "round" not in r:
            continue
        top = ceilings.get((r["round"], r["driver"], r["senders"], r["processes"]))
        if top:
            key = (r["engine"], r["processes"], r["rules"], r["driver"], r["senders"])
            shares.setdefault(key, []).append(float(r["per_second"]) / top)
    return [
        {
            "summary": SHARES,
            "engine": engine,
            "processes": processes,
            "rules": rules,
            "driver": driver,
            "senders": senders,
            "shares_pct": [round(100 * share, 1) for share in found],
            "median_share_pct": round(100 * statistics.median(found), 1),
        }
        for (engine, processes, rules, driver, senders), found in shares.items()
    ]


def _machine_per_request(busy: dict[str, float], result: dict[str, Any]) -> dict[str, float]:
    """The whole machine's CPU a request while loaded: its busy cores over the row's rate."""
    rate = float(result.get("per_second") or 0)
    if "machine_busy_pct" not in busy or rate <= 0:
        return {}
    cores = busy["machine_busy_pct"] / 100 * (os.cpu_count() or 1)
    return {"machine_cpu_ms_per_request": round(cores * 1000 / rate, 3)}


def _meter(servers: list[ServerProcess], database: bool = False) -> CpuMeter:
    """CPU of every server process (the load comes from elsewhere: wrk or this process's senders),
    and with ``database`` of the local PostgreSQL's processes too."""
    first, *others = servers
    return CpuMeter(
        first.process.pid,
        client=False,
        database=database,
        other_pids=tuple(s.process.pid for s in others),
    )


async def measure(
    engine: str,
    driver: str,
    senders: list[int],
    deliveries: int,
    seconds: float,
    report: Report,
    rules: int = 0,
    processes: int = 1,
) -> None:
    heading(
        f"ingest on {engine}: signed GitHub deliveries, {rules} routing rules, "
        f"senders {senders}, driver {driver}, processes {processes}"
    )
    async with private_database(engine) as bench_db:
        key = new_key()
        services = make_services(bench_db, key)
        try:
            tenant = await provision(services)
            if rules:
                assert tenant.webhook_id is not None
                await set_rules(services, Caller.cli(), tenant.webhook_id, rule_set(rules))
        finally:
            await services.sandbox.close()
            await services.db.dispose()
        assert tenant.ingest_token is not None and tenant.webhook_secret is not None
        secret = tenant.webhook_secret
        acked: set[str] = set()
        in_flight = 0
        async with server_processes(processes, bench_db, key) as servers:
            urls = [f"{server.base_url}/webhooks/{tenant.ingest_token}" for server in servers]
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
                # Warm-up: connection pools, plugin imports, first-statement caches.
                for url in urls:
                    warm = await blast(
                        "python", http, url, signed_bodies(secret, 100), senders=4, total=100, seconds=30
                    )
                    acked.update(warm["todo_ids"])
                for n in senders:
                    # A body of its own for every delivery this round may send (see senders.distinct).
                    bodies = signed_bodies(secret, deliveries)
                    result, figures = await timed_row(
                        servers,
                        http,
                        urls,
                        driver,
                        bodies,
                        n,
                        deliveries,
                        seconds,
                        database=engine == "postgresql",
                    )
                    acked.update(result["todo_ids"])
                    in_flight += int(result["in_flight_at_stop"])
                    report.add(
                        engine=engine,
                        server="switchboard",
                        processes=processes,
                        rules=rules,
                        **figures,
                        server_rss_mib=round(sum(s.rss_mib() or 0 for s in servers), 1),
                    )
        # Every acknowledged delivery is durable: look each acknowledged todo up.
        db = Database(bench_db.url)
        try:
            async with db.read() as s:
                stored = set((await s.scalars(select(Todo.id).where(Todo.state != "held"))).all())
                # A rule that faults (a time limit missed under load, say) quarantines its delivery.
                held = await s.scalar(select(func.count()).select_from(Todo).where(Todo.state == "held"))
        finally:
            await db.dispose()
        report.add(
            engine=engine,
            processes=processes,
            rules=rules,
            driver=driver,
            check="acknowledged todos stored",
            acknowledged=len(acked),
            stored=len(stored),
            acknowledged_not_stored=len(acked - stored),
            # wrk stops with requests in flight: those may be stored though nobody read the 202
            # (at most in_flight_at_stop of them; the Python senders always finish theirs: 0).
            stored_unread=len(stored - acked),
            quarantined=held or 0,
            in_flight_at_stop=in_flight,
        )


async def store_floor(
    driver: str, senders: list[int], deliveries: int, seconds: float, report: Report, processes: int = 1
) -> None:
    """PostgreSQL: ``bench.bare_store`` (verify, parse, group commit; nothing else) under the same
    senders as Switchboard's rows, on a database of its own; then every acknowledged todo is looked
    up, as for Switchboard."""
    heading(
        f"floor: {STORE_FLOOR} (signature, JSON, group commit) on postgresql, senders {senders}, "
        f"driver {driver}, processes {processes}"
    )
    acked: set[str] = set()
    in_flight = 0
    async with (
        private_database("postgresql", migrate=False) as bench_db,
        server_processes(
            processes, bench_db, None, module="bench.bare_store", env={"BARE_STORE_SECRET": STORE_SECRET}
        ) as servers,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
    ):
        urls = [f"{server.base_url}/webhooks/bare" for server in servers]
        for url in urls:
            warm = await blast(
                "python", http, url, signed_bodies(STORE_SECRET, 100), senders=4, total=100, seconds=30
            )
            acked.update(warm["todo_ids"])
        for n in senders:
            bodies = signed_bodies(STORE_SECRET, deliveries)
            result, figures = await timed_row(
                servers, http, urls, driver, bodies, n, deliveries, seconds, database=True
            )
            acked.update(result["todo_ids"])
            in_flight += int(result["in_flight_at_stop"])
            report.add(engine="postgresql", server=STORE_FLOOR, processes=processes, **figures)
        db = Database(bench_db.url)
        try:
            async with db.read() as s:
                stored = set((await s.scalars(text("SELECT id FROM bare_todos"))).all())
        finally:
            await db.dispose()
    report.add(
        engine="postgresql",
        server=STORE_FLOOR,
        processes=processes,
        driver=driver,
        check="acknowledged todos stored",
        acknowledged=len(acked),
        stored=len(stored),
        acknowledged_not_stored=len(acked - stored),
        stored_unread=len(stored - acked),
        in_flight_at_stop=in_flight,
    )


async def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--senders", type=positive_ints, default=[1, 8, 32], help="concurrent senders, e.g. 1,8,32"
    )
    p.add_argument("--deliveries", type=int, default=2000, help="deliveries per sender count (bound)")
    p.add_argument("--seconds", type=float, default=60.0, help="time cap per sender count")
    p.add_argument(
        "--driver",
        choices=DRIVERS,
        help="who sends to Switchboard: python (aiohttp tasks) or wrk (default: wrk if installed)",
    )
    p.add_argument(
        "--rules",
        type=rule_counts,
        default=[0, 10],
        help="routing rule counts to measure, each 0-10 (default 0,10)",
    )
    p.add_argument(
        "--no-ceiling",
        action="store_true",
        help=f"skip the anchor rows ({CEILING}; {STORE_FLOOR} on PostgreSQL)",
    )
    p.add_argument("--ceiling-requests", type=int, default=30_000, help="bare requests per row (bound)")
    p.add_argument("--ceiling-seconds", type=float, default=5.0, help="time cap per bare row")
    p.add_argument(
        "--processes",
        type=positive_ints,
        default=[1],
        help="server processes sharing the load, e.g. 1,2 (more than one: PostgreSQL only)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the anchors and every row this many times, alternating, then each row's share of "
        "its own round's ceiling and their median (default 1)",
    )
    p.add_argument("--quick", action="store_true", help="senders 1,8,32, 100 deliveries, 10 s")
    args = p.parse_args()
    if args.quick:
        args.senders, args.deliveries, args.seconds = [1, 8, 32], 100, 10.0
        args.ceiling_requests, args.ceiling_seconds = 5000, 3.0
    if args.deliveries < 1 or args.seconds <= 0:
        p.error("--deliveries and --seconds must be positive")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.driver == "wrk" and not wrk_available():
        p.error("wrk is not installed (Debian: apt-get install -y wrk)")
    driver = args.driver or ("wrk" if wrk_available() else "python")
    print(machine())
    report = Report("ingest", args.json_path)
    for number in range(1, args.rounds + 1):
        if args.rounds > 1:
            heading(f"round {number} of {args.rounds}")
            report.context = {"round": number}
        await one_round(args, driver, report)
    report.context = {}
    for summary in shares_by_round(report.rows):
        report.add(**summary)


async def one_round(args: argparse.Namespace, driver: str, report: Report) -> None:
    """The anchors, then every engine's rows, once."""
    if not args.no_ceiling:
        drivers = ["python", "wrk"] if wrk_available() else ["python"]
        for processes in args.processes:
            await ceiling(
                drivers, args.senders, args.ceiling_requests, args.ceiling_seconds, report, processes
            )
    if not args.no_ceiling and "postgresql" in engines_of(args.db):
        for processes in args.processes:
            await store_floor(driver, args.senders, args.deliveries, args.seconds, report, processes)
    for engine in engines_of(args.db):
        for processes in args.processes:
            if processes > 1 and engine == "sqlite":
                # SQLite is for a single process (README): its one writer connection is per process.
                heading(f"ingest on sqlite with {processes} processes: not measured (SQLite is one process)")
                continue
            for rules in args.rules:
                await measure(
                    engine, driver, args.senders, args.deliveries, args.seconds, report, rules, processes
                )


if __name__ == "__main__":
    run(main)
