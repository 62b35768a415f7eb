"""The harness every benchmark shares: private databases, tenants, bulk todos, a server process,
signed deliveries, percentiles and the report lines.

Benchmarks report figures; they assert nothing about speed and the test suite never runs them.
Every load they make goes to 127.0.0.1 and is bounded both in count and in time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from switchboard import plugins, tenancy
from switchboard.db import Database
from switchboard.migrate import upgrade_async
from switchboard.models import Endpoint
from switchboard.services import Services
from switchboard.settings import Settings
from switchboard.testing.world import trust_all
from switchboard.vault import Vault, generate_key

ROOT = Path(__file__).resolve().parent.parent
# The octokit payloads the tests use (tests/fixtures/github, verbatim); read in place, not copied.
FIXTURES = ROOT / "tests" / "fixtures"
PG_ENV = "SWITCHBOARD_BENCH_DATABASE_URL"
PG_DEFAULT = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
ENGINES = ("sqlite", "postgresql")


# ---------------------------------------------------------------------------------------------
# Command line


def parser(description: str, *, engines: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    if engines:
        p.add_argument(
            "--db",
            choices=[*ENGINES, "both"],
            default="both",
            help=f"engine to measure (PostgreSQL URL from ${PG_ENV})",
        )
    p.add_argument("--json", dest="json_path", type=Path, help="append the results as JSON lines here")
    return p


def engines_of(choice: str) -> list[str]:
    return list(ENGINES) if choice == "both" else [choice]


def positive_ints(value: str) -> list[int]:
    """``"1,4,16"`` → ``[1, 4, 16]``; a clear argparse error for anything else."""
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a comma list of integers") from None
    if not out or any(v < 1 for v in out):
        raise argparse.ArgumentTypeError(f"{value!r} must list positive integers")
    return out


# ---------------------------------------------------------------------------------------------
# Databases


def pg_admin_url() -> str:
    url = os.environ.get(PG_ENV, "").strip() or PG_DEFAULT
    if url.startswith("postgresql://"):
        url = "postgresql+asyncpg://" + url.removeprefix("postgresql://")
    return url


async def _pg_admin(statement: str) -> None:
    engine = create_async_engine(pg_admin_url(), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


@dataclass
class BenchDatabase:
    engine: str
    # SQLAlchemy URL (sqlite+aiosqlite:// or postgresql+asyncpg://).
    url: str
    directory: Path

    @property
    def asyncpg_dsn(self) -> str:
        """The same database as a plain ``postgresql://`` DSN (for asyncpg and the baseline queue)."""
        return asyncpg_dsn(self.url)


def asyncpg_dsn(url: str) -> str:
    """A SQLAlchemy ``postgresql+asyncpg://`` URL as the plain ``postgresql://`` DSN asyncpg takes."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextlib.asynccontextmanager
async def private_database(engine: str, *, migrate: bool = True) -> AsyncIterator[BenchDatabase]:
    """A fresh, migrated database for one measurement, removed afterwards.

    SQLite: a file in a temporary directory. PostgreSQL: ``CREATE DATABASE sbbench_…`` on the
    server in ``$SWITCHBOARD_BENCH_DATABASE_URL``, dropped with ``FORCE`` at the end (even after
    an error), so a benchmark never touches anybody else's data.
    """
    directory = Path(tempfile.mkdtemp(prefix="sbbench-"))
    try:
        if engine == "sqlite":
            url = f"sqlite+aiosqlite:///{directory / 'switchboard.db'}"
            if migrate:
                await upgrade_async(url)
            yield BenchDatabase(engine, url, directory)
            return
        name = f"sbbench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        admin = make_url(pg_admin_url())
        await _pg_admin(f'CREATE DATABASE "{name}"')
        try:
            url = admin.set(database=name).render_as_string(hide_password=False)
            if migrate:
                await upgrade_async(url)
            yield BenchDatabase(engine, url, directory)
        finally:
            await _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def make_services(bench_db: BenchDatabase, key: str, **overrides: Any) -> Services:
    settings = Settings(database_url=bench_db.url, secret_encryption_key=key, **overrides)  # type: ignore[arg-type]
    return Services(
        settings=settings,
        db=Database(settings.database_url),
        vault=Vault(settings.encryption_key),
        providers=plugins.load(),
    )


# ---------------------------------------------------------------------------------------------
# Tenants


@dataclass
class Tenant:
    """One human, one endpoint (and its ``sbk_`` token), optionally one webhook."""

    human_id: str
    endpoint: Endpoint
    endpoint_token: str
    queue: str
    webhook_id: str | None = None
    ingest_token: str | None = None
    webhook_secret: str | None = None


async def provision(
    services: Services,
    *,
    handle: str = "bench",
    queue: str = "default",
    source: str | None = "github",
    families: Sequence[str] = ("reply",),
) -> Tenant:
    human, _ = await tenancy.add_human(services.db, handle)
    owner = tenancy.Owner(human_id=human.id)
    endpoint, token = await tenancy.vend_endpoint(
        services.db, name=f"{handle}-agent", owner=owner, queues=[queue], families=list(families)
    )
    tenant = Tenant(human.id, endpoint, token, queue)
    if source is not None:
        # Trust every sender: the bench measures deliveries that become work.
        hook = await tenancy.create_webhook(
            services.db,
            services.vault,
            services.providers,
            endpoint_slug=endpoint.slug,
            source=source,
            trust=trust_all(services.providers, source),
        )
        tenant.webhook_id, tenant.ingest_token, tenant.webhook_secret = (
            hook.webhook.id,
            hook.ingest_token,
            hook.secret,
        )
    return tenant


async def signed_webhook(bench_db: BenchDatabase, key: str) -> tuple[str, str]:
    """A tenant with a GitHub webhook on ``bench_db`` (its services closed again, for a server
    process to take over): the webhook's ingest token and signing secret."""
    services = make_services(bench_db, key)
    try:
        tenant = await provision(services)
    finally:
        await services.sandbox.close()
        await services.db.dispose()
    assert tenant.ingest_token is not None and tenant.webhook_secret is not None
    return tenant.ingest_token, tenant.webhook_secret


