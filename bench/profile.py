"""Where ingest's time goes: py-spy on the server while signed GitHub deliveries arrive.

The server and the senders of ``bench/ingest.py`` (one ``switchboard serve`` process on a private
database, the flood guard off, wrk or Python senders), with py-spy (PyPI ``py-spy``, installed by
``bench/requirements.txt``) attached to the server's process for ``--seconds`` once the load has
run for ``--warmup``. The samples are summed three ways:

* per thread (the event loop's, SQLite's writer and readers, the checkpointer's);
* per step of a delivery's path (``STEPS``: the functions of docs/architecture.md's "Ingest, step
  by step", each with the share of the event loop's samples that were inside it);
* per function, inclusive and own, for the thread named by ``--thread``.

A share is of the samples in which that thread was running Python (py-spy leaves out idle ones).
py-spy stops the process for each sample unless ``--nonblocking``: the rate printed with the
profile is the rate under the sampler, lower than ``bench.ingest``'s. Run it when a target is missed,
to say where the time goes (bench/README.md, "Where the time goes"):

    .venv/bin/python -m bench.profile --db postgresql --senders 32 --seconds 8
    .venv/bin/python -m bench.profile --db sqlite --thread writer --raw /tmp/ingest.raw
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import importlib
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from bench.common import (
    Report,
    heading,
    machine,
    new_key,
    parser,
    private_database,
    run,
    server_process,
    signed_webhook,
)
from bench.senders import DRIVERS, blast, signed_bodies, wrk_available

# A delivery's path, outermost first: (label, module, qualified name). A step's share counts the
# samples with that function anywhere on the stack. Two-space indents nest a step in the one above.
# tests/test_bench_profile.py holds every name to the code, so a rename cannot silently read 0%.
STEPS: tuple[tuple[str, str, str], ...] = (
    ("the handler", "switchboard.ingest", "handle_webhook"),
    ("  verify (the provider's)", "switchboard.ingest_steps", "verify"),
    ("    the body's JSON", "switchboard.provider", "json_object"),
    ("    the signature", "switchboard.sdk.checks", "signature_matches"),
    ("  the delivery keys", "switchboard.ingest_steps", "delivery_keys"),
    ("  the reply address and the echo check", "switchboard.ingest_steps", "disposition"),
    ("  the event row", "switchboard.ingest_steps", "event_row"),
    ("  intake (trust, rules, the todo rows)", "switchboard.ingest_steps", "intake"),
    ("    the payload's stored form", "switchboard.sanitize", "storable_encoded"),
    ("  the answer", "switchboard.ingest", "_answer"),
    ("the group-commit writer", "switchboard.ingest_writer", "IngestWriter._commit"),
    ("  asyncpg's execute (PostgreSQL)", "asyncpg.connection", "Connection._do_execute"),
    ("  the hand-off to SQLite's writer (the loop's side)", "switchboard.db", "Database.on_sqlite_writer"),
    ("  the doorbell", "switchboard.services", "Services.todos_created"),
    ("the shared echo read", "switchboard.echo", "SharedEchoReads._drain"),
    ("the response's end", "aiohttp.web_protocol", "RequestHandler.finish_response"),
    ("  the access line", "switchboard.logs", "RedactingAccessLogger.log"),
    ("reading sockets", "asyncio.selector_events", "_SelectorSocketTransport._read_ready"),
    ("waiting in epoll", "selectors", "EpollSelector.select"),
)

# The threads ``--thread`` can name, by what py-spy reports of them.
THREADS = {
    "loop": "MainThread",
    # aiosqlite runs each connection on a thread of its own; the writer's is the busiest of them.
    "writer": "_connection_worker_thread",
    "checkpointer": "asyncio_",
}
_LINE = re.compile(r":\d+\)$")


def frame_pattern(module: str, qualname: str) -> str:
    """How py-spy names a frame of ``module.qualname``: ``qualname (path/to/module.py:line)``,
    the path as far as the package (``switchboard/ingest.py``, ``asyncpg/connection.py``)."""
    return f"{qualname} ({module.replace('.', '/')}.py"


@dataclass
class Profile:
    """py-spy's raw samples (``--format raw``: one stack a line, ``thread;frame;…;frame count``),
    summed."""

    threads: collections.Counter[str] = field(default_factory=collections.Counter)
    stacks: list[tuple[str, list[str], int]] = field(default_factory=list)

    @classmethod
    def read(cls, lines: Iterable[str]) -> Profile:
        profile = cls()
        for line in lines:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            thread, *frames = stack.split(";")
            # Frames without their line numbers, so a function's samples add up whatever line ran.
            profile.stacks.append((thread, [_LINE.sub(")", f) for f in frames], int(count)))
            profile.threads[thread] += int(count)
        return profile

    def total(self, thread: str) -> int:
        return sum(n for name, _, n in self.stacks if thread in name)

    def share(self, thread: str, pattern: str) -> float:
        """The share of ``thread``'s samples with a frame starting with ``pattern`` on the stack."""
        total = self.total(thread)
        inside = sum(
            n
            for name, frames, n in self.stacks
            if thread in name and any(f.startswith(pattern) for f in frames)
        )
        return inside / total if total else 0.0

    def outside(self, thread: str, patterns: Iterable[str]) -> list[tuple[str, float]]:
        """The samples of ``thread`` with none of ``patterns`` on the stack, by their deepest frame
        (what the thread was running itself), as shares of all its samples, largest first."""
        wanted = tuple(patterns)
        total = self.total(thread)
        deepest: collections.Counter[str] = collections.Counter()
        for name, frames, n in self.stacks:
            if thread in name and not any(f.startswith(wanted) for f in frames):
                deepest[frames[-1] if frames else "(no frame)"] += n
        return [(f, n / total) for f, n in deepest.most_common()] if total else []

    def functions(self, thread: str) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        """(inclusive, own) shares per function of ``thread``, largest first."""
        inclusive: collections.Counter[str] = collections.Counter()
        own: collections.Counter[str] = collections.Counter()
        total = 0
        for name, frames, n in self.stacks:
            if thread not in name:
                continue
            total += n
            for frame in set(frames):
                inclusive[frame] += n
            if frames:
                own[frames[-1]] += n
        if not total:
            return [], []
        return (
            [(f, n / total) for f, n in inclusive.most_common()],
            [(f, n / total) for f, n in own.most_common()],
        )


