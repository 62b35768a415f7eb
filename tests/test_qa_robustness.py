"""Adversarial QA: inputs the feature tests did not imagine, each found against the running product.

Every test here reproduces one finding: a NUL character that PostgreSQL refuses, a body the MCP
transport answered in plain text, a database outage that surfaced as a 500, a secret hidden in a URL
or an escape sequence, an ingest token printed by the HTTP parser's error log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import socket
import string
import subprocess
import sys
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner
from mcp_client import add_todo, connect, vend
from sqlalchemy import func, select

from switchboard import secretscan, tenancy
from switchboard.db import Database
from switchboard.logs import RedactingFilter, redact_path
from switchboard.models import Team, Todo
from switchboard.services import Services

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "qa", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"
UNREACHABLE = "postgresql+asyncpg://nobody@127.0.0.1:1/none"


# ---------------------------------------------------------------------------------------------
# /mcp


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("get_todo", {"todo_id": "td_\x00"}),
        ("claim", {"todo_id": "a\x00b"}),
        ("complete", {"todo_id": "\x00"}),
        ("reply", {"todo_id": "\x00", "text": "hello"}),
        ("rotate_connection", {"connection_id": "cn_\x00", "secret": "s"}),
        ("delete_connection", {"connection_id": "\x00"}),
        (
            "create_connection",
            {
                "kind": "github",
                "name": "n",
                "account_key": "github.com",
                "secret": "s",
                "endpoints": ["\x00"],
            },
        ),
    ],
)
async def test_a_nul_in_a_tool_argument_is_invalid_argument_on_every_engine(
    services: Services, base_url: str, tool: str, arguments: dict[str, Any]
) -> None:
    # PostgreSQL text cannot hold NUL: these answered `internal` there before.
    endpoint, token = await vend(services.db, families=["basics", "reply", "connections"])
    async with connect(base_url, token, endpoint) as agent:
        error = await agent.error(tool, **arguments)
    assert error["error"] == "invalid_argument"
    assert "NUL" in error["message"]


async def test_a_nul_inside_a_result_is_data_not_an_argument_error(services: Services, base_url: str) -> None:
    endpoint, token = await vend(services.db)
    todo = await add_todo(services.db, endpoint)
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        done = await agent.ok("complete", todo_id=todo.id, result={"note": "a\x00b"})
    assert done["state"] == "done"


async def _open_session(http: aiohttp.ClientSession, base_url: str, token: str) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT, "Content-Type": "application/json"}
    async with http.post(f"{base_url}/mcp", json=INIT, headers=headers) as resp:
        assert resp.status == 200
        session_id = resp.headers["Mcp-Session-Id"]
        await resp.read()
    return {**headers, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-06-18"}


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_mcp_post_with_a_wrong_content_type_gets_a_json_rpc_error(
    services: Services, base_url: str, content_type: str | None
) -> None:
    _, token = await vend(services.db)
    async with aiohttp.ClientSession() as http:
        headers = await _open_session(http, base_url, token)
        if content_type is None:
            headers.pop("Content-Type")
        else:
            headers["Content-Type"] = content_type
        body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode()
        async with http.post(f"{base_url}/mcp", data=body, headers=headers) as resp:
            assert resp.status == 415
            assert resp.content_type == "application/json"
            answer = await resp.json()
    assert answer["jsonrpc"] == "2.0" and answer["error"]["code"] == -32600
    assert "application/json" in answer["error"]["message"]


STATELESS = "2026-07-28"


@pytest.mark.parametrize(
    ("method", "accept", "status"),
    [("GET", ACCEPT, 405), ("DELETE", ACCEPT, 405), ("POST", "text/html", 406)],
)
async def test_the_stateless_revision_refuses_in_json_too(
    services: Services, base_url: str, method: str, accept: str, status: int
) -> None:
    # The SDK's stateless entry answered these with an empty body.
    _, token = await vend(services.db)
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": accept,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": STATELESS,
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with aiohttp.ClientSession() as http:
        async with http.request(method, f"{base_url}/mcp", json=body, headers=headers) as resp:
            assert resp.status == status
            assert resp.content_type == "application/json"
            answer = await resp.json()
            if status == 405:
                assert "POST" in resp.headers.get("Allow", "")
    assert answer["jsonrpc"] == "2.0" and answer["error"]["message"]


async def test_mcp_answers_503_json_while_the_database_is_unreachable(
    services: Services, base_url: str
) -> None:
    _, token = await vend(services.db)
    real = services.db
    services.db = Database(UNREACHABLE)
    try:
        async with aiohttp.ClientSession() as http:
            headers = {
                "Authorization": f"Bearer {token}",
                "Accept": ACCEPT,
                "Content-Type": "application/json",
            }
            async with http.post(f"{base_url}/mcp", json=INIT, headers=headers) as resp:
                assert resp.status == 503
                assert (await resp.json())["error"] == "unavailable"
    finally:
        await services.db.dispose()
        services.db = real


async def test_a_get_stream_with_last_event_id_opens_a_fresh_stream(
    services: Services, base_url: str
) -> None:
    # No event store: the SDK answered nothing and the bridge turned that into a 500.
    _, token = await vend(services.db)
    async with aiohttp.ClientSession() as http:
        headers = await _open_session(http, base_url, token)
        get_headers = {**headers, "Accept": "text/event-stream", "Last-Event-ID": "no-such-event"}
        get_headers.pop("Content-Type")
        async with http.get(f"{base_url}/mcp", headers=get_headers) as resp:
            assert resp.status == 200
            assert resp.content_type == "text/event-stream"


GZIP_JUNK = b"\x1f\x8bnot gzip at all"


@pytest.mark.parametrize("where", ["mcp", "api", "ingest"])
async def test_a_body_whose_content_encoding_does_not_decode_is_400_json(
    services: Services, base_url: str, where: str
) -> None:
    db = services.db
    human, human_token = await tenancy.add_human(db, "ada")
    endpoint, token = await vend(db, owner=tenancy.Owner(human_id=human.id))
    created = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug=endpoint.slug, source="generic"
    )
    url, headers = {
        "mcp": (f"{base_url}/mcp", {"Authorization": f"Bearer {token}", "Accept": ACCEPT}),
        "api": (f"{base_url}/api/v1/teams", {"Authorization": f"Bearer {human_token}"}),
        "ingest": (f"{base_url}/webhooks/{created.ingest_token}", {}),
    }[where]
    headers = {**headers, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=GZIP_JUNK, headers=headers) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"] == "invalid_body"
        # Nothing was stored, and the server still answers.
        async with http.get(f"{base_url}/healthz") as resp:
            assert resp.status == 200
    async with db.read() as s:
        assert (await s.scalar(select(func.count()).select_from(Todo))) == 0
        assert (await s.scalar(select(func.count()).select_from(Team))) == 0


async def test_a_tool_call_on_a_read_only_database_is_unavailable(
    services: Services, base_url: str, tmp_path: Any
) -> None:
    if services.db.dialect != "sqlite":
        pytest.skip("a read-only SQLite file stands in for a database refusing writes")
    endpoint, token = await vend(services.db)
    todo = await add_todo(services.db, endpoint)
    path = services.db.url.split("///", 1)[1]
    real = services.db
    async with connect(base_url, token, endpoint) as agent:
        services.db = Database(f"sqlite+aiosqlite:///file:{path}?mode=ro&uri=true")
        try:
            error = await agent.error("claim", todo_id=todo.id)
        finally:
            await services.db.dispose()
            services.db = real
        assert error["error"] == "unavailable"
        # Nothing was half-done: the todo can be claimed once the database takes writes again.
        assert (await agent.ok("claim", todo_id=todo.id))["state"] == "claimed"


async def test_a_background_task_logs_a_database_outage_once_without_a_traceback(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    from switchboard.app import Job, run_periodically

    passes: list[str] = []
    down_a_while, up_a_while = asyncio.Event(), asyncio.Event()

    async def pass_(svc: Services) -> None:
        passes.append(svc.db.url)
        if len(passes) >= 5:
            down_a_while.set()
        if len(passes) >= 8:
            up_a_while.set()
        async with svc.db.read() as s:
            await s.execute(select(func.count()).select_from(Todo))

    real = services.db
    services.db = Database(UNREACHABLE)
    caplog.set_level(logging.INFO, logger="switchboard")
    task = asyncio.create_task(run_periodically(Job("qa-probe", 0.01, lambda: pass_(services))))
    try:
        await asyncio.wait_for(down_a_while.wait(), 10)
        await services.db.dispose()
        services.db = real
        await asyncio.wait_for(up_a_while.wait(), 10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if services.db is not real:
            await services.db.dispose()
            services.db = real
    records = [r for r in caplog.records if "qa-probe" in r.getMessage()]
    assert [r.levelname for r in records] == ["WARNING", "INFO"], [r.getMessage() for r in records]
    assert all(r.exc_info is None for r in records)


# ---------------------------------------------------------------------------------------------
# Ingest


async def test_ingest_answers_503_json_while_the_database_is_unreachable(
    services: Services, base_url: str
) -> None:
    db = services.db
    await tenancy.add_human(db, "ada")
    await tenancy.vend_endpoint(db, name="ada-agent", owner=await tenancy.resolve_owner(db, human="ada"))
    created = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="ada-agent", source="generic"
    )
    services.db = Database(UNREACHABLE)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base_url}/webhooks/{created.ingest_token}", json={"a": 1}) as resp:
                assert resp.status == 503
                answer = await resp.json()
        assert answer["error"] == "unavailable"
        assert created.ingest_token not in json.dumps(answer)
    finally:
        await services.db.dispose()
        services.db = db
    # The sender's retry, once the database is back, is stored.
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base_url}/webhooks/{created.ingest_token}", json={"a": 1}) as resp:
            assert resp.status == 202 and (await resp.json())["created"] == 1


async def test_a_sender_that_stalls_mid_body_gets_408_and_nothing_is_stored(
    services: Services, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from switchboard import ingest

    monkeypatch.setattr(ingest, "BODY_READ_SECONDS", 0.5)
    db = services.db
    await tenancy.add_human(db, "ada")
    await tenancy.vend_endpoint(db, name="ada-agent", owner=await tenancy.resolve_owner(db, human="ada"))
    created = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="ada-agent", source="generic"
    )
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            f"POST /webhooks/{created.ingest_token} HTTP/1.1\r\nHost: {host}\r\n"
            'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a":'.encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 408")
    finally:
        writer.close()
    async with db.read() as s:
        assert (await s.scalar(select(func.count()).select_from(Todo))) == 0


# ---------------------------------------------------------------------------------------------
# Logs: an ingest token is a credential and travels in the path


TOKEN = "wh_" + "Q" * 32


@pytest.mark.parametrize(
    "path",
    [
        f"/webhooks/{TOKEN}",
        f"/webhooks//{TOKEN}",
        f"/WEBHOOKS/{TOKEN}",
        f"/webhooks/{TOKEN}/extra",
        f"//webhooks/{TOKEN}?x=1",
    ],
)
def test_every_spelling_of_an_ingest_path_is_redacted(path: str) -> None:
    redacted = redact_path(path)
    assert TOKEN not in redacted and TOKEN[:8] in redacted


def test_the_log_filter_redacts_an_http_parser_error_naming_the_request_line() -> None:
    """aiohttp logs an over-long request line (the whole ingest URL) with a traceback."""
    from aiohttp.http_exceptions import LineTooLong

    try:
        raise LineTooLong(f"/webhooks/{TOKEN}?x=aaaa"[:100] + "...", "8190")
    except LineTooLong:
        import sys

        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "aiohttp.server",
        logging.ERROR,
        __file__,
        1,
        "Error handling request from %s",
        ("127.0.0.1",),
        exc_info,
    )
    assert RedactingFilter().filter(record)
    text = logging.Formatter().format(record)
    assert TOKEN not in text
    assert "Traceback" not in text and "\n" not in text
    assert record.levelno == logging.WARNING and "127.0.0.1" in text


def test_the_log_filter_redacts_tokens_in_any_message_and_traceback() -> None:
    try:
        raise RuntimeError(f"failed on /webhooks/{TOKEN}")
    except RuntimeError:
        import sys

        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "switchboard.x", logging.ERROR, __file__, 1, "posting to %s", (f"/webhooks/{TOKEN}",), exc_info
    )
    assert RedactingFilter().filter(record)
    from switchboard.logs import JsonFormatter

    for formatter in (logging.Formatter(), JsonFormatter()):
        text = formatter.format(record)
        assert TOKEN not in text and "RuntimeError" in text


# ---------------------------------------------------------------------------------------------
# Reply


@pytest.mark.parametrize("text", ["\u200b", "\ufeff\u200b\u200d", "\u2060 \u00a0\u3000", "\u202e\x07"])
async def test_a_reply_of_only_invisible_characters_is_empty(
    services: Services, base_url: str, text: str
) -> None:
    # str.strip() keeps zero-width spaces and BOMs: this posted an empty-looking public comment.
    endpoint, token = await vend(services.db, families=["basics", "reply"])
    todo = await add_todo(services.db, endpoint)
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        error = await agent.error("reply", todo_id=todo.id, text=text)
    assert error == {"error": "invalid_argument", "message": "text must not be empty"}


async def test_a_reply_with_visible_text_among_invisible_ones_gets_past_the_emptiness_check(
    services: Services, base_url: str
) -> None:
    endpoint, token = await vend(services.db, families=["basics", "reply"])
    todo = await add_todo(services.db, endpoint)
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        error = await agent.error("reply", todo_id=todo.id, text="\u200bok\u200b")
    # The next check in order: this todo has no reply address.
    assert error["error"] == "no_reply_address"


# ---------------------------------------------------------------------------------------------
# Secret scan: where a pasted token really sits in a reply

_rng = random.Random(20261130)


def _token() -> str:
    return "gh" + "p_" + "".join(_rng.choice(string.ascii_letters + string.digits) for _ in range(36))


@pytest.mark.parametrize(
    "wrap",
    [
        "```\n{t}\n```",
        "https://x-access-token:{t}@github.com/acme/api.git",
        "https://api.example.com/v1?token={t}&page=2",
        "curl 'https://api.example.com/?q=token%3D{t}'",
        "https://example.com/a%20{t}%0A",
        "italic _{t}_ in Markdown",
        "GITHUB_TOKEN={t}",
        'print("first line\\n{t}")',
        '{{"config": "a\\t{t}"}}',
    ],
)
def test_a_token_in_a_code_fence_url_or_escape_is_caught(wrap: str) -> None:
    found = secretscan.scan(wrap.format(t=_token()))
    assert found is not None and found.id == "github-pat"


def test_a_token_glued_to_letters_is_still_not_one() -> None:
    assert secretscan.scan("x" + _token()) is None
    assert secretscan.scan("100%25 done, the 50%20 rule, a\\nb") is None
    # An identifier of words is not a key; `MY_ghp_…` is a token (issue 13: tests/test_secretscan.py).
    assert secretscan.scan("set use_sk_test_placeholder") is None


# ---------------------------------------------------------------------------------------------
# CLI


@pytest.mark.parametrize("payload", ["[" * 100_000, "1" * 5000])
def test_cli_todo_push_with_a_hostile_payload_is_one_line(
    tmp_path: Any, monkeypatch: Any, payload: str
) -> None:
    from switchboard.cli import main

    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'none.db'}")
    result = CliRunner().invoke(
        main, ["todo", "push", "--endpoint", "x", "--title", "t", "--payload", payload]
    )
    assert result.exit_code == 1
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("error: invalid_argument: --payload is not valid JSON")
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("argv", [["todo", "show", b"td_\xff"], ["endpoint", "vend", "--name", b"x\xffy"]])
def test_cli_argument_that_is_not_utf8_is_a_usage_line(tmp_path: Any, argv: list[Any]) -> None:
    # Such bytes reached the database driver as lone surrogates: "internal: UnicodeEncodeError".
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"
    args = [os.fsencode(a) if isinstance(a, str) else a for a in argv]
    command = [sys.executable, "-m", "switchboard", *args]
    proc = subprocess.run(command, env=env, capture_output=True, timeout=60)  # noqa: S603 (our own CLI)
    assert proc.returncode == 2
    assert proc.stderr.decode() == "error: usage: a command-line argument is not valid UTF-8\n"


@pytest.mark.parametrize("where", ["taken", "unresolvable"])
def test_serve_that_cannot_listen_says_so_in_one_line(tmp_path: Any, where: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        if where == "taken":
            env.update(SWITCHBOARD_HOST="127.0.0.1", SWITCHBOARD_PORT=str(holder.getsockname()[1]))
        else:
            env.update(SWITCHBOARD_HOST="no-such-host.invalid", SWITCHBOARD_PORT="0")
        command = [sys.executable, "-m", "switchboard", "serve"]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)  # noqa: S603
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: unavailable: cannot listen on ")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_serve_at_debug_without_a_key_logs_no_secret(tmp_path: Any) -> None:
    """A real `switchboard serve` at LOG_LEVEL=DEBUG with no encryption key (secrets stored in
    plaintext). The SQLite driver logged every statement with its parameters at DEBUG (hundreds of
    lines a second, sender-controlled titles and web CSRF tokens among them); bytes columns only
    escaped by luck, as memoryview reprs."""
    import asyncio as aio
    import hashlib
    import hmac
    import signal
    import time
    import urllib.request

    from switchboard import db as db_mod

    url = f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"
    db_mod.upgrade(url)

    async def add_human() -> str:
        database = Database(url)
        try:
            return (await tenancy.add_human(database, "ada"))[1]
        finally:
            await database.dispose()

    human_token = aio.run(add_human())
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(SWITCHBOARD_DATABASE_URL=url, SWITCHBOARD_PORT=str(port), SWITCHBOARD_LOG_LEVEL="DEBUG")
    command = [sys.executable, "-m", "switchboard", "serve"]
    # A file, not a pipe: an undrained pipe would block the server once its buffer is full.
    log_path = tmp_path / "serve.log"
    log_file = log_path.open("w")
    proc = subprocess.Popen(command, env=env, stdout=log_file, stderr=log_file)  # noqa: S603
    base = f"http://127.0.0.1:{port}"

    def call(method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(base + path, data=data, method=method, headers=headers or {})  # noqa: S310
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 (our own loopback server)
            return json.load(resp)

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                call("GET", "/healthz")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        auth = {"Authorization": f"Bearer {human_token}", "Content-Type": "application/json"}
        vended = call("POST", "/api/v1/endpoints", {"name": "Ada Bot"}, auth)
        hook = call("POST", "/api/v1/webhooks", {"endpoint": "ada-bot", "source": "github"}, auth)
        body = json.dumps({"zen": "hi", "hook_id": 1}).encode()
        signature = "sha256=" + hmac.new(hook["secret"].encode(), body, hashlib.sha256).hexdigest()
        ingest_token = hook["ingest_url"].rsplit("/", 1)[1]
        delivered = call(
            "POST",
            f"/webhooks/{ingest_token}",
            body,
            {
                "X-Hub-Signature-256": signature,
                "X-GitHub-Event": "ping",
                "X-GitHub-Delivery": "d-1",
                "Content-Type": "application/json",
            },
        )
        assert delivered["disposition"] == "ignored"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log_file.close()
    logs = log_path.read_text()
    assert "DEBUG" in logs  # the level really was DEBUG
    assert "aiosqlite" not in logs and "INSERT INTO" not in logs
    for secret in (hook["secret"], vended["token"], human_token, ingest_token, signature.split("=")[1]):
        assert secret not in logs
