"""Run every benchmark, one process each, and print the figures as Markdown tables side by side.

    .venv/bin/python -m bench.all                 # the full set (several minutes on 2 cores)
    .venv/bin/python -m bench.all --quick         # small counts, to check the harness works
    .venv/bin/python -m bench.all --render FILE   # only turn an earlier run's JSON lines into tables

Each benchmark appends JSON lines (one per figure, with the machine) to ``--out``; the tables are
made from that file, so a run can be rendered again later. Every benchmark runs under a time limit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

FULL: list[tuple[str, list[str]]] = [
    ("ingest", ["--db", "both", "--senders", "1,8,32", "--deliveries", "1500", "--seconds", "45"]),
    ("claim", ["--db", "both", "--claimers", "1,4,16", "--cycles", "3000", "--seconds", "20", "--mcp"]),
    ("backlog", ["--db", "postgresql", "--sizes", "1000,10000,100000,1000000", "--claims", "300"]),
    ("backlog", ["--db", "sqlite", "--sizes", "1000,10000,100000,1000000", "--claims", "300"]),
    (
        "backlog",
        ["--db", "postgresql", "--sizes", "1000,10000,100000,1000000", "--claims", "300", "--no-analyze"],
    ),
    ("doorbell", ["--db", "both", "--deliveries", "200"]),
    ("reply", ["--db", "both", "--replies", "200"]),
]
QUICK: list[tuple[str, list[str]]] = [
    ("ingest", ["--db", "both", "--senders", "1,4", "--deliveries", "100"]),
    ("claim", ["--db", "both", "--claimers", "1,4", "--cycles", "200", "--mcp"]),
    ("backlog", ["--db", "both", "--sizes", "1000,10000", "--claims", "50"]),
    ("doorbell", ["--db", "both", "--deliveries", "20"]),
    ("reply", ["--db", "both", "--replies", "30"]),
]
TIME_LIMIT = 15 * 60
ENGINE_LABEL = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if value is None or value == "":
            return "-"
        if isinstance(value, float):
            return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.2f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def render(rows: list[dict[str, Any]]) -> str:
    by: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by.setdefault(row["benchmark"], []).append(row)
    out: list[str] = []
    if rows:
        m = rows[-1]["machine"]
        out.append(
            f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}, "
            f"SQLite {m['sqlite']}; run {m['date']} (1-minute load average at the end: {m['loadavg_1m']})."
        )

    ingest = [r for r in by.get("ingest", []) if "senders" in r]
    if ingest:
        out.append("\n### Ingest: signed GitHub deliveries over HTTP\n")
        out.append(
            table(
                ["senders", "engine", "acked", "deliveries/s", "p50 ms", "p99 ms", "server peak RSS MiB"],
                [
                    [
                        r["senders"],
                        ENGINE_LABEL[r["engine"]],
                        r["acked"],
                        r["per_second"],
                        r.get("p50_ms"),
                        r.get("p99_ms"),
                        r["server_peak_rss_mib"],
                    ]
                    for r in sorted(ingest, key=lambda r: (r["senders"], r["engine"] != "sqlite"))
                ],
            )
        )
        for r in by["ingest"]:
            if "check" in r:
                out.append(
                    f"\n{ENGINE_LABEL[r['engine']]}: {r['acknowledged']} acknowledged todos, "
                    f"{r['stored']} stored."
                )

    cycles = by.get("claim_cycles", [])
    if cycles:
        out.append("\n### Claim cycles (`claim_next` + `complete`) per second\n")
        columns: list[tuple[str, str]] = []
        for r in cycles:
            col = (r["engine"], r["queue"])
            if col not in columns:
                columns.append(col)
        labels = [
            f"Switchboard {ENGINE_LABEL[e]}{q.removeprefix('switchboard')}"
            if q.startswith("switchboard")
            else q.replace("pgqueuer", "PgQueuer")
            for e, q in columns
        ]
        claimers = sorted({r["claimers"] for r in cycles})
        grid = {(r["engine"], r["queue"], r["claimers"]): r for r in cycles}
        body = []
        for n in claimers:
            line: list[Any] = [n]
            for e, q in columns:
                r = grid.get((e, q, n))
                line.append(
                    f"{r['cycles_per_second']:,.0f} ({r.get('cycle_p50_ms', 0):.1f} / "
                    f"{r.get('cycle_p99_ms', 0):.1f} ms)"
                    if r
                    else None
                )
            body.append(line)
        out.append(table(["claimers", *labels], body))
        out.append("\nEach cell: cycles/s (p50 / p99 of one cycle).")

    backlog = by.get("claim_backlog", [])
    if backlog:
        out.append("\n### `claim_next` latency vs pending backlog\n")
        out.append(
            table(
                ["engine", "statistics", "pending", "claims", "p50 ms", "p99 ms", "build s", "pick walks"],
                [
                    [
                        ENGINE_LABEL[r["engine"]],
                        "-" if r["engine"] == "sqlite" else ("ANALYZE" if r.get("analyzed") else "stale"),
                        r["backlog"],
                        r.get("claim_n"),
                        r.get("claim_p50_ms"),
                        r.get("claim_p99_ms"),
                        r["build_seconds"],
                        r.get("pick_index", "?"),
                    ]
                    for r in backlog
                ],
            )
        )

    doorbell = by.get("doorbell", [])
    if doorbell:
        out.append("\n### Doorbell: delivery POST → `notifications/claude/channel` at the SDK client\n")
        out.append(
            table(
                ["engine", "deliveries", "missed", "202 p50 ms", "202 p99 ms", "ring p50 ms", "ring p99 ms"],
                [
                    [
                        ENGINE_LABEL[r["engine"]],
                        r["deliveries"],
                        r["missed_rings"],
                        r.get("ack_p50_ms"),
                        r.get("ack_p99_ms"),
                        r.get("ring_p50_ms"),
                        r.get("ring_p99_ms"),
                    ]
                    for r in doorbell
                ],
            )
        )

    reply = by.get("reply_overhead", [])
    if reply:
        out.append("\n### Reply overhead over the provider call\n")
        out.append(
            table(
                [
                    "engine",
                    "path",
                    "replies",
                    "provider p50/p99 ms",
                    "reply p50/p99 ms",
                    "overhead p50/p99 ms",
                ],
                [
                    [
                        ENGINE_LABEL[r["engine"]],
                        r["path"],
                        r["replies"],
                        f"{r['provider_p50_ms']:.2f} / {r['provider_p99_ms']:.2f}",
                        f"{r['reply_p50_ms']:.2f} / {r['reply_p99_ms']:.2f}",
                        f"{r['overhead_p50_ms']:.2f} / {r['overhead_p99_ms']:.2f}",
                    ]
                    for r in reply
                ],
            )
        )
    return "\n".join(out)


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small counts: check the harness, not the figures")
    p.add_argument("--only", action="append", default=[], help="run only this benchmark (repeatable)")
    p.add_argument("--out", type=Path, default=Path(f"/tmp/switchboard-bench-{int(time.time())}.jsonl"))
    p.add_argument("--render", type=Path, help="render an earlier run's JSON lines and exit")
    args = p.parse_args()
    if args.render:
        if not args.render.is_file():
            p.error(f"{args.render} is not a file")
        print(render(load(args.render)))
        return
    plan = [
        (name, argv) for name, argv in (QUICK if args.quick else FULL) if not args.only or name in args.only
    ]
    failed = []
    for name, argv in plan:
        print(f"\n#### bench.{name} {' '.join(argv)}", flush=True)
        started = time.monotonic()
        try:
            code = subprocess.run(  # noqa: S603 (our own interpreter and module names)
                [sys.executable, "-m", f"bench.{name}", *argv, "--json", str(args.out)],
                cwd=str(ROOT),
                timeout=TIME_LIMIT,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            code = -1
            print(f"bench.{name} stopped after {TIME_LIMIT}s", flush=True)
        print(f"(bench.{name}: exit {code}, {time.monotonic() - started:.0f}s)", flush=True)
        if code != 0:
            failed.append(name)
    print(f"\nResults: {args.out}\n")
    if args.out.is_file():
        print(render(load(args.out)))
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