def py_spy() -> str:
    """The py-spy executable: beside this interpreter (the project's venv) or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.is_file() else shutil.which("py-spy")
    if found is None:
        raise RuntimeError("py-spy is not installed: .venv/bin/pip install -r bench/requirements.txt")
    return found


def sampler_argv(
    sampler: str, pid: int, seconds: float, rate: int, raw: Path, nonblocking: bool, native: bool
) -> list[str]:
    """py-spy's command line: every thread of ``pid`` for ``seconds``, raw samples into ``raw``;
    ``native`` adds the C frames (inside asyncpg, orjson, libc) under the Python frame that called them."""
    argv = [sampler, "record", "-p", str(pid), "-d", str(max(1, round(seconds))), "-r", str(rate)]
    argv += ["--format", "raw", "-o", str(raw), "--threads"]
    return argv + (["--nonblocking"] if nonblocking else []) + (["--native"] if native else [])


async def sample(pid: int, seconds: float, rate: int, raw: Path, nonblocking: bool, native: bool) -> None:
    """py-spy on the server (``sampler_argv``), its raw samples written to ``raw``."""
    argv = sampler_argv(py_spy(), pid, seconds, rate, raw, nonblocking, native)
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(process.communicate(), seconds + 60)
    if process.returncode != 0 or not await asyncio.to_thread(raw.is_file):
        # py-spy needs ptrace: root, or kernel.yama.ptrace_scope 0 (its own message says which).
        said = out.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"py-spy could not sample the server: {' / '.join(said) or process.returncode}")


async def profile_ingest(args: argparse.Namespace, raw: Path, report: Report) -> Profile:
    heading(
        f"profile of ingest on {args.db}: {args.senders} senders ({args.driver}), py-spy for "
        f"{args.seconds:g} s at {args.rate}/s after {args.warmup:g} s"
    )
    async with private_database(args.db) as bench_db:
        key = new_key()
        token, secret = await signed_webhook(bench_db, key)
        async with (
            server_process(bench_db, key) as server,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
        ):
            url = f"{server.base_url}/webhooks/{token}"
            await blast("python", http, url, signed_bodies(secret, 100), senders=4, total=100, seconds=30)
            # The load outlasts the sampling: it is bounded by time, with a body for every delivery
            # it may send (``--deliveries``).
            window = args.warmup + args.seconds + 2
            load = asyncio.create_task(
                blast(
                    args.driver,
                    http,
                    url,
                    signed_bodies(secret, args.deliveries),
                    senders=args.senders,
                    total=args.deliveries,
                    seconds=window,
                )
            )
            try:
                await asyncio.sleep(args.warmup)
                if load.done():
                    raise RuntimeError(
                        f"the load ended within the warm-up: raise --deliveries (now {args.deliveries})"
                    )
                await sample(server.process.pid, args.seconds, args.rate, raw, args.nonblocking, args.native)
                sent = await load
            finally:
                if not load.done():
                    load.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await load
    report.add(
        engine=args.db,
        driver=args.driver,
        senders=args.senders,
        per_second_under_sampler=sent["per_second"],
        acked=sent["acked"],
        other_statuses=sent["other_statuses"],
    )
    return Profile.read((await asyncio.to_thread(raw.read_text)).splitlines())


def print_profile(profile: Profile, thread: str, top: int) -> None:
    print("\nsamples per thread (running Python):")
    for name, n in profile.threads.most_common():
        print(f"  {n:7d}  {name}")
    loop = THREADS["loop"]
    print(f"\nsteps (share of the event loop's {profile.total(loop)} samples):")
    for label, module, qualname in STEPS:
        share = profile.share(loop, frame_pattern(module, qualname))
        print(f"  {100 * share:5.1f}%  {label}")
    top_level = [frame_pattern(m, q) for label, m, q in STEPS if not label.startswith(" ")]
    rest = profile.outside(loop, top_level)
    print(f"  {100 * sum(s for _, s in rest):5.1f}%  outside them, by the function running (the top 12):")
    for name, share in rest[:12]:
        print(f"          {100 * share:5.1f}%  {name}")
    writer = THREADS["writer"]
    if profile.total(writer):
        drive = frame_pattern("switchboard.direct", "drive")
        print(f"\nSQLite's connection threads (writer and readers): {profile.total(writer)} samples")
        statements = 100 * profile.share(writer, drive)
        print(f"  {statements:5.1f}%  the writes' statements (the rest: BEGIN/COMMIT, reads, waiting)")
    inclusive, own = profile.functions(THREADS.get(thread, thread))
    # The frames every sample shares (the thread's start, the event loop's run) say nothing.
    outermost = inclusive[0][1] if inclusive else 0.0
    inclusive = [(name, share) for name, share in inclusive if share < outermost] or inclusive
    print(f"\nfunctions of the {thread!r} thread, inclusive, below its outermost frames (the top {top}):")
    for name, share in inclusive[:top]:
        print(f"  {100 * share:5.1f}%  {name}")
    print(f"\nown time (the top {min(top, 25)}):")
    for name, share in own[: min(top, 25)]:
        print(f"  {100 * share:5.1f}%  {name}")


def main() -> None:
    p = parser(__doc__.splitlines()[0], engines=False)
    p.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql", help="engine to profile")
    p.add_argument("--senders", type=int, default=32, help="concurrent senders (default 32)")
    p.add_argument("--driver", choices=DRIVERS, default=None, help="who sends (default: wrk if installed)")
    p.add_argument("--seconds", type=float, default=8.0, help="how long py-spy samples (default 8)")
    p.add_argument("--warmup", type=float, default=3.0, help="load before sampling starts (default 3 s)")
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second (default 200)")
    p.add_argument(
        "--deliveries",
        type=int,
        default=30000,
        help="distinct deliveries prepared (each ~20 KB in memory); the load stops at this count",
    )
    p.add_argument("--nonblocking", action="store_true", help="sample without stopping the server")
    p.add_argument(
        "--native", action="store_true", help="include C frames (asyncpg, orjson, the interpreter)"
    )
    p.add_argument(
        "--thread", default="loop", help=f"whose functions to list: {', '.join(THREADS)} (default loop)"
    )
    p.add_argument("--top", type=int, default=40, help="functions to list (default 40)")
    p.add_argument("--raw", type=Path, help="keep py-spy's raw samples in this file")
    args = p.parse_args()
    for name in ("senders", "seconds", "rate", "deliveries", "top"):
        if getattr(args, name) <= 0:
            p.error(f"--{name} must be positive")
    if args.warmup < 0:
        p.error("--warmup must not be negative")
    args.driver = args.driver or ("wrk" if wrk_available() else "python")
    report = Report("profile", args.json_path)

    async def go() -> None:
        py_spy()  # before a database is made: a missing sampler is a one-line error
        print(machine(), flush=True)
        with tempfile.TemporaryDirectory(prefix="sbprofile-") as work:
            raw = args.raw or Path(work) / "samples.raw"
            profile = await profile_ingest(args, raw, report)
            print_profile(profile, args.thread, args.top)

    run(go)


def checked_steps() -> list[str]:
    """The ``STEPS`` whose module or function no longer exists (for the test)."""
    missing = []
    for label, module, qualname in STEPS:
        try:
            target: Any = importlib.import_module(module)
            for part in qualname.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError):
            missing.append(f"{label.strip()}: {module}.{qualname}")
    return missing


if __name__ == "__main__":
    main()
