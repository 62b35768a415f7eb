"""What a step of ingest really costs: the server's CPU a delivery with the step knocked out.

``bench.profile`` samples the server, and a sampler that stops the process for each sample
over-weighs system calls and under-weighs code that runs cache-cold under load: a step measured in
a loop can cost the loaded server two or three times as much (the access line read 7 µs in a loop
and about 20 µs knocked out of a loaded server, 12-05 afternoon). This script measures the
difference instead. It runs ``switchboard serve`` (``bench.serve``) under the load of
``bench.ingest`` (signed GitHub deliveries, wrk or Python senders, a private database), as is and
with one step replaced by nothing, in alternating rounds, and prints each variant's deliveries/s
and server CPU a delivery, and the step's cost: the full server's CPU a delivery less the
variant's (medians over the rounds).

A knocked-out server is not a correct server: without ``store`` it acknowledges what it never
stored, without ``decide`` it answers 202 to anything signed or not. This runs only here, set by
``BENCH_KNOCKOUT`` in ``bench.serve``'s environment; nothing in ``switchboard`` reads it.

    .venv/bin/python -m bench.knockout --db postgresql --rounds 3
    .venv/bin/python -m bench.knockout --db sqlite --knockouts access_line,metrics
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ENV = "BENCH_KNOCKOUT"


def _access_line() -> None:
    from switchboard.logs import RedactingAccessLogger

    def log(self: Any, request: Any, response: Any, time: float) -> None:
        return None

    RedactingAccessLogger.log = log  # type: ignore[method-assign]


def _metrics() -> None:
    from switchboard.metrics import Metrics

    def nothing(self: Any, *args: Any, **labels: str) -> None:
        return None

    Metrics.inc = nothing  # type: ignore[method-assign,assignment]
    Metrics.observe = nothing  # type: ignore[method-assign,assignment]


def _store() -> None:
    from switchboard.ingest_writer import IngestWriter, Result

    async def submit(self: Any, rows: Any) -> Result:
        return Result("stored")

    IngestWriter.submit = submit  # type: ignore[method-assign]


def _decide() -> None:
    from aiohttp import web

    from switchboard import ingest
    from switchboard import ingest_steps as steps
    from switchboard.ids import token_hash
    from switchboard.ingest_answers import Outcome, accepted

    async def answered(request: web.Request, services: Any, limiter: Any, seen: dict[str, str]) -> Outcome:
        # What is left: the webhook's lookup, the flood guard, the body's read and a 202 of the
        # usual shape, with the usual access-line note.
        steps.check_length(request)
        hashed = token_hash(steps.ingest_token(request))
        cache = request.app[ingest.INGEST_CONFIGS]
        config = cache.get(hashed) or await steps.lookup(services, cache, hashed)
        seen["source"], seen["webhook"] = config.webhook.source, config.id
        steps.admit(limiter, config)
        await ingest._read_body(request)
        response = accepted([], created=0, verified=True, trust_mode="signed", disposition="routed")
        note = (
            f"webhook={config.id} source={config.webhook.source} event=knocked-out disposition=routed todos=0"
        )
        return Outcome(response, "routed", None, None, note)

    ingest._ingest = answered


# Name -> (what is left out, how). Each is applied alone to a server of its own.
KNOCKOUTS: dict[str, tuple[str, Callable[[], None]]] = {
    "access_line": ("the request's access line", _access_line),
    "metrics": ("the request's two metrics", _metrics),
    "store": ("the group commit (answered as stored, nothing written)", _store),
    "decide": ("everything after the body's read (verify, keys, intake, store)", _decide),
}


def apply_from_environment() -> None:
    """Called by ``bench.serve`` before it serves: the knock-outs ``BENCH_KNOCKOUT`` names."""
    for name in filter(None, os.environ.get(ENV, "").split(",")):
        if name not in KNOCKOUTS:
            raise SystemExit(f"{ENV}: no knock-out named {name!r} (known: {', '.join(KNOCKOUTS)})")
        KNOCKOUTS[name][1]()


def costs(rows: dict[str, list[float]]) -> dict[str, float]:
    """µs a delivery each knock-out took away: the median of the full server's CPU a delivery
    (ms, the ``full`` rows) less the median of the variant's."""
    full = statistics.median(rows["full"])
    return {
        name: round((full - statistics.median(cpu)) * 1000, 1) for name, cpu in rows.items() if name != "full"
    }


