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
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.render import render

ROOT = Path(__file__).resolve().parent.parent

# Each run starts and ends with ``bench.probe``: the machine's speed, so a slow phase shows.
PROBE_START = ("probe", ["--label", "start"])
PROBE_END = ("probe", ["--label", "end"])
FULL: list[tuple[str, list[str]]] = [
    PROBE_START,
    (
        "ingest",
        [
            "--db",
            "both",
            "--senders",
            "1,8,32",
            "--deliveries",
            "6000",
            "--seconds",
            "45",
            "--processes",
            "1,2",
        ],
    ),
    # The headline share (32 senders, no rules) again, in rounds that alternate with their anchors.
    (
        "ingest",
        ["--db", "both", "--senders", "32", "--rules", "0", "--deliveries", "12000", "--rounds", "4"],
    ),
    ("claim", ["--db", "both", "--claimers", "1,4,16", "--cycles", "3000", "--seconds", "20", "--mcp"]),
    ("calls", ["--db", "both", "--calls", "1000", "--rounds", "3"]),
    ("backlog", ["--db", "postgresql", "--sizes", "1000,10000,100000,1000000", "--claims", "300"]),
    ("backlog", ["--db", "sqlite", "--sizes", "1000,10000,100000,1000000", "--claims", "300"]),
    (
        "backlog",
        ["--db", "postgresql", "--sizes", "1000,10000,100000,1000000", "--claims", "300", "--no-analyze"],
    ),
    ("doorbell", ["--db", "both", "--deliveries", "200"]),
    ("reply", ["--db", "both", "--replies", "200"]),
    ("crash", ["--db", "both", "--deliveries", "1500", "--senders", "16", "--kills", "5"]),
    PROBE_END,
]
QUICK: list[tuple[str, list[str]]] = [
    PROBE_START,
    ("ingest", ["--db", "both", "--quick", "--processes", "1,2"]),
    ("claim", ["--db", "both", "--quick"]),
    ("calls", ["--db", "both", "--quick"]),
    ("backlog", ["--db", "both", "--sizes", "1000,10000", "--claims", "50"]),
    ("doorbell", ["--db", "both", "--deliveries", "20"]),
    ("reply", ["--db", "both", "--quick"]),
    ("crash", ["--db", "both", "--quick"]),
    PROBE_END,
]
TIME_LIMIT = 25 * 60


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plan(quick: bool, only: list[str]) -> list[tuple[str, list[str]]]:
    """The benchmarks to run, in order: all of them, or those ``only`` names. The probes run
    whatever else is chosen: a figure without the machine's speed beside it cannot be told from a
    slow phase."""
    return [
        (name, argv)
        for name, argv in (QUICK if quick else FULL)
        if not only or name in only or name == "probe"
    ]


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
    failed = []
    for name, argv in plan(args.quick, args.only):
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
