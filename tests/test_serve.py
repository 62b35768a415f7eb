"""`switchboard serve` as an operator runs it: a real process, a real port, a clean stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update({"SWITCHBOARD_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"}, **extra)
    return env


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "server exited"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:  # noqa: S310 (our own loopback server)
                import json

                return json.load(resp)
        except OSError:
            time.sleep(0.2)
    raise AssertionError("server did not become healthy")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_upgrades_serves_and_stops_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "switchboard", "serve"],
        env=_env(tmp_path, SWITCHBOARD_PORT=str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_healthy(f"http://127.0.0.1:{port}/healthz", proc) == {
            "status": "ok",
            "database": "sqlite",
        }
        proc.send_signal(sig)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    logs = proc.stderr.read() if proc.stderr else ""
    assert "Traceback" not in logs
    # The database was migrated on start.
    assert (tmp_path / "sb.db").exists()


def test_serve_refuses_a_bad_setting_naming_the_variable(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "switchboard", "serve"],
        env=_env(tmp_path, SWITCHBOARD_PORT="not-a-port"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith("error: SWITCHBOARD_PORT:")
    assert "Traceback" not in proc.stderr


def test_db_upgrade_reports_an_unreachable_database(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "switchboard", "db", "upgrade"],
        env=_env(tmp_path, SWITCHBOARD_DATABASE_URL="postgresql+asyncpg://nobody@127.0.0.1:1/none"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert proc.stderr.startswith("error: unavailable:") and "Traceback" not in proc.stderr
