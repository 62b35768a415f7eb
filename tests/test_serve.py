"""`switchboard serve` as an operator runs it: a real process, a real port, a clean stop, one line
when it cannot start, and a log with no secret in it."""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path

import aiohttp
import pytest

from switchboard import migrate, tenancy
from switchboard.db import Database
from switchboard.testing import ServeProcesses, github_headers


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_serve_upgrades_serves_and_stops_cleanly(
    switchboard_serve: ServeProcesses, tmp_path: Path, sig: signal.Signals
) -> None:
    # A database file that does not exist yet: serve creates and migrates it on start.
    sb = switchboard_serve.new({"database_url": f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"})
    await sb.start()
    async with aiohttp.ClientSession() as http, http.get(f"{sb.base_url}/healthz") as resp:
        assert await resp.json() == {"status": "ok", "database": "sqlite"}
    # Said once its socket listens, naming where.
    assert f"serving on {sb.base_url} (database: sqlite)" in sb.log()
    assert await sb.stop(sig) == 0
    sb.check_log()
    assert (tmp_path / "sb.db").exists()


async def test_serve_refuses_a_bad_setting_naming_the_variable(switchboard_serve: ServeProcesses) -> None:
    done = await switchboard_serve.new({"port": "not-a-port"}).run("serve", timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("error: SWITCHBOARD_PORT:")
    assert "Traceback" not in done.stderr


async def test_db_upgrade_reports_an_unreachable_database(switchboard_serve: ServeProcesses) -> None:
    unreachable = {"database_url": "postgresql+asyncpg://nobody@127.0.0.1:1/none"}
    done = await switchboard_serve.new(unreachable).run("db", "upgrade", timeout=60)
    assert done.returncode != 0
    assert done.stderr.startswith("error: unavailable:") and "Traceback" not in done.stderr


@pytest.mark.parametrize("where", ["taken", "unresolvable"])
async def test_serve_that_cannot_listen_says_so_in_one_line(
    switchboard_serve: ServeProcesses, tmp_path: Path, where: str
) -> None:
    database = {"database_url": f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"}
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        if where == "taken":
            listen = {"host": "127.0.0.1", "port": holder.getsockname()[1]}
        else:
            listen = {"host": "no-such-host.invalid", "port": 0}
        done = await switchboard_serve.new({**database, **listen}).run("serve", timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: unavailable: cannot listen on ")
    # It never claimed to be serving first.
    assert "serving on" not in done.stderr


async def test_serve_at_debug_without_a_key_logs_no_secret(
    switchboard_serve: ServeProcesses, tmp_path: Path
) -> None:
    """A real `switchboard serve` at LOG_LEVEL=DEBUG with no encryption key (secrets stored in
    plaintext). The SQLite driver logged every statement with its parameters at DEBUG (hundreds of
    lines a second, sender-controlled titles and web CSRF tokens among them); bytes columns only
    escaped by luck, as memoryview reprs."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"
    # upgrade() runs its own event loop, so it gets a thread of its own.
    await asyncio.to_thread(migrate.upgrade, url)
    database = Database(url)
    try:
        human_token = (await tenancy.add_human(database, "ada"))[1]
    finally:
        await database.dispose()
    sb = await switchboard_serve.start(
        {"database_url": url, "log_level": "DEBUG", "secret_encryption_key": None}
    )

    async with aiohttp.ClientSession(base_url=sb.base_url, raise_for_status=True) as http:
        auth = {"Authorization": f"Bearer {human_token}"}
        async with http.post("/api/v1/endpoints", json={"name": "Ada Bot"}, headers=auth) as resp:
            vended = await resp.json()
        async with http.post(
            "/api/v1/webhooks",
            json={"endpoint": "ada-bot", "source": "github", "trust": {"allow_all": True}},
            headers=auth,
        ) as resp:
            hook = await resp.json()
        body = b'{"zen": "hi", "hook_id": 1}'
        headers = github_headers(hook["secret"], body, "ping", "d-1")
        ingest_token = hook["ingest_url"].rsplit("/", 1)[1]
        async with http.post(f"/webhooks/{ingest_token}", data=body, headers=headers) as resp:
            assert (await resp.json())["disposition"] == "ignored"
        # The request's access line (kept until the event loop's turn ends, logs.LineHandler) is
        # in the log while the server still runs, its token shortened.
        line = f'"POST /webhooks/{ingest_token[:8]}…" 202 '
        for _ in range(100):
            if line in sb.log():
                break
            await asyncio.sleep(0.05)
        assert line in sb.log() and " INFO aiohttp.access: " in sb.log()
    assert await sb.stop() == 0

    logs = sb.log()
    assert "DEBUG" in logs  # the level really was DEBUG
    assert "aiosqlite" not in logs and "INSERT INTO" not in logs
    signature = headers["X-Hub-Signature-256"].split("=")[1]
    for secret in (hook["secret"], vended["token"], human_token, ingest_token, signature):
        assert secret not in logs


async def test_serve_with_a_metrics_token_keeps_metrics_to_the_scraper(
    switchboard_serve: ServeProcesses, tmp_path: Path
) -> None:
    token = "scraper-token-0123456789abcdef"
    url = f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"
    sb = await switchboard_serve.start({"database_url": url, "log_level": "DEBUG", "metrics_token": token})
    sb.secrets.append(token)
    async with aiohttp.ClientSession(base_url=sb.base_url) as http:
        async with http.get("/metrics") as resp:
            assert resp.status == 401
            assert (await resp.json())["error"] == "unauthorized"
        async with http.get("/metrics", headers={"Authorization": f"Bearer {token}"}) as resp:
            assert resp.status == 200
            assert "# TYPE switchboard_ingest_total counter" in await resp.text()
    assert await sb.stop() == 0
    log = sb.check_log()
    assert "/metrics answers anyone" not in log

    # Without one, the server says at start that /metrics is open.
    open_one = await switchboard_serve.start({"database_url": url}, name="open")
    async with aiohttp.ClientSession(base_url=open_one.base_url) as http, http.get("/metrics") as resp:
        assert resp.status == 200
    assert await open_one.stop() == 0
    assert "/metrics answers anyone who reaches this port" in open_one.check_log()
