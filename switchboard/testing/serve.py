"""A real ``switchboard serve`` process, as an operator runs it: a subprocess on a free 127.0.0.1 port,
configured only through ``SWITCHBOARD_*`` environment variables, with its log in a file; and the
``switchboard`` CLI run as a subprocess with the same environment.

Settings are named as in ``switchboard.settings.Settings`` (``log_level``, ``github_api_url``, …) and
become ``SWITCHBOARD_<NAME>``; a value of None leaves the variable unset. Every ``SWITCHBOARD_*``
variable of the test process itself is dropped, so nothing leaks in from the shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from switchboard.settings import ENV_PREFIX

# Subprocess start-up dominates; a server that is not healthy by then is broken, not slow.
SERVER_START_TIMEOUT = 30.0
CLI_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    # A pydantic SecretStr (e.g. a Settings' encryption key) is passed on as its value.
    reveal = getattr(value, "get_secret_value", None)
    return str(reveal() if callable(reveal) else value)


def serve_env(settings: Mapping[str, object], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a ``switchboard`` subprocess: ``base`` (default: this process's) without
    any ``SWITCHBOARD_*`` variable, plus ``SWITCHBOARD_<NAME>`` for each setting that is not None."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith(ENV_PREFIX)}
    for name, value in settings.items():
        if value is not None:
            env[ENV_PREFIX + name.upper()] = _env_value(value)
    return env


@dataclass(frozen=True)
class CliRun:
    """A finished ``switchboard`` command: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@dataclass
class ServeProcess:
    """One ``switchboard serve`` process and the environment its operator's CLI shares with it.

    ``launch()`` starts it, ``ready()`` waits for ``/healthz``; in between, the CLI can set things up
    (it needs no server). ``stop()`` sends SIGTERM (or the given signal) and returns the exit status.
    """

    env: dict[str, str] = field(repr=False)
    base_url: str
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    # Values the test wants kept out of the log (check_log looks for each).
    secrets: list[str] = field(default_factory=list)

    async def run(self, *args: str, stdin: str | None = None, timeout: float = CLI_TIMEOUT) -> CliRun:
        """``switchboard ARGS`` with this server's environment; waits for it to finish."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "switchboard",
            *args,
            env=self.env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(stdin.encode() if stdin is not None else None), timeout
            )
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None
        return CliRun(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))

    async def cli(self, *args: str, stdin: str | None = None) -> dict[str, Any]:
        """Run ``switchboard ARGS --json`` as the operator would; the one JSON object it prints
        (the command must succeed)."""
        done = await self.run(*args, "--json", stdin=stdin)
        assert done.returncode == 0, f"switchboard {' '.join(args)} exited {done.returncode}: {done.stderr}"
        answer = json.loads(done.stdout)
        assert isinstance(answer, dict)
        return answer

    async def launch(self) -> None:
        """Start ``switchboard serve``; stdout and stderr go to ``log_path`` (a file: an undrained
        pipe would block the server once its buffer is full)."""
        assert self.process is None, "this server was already launched"
        with self.log_path.open("ab") as log:
            # The child holds its own descriptor.
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "switchboard", "serve", env=self.env, stdout=log, stderr=log
            )

    async def ready(self, timeout: float = SERVER_START_TIMEOUT) -> None:
        """Wait until ``/healthz`` answers 200 (failing at once if the process exits)."""
        assert self.process is not None, "launch() first"
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                assert self.process.returncode is None, f"serve exited early:\n{self.log()}"
                try:
                    async with http.get(f"{self.base_url}/healthz") as resp:
                        if resp.status == 200:
                            return
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"serve did not become healthy:\n{self.log()}")

    async def start(self) -> ServeProcess:
        """Launch and wait until healthy."""
        await self.launch()
        await self.ready()
        return self

    async def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
        """Signal the server and wait for it to exit; its exit status. Killed if it does not stop."""
        assert self.process is not None, "launch() first"
        if self.process.returncode is None:
            self.process.send_signal(sig)
            try:
                return await asyncio.wait_for(self.process.wait(), timeout)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
                raise
        return self.process.returncode

    def log(self) -> str:
        """Everything the server printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def check_log(self) -> str:
        """The log, asserted free of tracebacks and of every value in ``secrets``."""
        log = self.log()
        assert "Traceback" not in log, log
        for secret in self.secrets:
            assert secret not in log, "a secret reached the server log"
        return log


def serve_process(settings: Mapping[str, object], log_path: Path) -> ServeProcess:
    """A not yet launched server with these settings. ``port`` defaults to a free one, ``host`` to
    127.0.0.1, and ``base_url`` to the address it listens on."""
    values: dict[str, object] = {"host": "127.0.0.1", **settings}
    if values.get("port") is None:
        values["port"] = free_port()
    values.setdefault("base_url", f"http://127.0.0.1:{values['port']}")
    return ServeProcess(
        env=serve_env(values), base_url=f"http://127.0.0.1:{values['port']}", log_path=log_path
    )


class ServeProcesses:
    """Starts ``switchboard serve`` processes for one test and stops them all at its end (the
    ``switchboard_serve`` fixture). ``defaults`` are the settings every process gets unless the test
    overrides them; ``folder`` holds the logs."""

    def __init__(self, defaults: Mapping[str, object], folder: Path, extra_env: Mapping[str, str]) -> None:
        self.defaults = dict(defaults)
        self.folder = folder
        self.extra_env = dict(extra_env)
        self.processes: list[ServeProcess] = []

    def new(self, settings: Mapping[str, object] | None = None, *, name: str = "serve") -> ServeProcess:
        """A server with the defaults updated by ``settings``, not yet launched (so the CLI can set
        things up first); its log is ``<name>.log``."""
        process = serve_process({**self.defaults, **(settings or {})}, self.folder / f"{name}.log")
        process.env.update(self.extra_env)
        self.processes.append(process)
        return process

    async def start(
        self, settings: Mapping[str, object] | None = None, *, name: str = "serve"
    ) -> ServeProcess:
        """A server launched and healthy."""
        return await self.new(settings, name=name).start()

    async def close(self) -> None:
        """Stop every process still running (SIGTERM, then SIGKILL if it does not exit in time)."""
        for process in self.processes:
            if process.process is not None and process.process.returncode is None:
                # On a timeout stop() has already killed it.
                with contextlib.suppress(TimeoutError):
                    await process.stop()