# ---------------------------------------------------------------------------------------------
# MCP sessions and server processes (bench/serve.py: the app as `switchboard serve` builds it)


@contextlib.asynccontextmanager
async def mcp_client(base_url: str, token: str, extensions: Sequence[Any] = ()) -> AsyncIterator[Any]:
    """A live session on ``/mcp`` with the official SDK client: bearer ``sbk_`` token, the
    stateful handshake and the GET notification stream."""
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=300.0)
    )
    async with http:
        transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(transport, mode="legacy", extensions=list(extensions), cache=None) as client:
            yield client


async def tool(client: Any, name: str, **arguments: Any) -> dict[str, Any]:
    """Call an MCP tool; a tool error stops the benchmark with its code and message."""
    result = await client.call_tool(name, arguments)
    body = result.structured_content
    if result.is_error or not isinstance(body, dict):
        raise RuntimeError(f"{name} failed: {body or result.content}")
    return body


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    process: asyncio.subprocess.Process
    base_url: str
    log_path: Path
    port: int

    def peak_rss_mib(self) -> float | None:
        """The process's peak resident set (``VmHWM``) so far, in MiB (Linux)."""
        return _proc_status_kib(self.process.pid, "VmHWM")

    def rss_mib(self) -> float | None:
        return _proc_status_kib(self.process.pid, "VmRSS")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _proc_status_kib(pid: int, field_name: str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def server_env(bench_db: BenchDatabase | None, key: str | None, port: int) -> dict[str, str]:
    """The environment of a server process: this one's, less every ``SWITCHBOARD_*`` setting,
    plus the database, address and vault key of this benchmark, and the ingest flood guard off."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")},
        "SWITCHBOARD_HOST": "127.0.0.1",
        "SWITCHBOARD_PORT": str(port),
        "SWITCHBOARD_BASE_URL": f"http://127.0.0.1:{port}",
        # Every sender shares 127.0.0.1 and one webhook: the flood guard off, as an operator would.
        "SWITCHBOARD_INGEST_RATE": "0",
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    if bench_db is not None:
        env["SWITCHBOARD_DATABASE_URL"] = bench_db.url
    if key is not None:
        env["SWITCHBOARD_SECRET_ENCRYPTION_KEY"] = key
    return env


async def start_server(
    log_dir: Path,
    env: dict[str, str],
    *,
    module: str = "bench.serve",
    port: int | None = None,
    startup_timeout: float = 60.0,
) -> ServerProcess:
    """Start ``python -m <module>`` (it reads ``SWITCHBOARD_HOST``/``PORT`` from ``env``) and wait
    until ``GET /healthz`` answers 200. ``port`` reuses an address (a restart after a kill)."""
    import aiohttp

    port = port or free_port()
    env = {**env, "SWITCHBOARD_PORT": str(port), "SWITCHBOARD_BASE_URL": f"http://127.0.0.1:{port}"}
    log_path = log_dir / f"{module.rsplit('.', 1)[-1]}-{port}.log"
    with log_path.open("ab") as log_file:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            module,
            cwd=str(ROOT),
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    server = ServerProcess(process, f"http://127.0.0.1:{port}", log_path, port)
    try:
        deadline = time.monotonic() + startup_timeout
        async with aiohttp.ClientSession() as http:
            while True:
                if process.returncode is not None:
                    raise RuntimeError(f"{module} exited with {process.returncode}:\n{server.log_tail()}")
                try:
                    async with http.get(server.base_url + "/healthz") as response:
                        if response.status == 200:
                            return server
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{module} did not come up in {startup_timeout}s:\n{server.log_tail()}"
                    )
                await asyncio.sleep(0.1)
    except BaseException:
        await stop_server(server, kill=True)
        raise


async def stop_server(server: ServerProcess, *, kill: bool = False) -> None:
    """SIGTERM (a clean shutdown, 15 s at most) or SIGKILL; returns once the process is gone."""
    process = server.process
    if process.returncode is None:
        if kill:
            process.kill()
        else:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                process.kill()
    await process.wait()


@contextlib.asynccontextmanager
async def server_process(
    bench_db: BenchDatabase | None,
    key: str | None,
    *,
    env: dict[str, str] | None = None,
    module: str = "bench.serve",
    log_dir: Path | None = None,
    startup_timeout: float = 60.0,
) -> AsyncIterator[ServerProcess]:
    """Run ``python -m bench.serve`` (or another server module, e.g. the bare anchors) on a free
    127.0.0.1 port until the block ends (SIGTERM)."""
    port = free_port()
    directory = log_dir or (bench_db.directory if bench_db is not None else None)
    if directory is None:
        raise ValueError("a server process needs a log directory")
    server = await start_server(
        directory,
        {**server_env(bench_db, key, port), **(env or {})},
        module=module,
        port=port,
        startup_timeout=startup_timeout,
    )
    try:
        yield server
    finally:
        await stop_server(server)


@contextlib.asynccontextmanager
async def server_processes(
    count: int, bench_db: BenchDatabase | None, key: str | None, **options: Any
) -> AsyncIterator[list[ServerProcess]]:
    """``count`` of ``server_process`` at once (several processes of one database, each on its
    own port), all stopped when the block ends."""
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(server_process(bench_db, key, **options)) for _ in range(count)
        ]


# ---------------------------------------------------------------------------------------------
# Figures


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass
class Latencies:
    """Seconds in, milliseconds out."""

    values: list[float] = field(default_factory=list)

    def add(self, seconds: float) -> None:
        self.values.append(seconds)

    def extend(self, values: Iterable[float]) -> None:
        self.values.extend(values)

    def summary(self) -> dict[str, float | int]:
        ordered = sorted(self.values)
        if not ordered:
            return {"n": 0}
        return {
            "n": len(ordered),
            "p50_ms": round(percentile(ordered, 0.50) * 1000, 3),
            "p99_ms": round(percentile(ordered, 0.99) * 1000, 3),
            "mean_ms": round(sum(ordered) / len(ordered) * 1000, 3),
            "max_ms": round(ordered[-1] * 1000, 3),
        }


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    return {
        "date": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        # Other work on the machine shows up in every figure: report how busy it was.
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


async def postgres_version() -> str:
    engine = create_async_engine(pg_admin_url())
    try:
        async with engine.connect() as conn:
            version = str((await conn.execute(text("SHOW server_version"))).scalar())
    finally:
        await engine.dispose()
    return version.split()[0]


def new_key() -> str:
    """A fresh vault key for this run (so webhook secrets are stored encrypted, as in production)."""
    return generate_key()


class Report:
    """Prints each result as a table row and appends it to ``--json`` as one JSON line."""

    def __init__(self, benchmark: str, json_path: Path | None) -> None:
        self.benchmark = benchmark
        self.json_path = json_path
        self.rows: list[dict[str, Any]] = []
        # Fields every row gets until changed (``bench.ingest --rounds``: the round it belongs to).
        self.context: dict[str, Any] = {}

    def add(self, **row: Any) -> None:
        row = {"benchmark": self.benchmark, **self.context, **row}
        self.rows.append(row)
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items() if k != "benchmark"), flush=True)
        if self.json_path is not None:
            with self.json_path.open("a") as out:
                out.write(json.dumps({**row, "machine": machine()}) + "\n")


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run a benchmark's ``main``; an unreachable database or a failed step is one line on
    stderr and a non-zero exit, not a traceback (the server's log tail is in the message)."""
    from sqlalchemy.exc import DBAPIError

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except (OSError, DBAPIError) as exc:
        print(f"error: the database is unavailable ({type(exc).__name__}: {str(exc)[:300]})", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


def heading(text_: str) -> None:
    print(f"\n== {text_}", flush=True)
