"""A private PostgreSQL cluster that a benchmark starts, crashes and removes itself.

``initdb`` into a temporary directory and ``pg_ctl start`` on a free port, listening on 127.0.0.1
only (its Unix socket in the same directory), so killing it can never touch the machine's shared
server on 5432. The binaries come from ``/usr/lib/postgresql/<newest>/bin`` (or ``$PG_BIN``).
PostgreSQL refuses to run as root: as root, every server command runs as the ``postgres`` user
(set by the subprocess, so the postmaster stays this process's child and its SIGKILL is reaped
here) and the directory is handed to that user; as anyone else, as that user.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import free_port

OS_USER = "postgres"
DATABASE = "sbbench"


def find_bindir() -> Path:
    env = os.environ.get("PG_BIN", "").strip()
    if env:
        return Path(env)
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if not found:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (set PG_BIN)")
    return found[-1].parent


@dataclass
class PgCluster:
    bindir: Path
    directory: Path
    port: int
    # (uid, gid) to run the server commands as, when this process is root.
    run_as: tuple[int, int] | None
    process: asyncio.subprocess.Process | None = None

    @property
    def datadir(self) -> Path:
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        return self.directory / "postgres.log"

    @property
    def url(self) -> str:
        """The benchmark's database in it, as a SQLAlchemy URL."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def _as_user(self) -> dict[str, Any]:
        env = {**os.environ, "LC_ALL": "C"}
        if self.run_as is None:
            return {"env": env}
        uid, gid = self.run_as
        return {"env": env, "user": uid, "group": gid, "extra_groups": []}

    async def run(self, tool: str, *args: str, timeout: float = 120.0) -> str:
        process = await asyncio.create_subprocess_exec(
            str(self.bindir / tool),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=str(self.directory),
            **self._as_user(),
        )
        out, _ = await asyncio.wait_for(process.communicate(), timeout)
        text = out.decode(errors="replace")
        if process.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed ({process.returncode}): {text[-800:]}")
        return text

    async def start(self, timeout: float = 120.0) -> float:
        """Start the postmaster as this process's own child (so a SIGKILL is reaped here at once,
        and the next start does not meet its lock file) and wait until it accepts connections
        (after a crash: until recovery has replayed the WAL); returns the seconds it took."""
        import asyncpg

        started = time.perf_counter()
        with self.log_path.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                str(self.bindir / "postgres"),
                "-D",
                str(self.datadir),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-k",
                str(self.directory),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(self.directory),
                **self._as_user(),
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.returncode is not None:
                raise RuntimeError(f"postgres exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                conn = await asyncpg.connect(
                    host="127.0.0.1", port=self.port, user="postgres", database="postgres", timeout=2
                )
            except (OSError, asyncpg.PostgresError, TimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not accept connections in {timeout}s") from None
                await asyncio.sleep(0.05)
                continue
            await conn.close()
            return time.perf_counter() - started

    async def kill9(self) -> int:
        """SIGKILL the postmaster and then every process it had started (backends, WAL writer,
        checkpointer): the database dies as it would in a power cut, with nothing flushed on the
        way out. Returns the number of processes killed."""
        if self.process is None or self.process.returncode is not None:
            raise RuntimeError("the private PostgreSQL is not running")
        children = _children(self.process.pid)
        self.process.kill()
        killed = 1
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
                killed += 1
        await self.process.wait()
        return killed

    async def stop(self) -> None:
        """A fast shutdown (SIGINT), or SIGKILL after 30 s."""
        if self.process is None or self.process.returncode is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:
            await self.kill9()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


@contextlib.asynccontextmanager
async def private_cluster() -> AsyncIterator[PgCluster]:
    """A fresh cluster with an empty ``sbbench`` database, running until the block ends; then
    stopped (immediate) and its directory removed."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    bindir = find_bindir()
    run_as: tuple[int, int] | None = None
    directory = Path(tempfile.mkdtemp(prefix="sbbench-pg-"))
    try:
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam(OS_USER)
            except KeyError:
                raise RuntimeError(f"running as root needs the {OS_USER!r} user for PostgreSQL") from None
            os.chown(directory, user.pw_uid, user.pw_gid)
            run_as = (user.pw_uid, user.pw_gid)
        cluster = PgCluster(bindir, directory, free_port(), run_as)
        await cluster.run("initdb", "-D", str(cluster.datadir), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        await cluster.start()
        try:
            engine = create_async_engine(
                f"postgresql+asyncpg://postgres@127.0.0.1:{cluster.port}/postgres",
                isolation_level="AUTOCOMMIT",
            )
            try:
                async with engine.connect() as conn:
                    await conn.execute(text(f'CREATE DATABASE "{DATABASE}"'))
            finally:
                await engine.dispose()
            yield cluster
        finally:
            await cluster.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