async def measure(
    engine: str, driver: str, senders: int, deliveries: int, rounds: int, names: list[str], report: Any
) -> None:
    import aiohttp

    from bench.common import heading, new_key, private_database, server_process, signed_webhook
    from bench.ingest import timed_row
    from bench.senders import blast, signed_bodies

    heading(
        f"knock-outs on {engine}: {senders} senders ({driver}), {deliveries} deliveries a row,"
        f" {rounds} rounds"
    )
    cpu: dict[str, list[float]] = {"full": [], **{name: [] for name in names}}
    rates: dict[str, list[float]] = {variant: [] for variant in cpu}
    async with private_database(engine) as bench_db:
        key = new_key()
        token, secret = await signed_webhook(bench_db, key)
        for round_ in range(1, rounds + 1):
            for variant in cpu:
                env = {ENV: variant if variant != "full" else ""}
                async with (
                    server_process(bench_db, key, env=env) as server,
                    aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
                ):
                    url = f"{server.base_url}/webhooks/{token}"
                    await blast(
                        "python", http, url, signed_bodies(secret, 100), senders=4, total=100, seconds=30
                    )
                    result, figures = await timed_row(
                        [server],
                        http,
                        [url],
                        driver,
                        signed_bodies(secret, deliveries),
                        senders,
                        deliveries,
                        120.0,
                        database=engine == "postgresql",
                    )
                per = float(figures["server_cpu_ms_per_request"])
                cpu[variant].append(per)
                rates[variant].append(float(figures["per_second"]))
                report.add(
                    engine=engine,
                    round=round_,
                    variant=variant,
                    left_out=KNOCKOUTS[variant][0] if variant != "full" else "",
                    per_second=figures["per_second"],
                    server_cpu_ms_per_request=per,
                    other_statuses=result.get("other_statuses"),
                )
    taken = costs(cpu)
    for variant in cpu:
        report.add(
            engine=engine,
            variant=variant,
            median_per_second=round(statistics.median(rates[variant]), 1),
            median_server_cpu_ms=round(statistics.median(cpu[variant]), 3),
            cost_us_a_delivery=taken.get(variant, ""),
        )


def main() -> None:
    from bench.common import Report, engines_of, machine, parser, run
    from bench.senders import DRIVERS, wrk_available

    p = parser(__doc__.splitlines()[0])
    p.add_argument("--senders", type=int, default=32, help="concurrent senders (default 32)")
    p.add_argument("--deliveries", type=int, default=8000, help="deliveries a row (default 8000)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--driver", choices=DRIVERS, help="wrk (default when installed) or python")
    p.add_argument(
        "--knockouts",
        default=",".join(KNOCKOUTS),
        help=f"comma-separated, from: {', '.join(KNOCKOUTS)} (default: all)",
    )
    args = p.parse_args()
    names = [n for n in args.knockouts.split(",") if n]
    unknown = [n for n in names if n not in KNOCKOUTS]
    if unknown or not names:
        p.error(f"--knockouts: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(KNOCKOUTS)}")
    for name in ("senders", "deliveries", "rounds"):
        if getattr(args, name) <= 0:
            p.error(f"--{name} must be positive")
    if args.driver == "wrk" and not wrk_available():
        p.error("wrk is not installed (Debian: apt-get install -y wrk)")
    driver = args.driver or ("wrk" if wrk_available() else "python")
    report = Report("knockout", args.json_path)

    async def go() -> None:
        print(machine(), flush=True)
        for engine in engines_of(args.db):
            await measure(engine, driver, args.senders, args.deliveries, args.rounds, names, report)

    run(go)


if __name__ == "__main__":
    main()
