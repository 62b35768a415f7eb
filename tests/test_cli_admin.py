"""The admin CLI end to end on the configured database (SQLite, or PostgreSQL when the run asks).

Every command is driven through click's ``CliRunner`` exactly as an operator types it (and a few
through a real ``switchboard`` subprocess); the raw tables are then read back to prove that tokens
are stored only as hashes and secrets only encrypted.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from click.testing import CliRunner, Result
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from switchboard import tenancy, todos
from switchboard.cli import main
from switchboard.db import Database, utcnow
from switchboard.ids import new_id, token_hash
from switchboard.models import Base, Reply

BASE_URL = "https://switchboard.example.test"
# A fixed key for these runs only (the same shape `switchboard keygen` prints).
TEST_ENCRYPTION_KEY = base64.b64encode(bytes(range(100, 132))).decode()
Cli = Callable[..., Result]
T = TypeVar("T")


def _env(database_url: str, *, key: bool = True) -> dict[str, str]:
    env = {
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_BASE_URL": BASE_URL,
        "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY if key else "",
    }
    return env


def _runner(env: dict[str, str]) -> Cli:
    runner = CliRunner(env=env)

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(main, list(args), input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def cli(database_url: str) -> Cli:
    return _runner(_env(database_url))


@pytest.fixture
def cli_nokey(database_url: str) -> Cli:
    return _runner(_env(database_url, key=False))


def ok(result: Result) -> dict[str, Any]:
    """The one JSON object a successful ``--json`` command printed."""
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stderr == "", result.stderr
    return json.loads(result.stdout)


def err(result: Result, code: str, exit_code: int = 1) -> str:
    """A refused command: non-zero exit, one line on stderr naming the code, nothing on stdout."""
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {code}"), lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


def dump_database(database_url: str) -> str:
    """Every value of every table, as one string to search for leaked secrets."""

    async def go() -> str:
        engine = create_async_engine(database_url)
        parts: list[str] = []
        try:
            async with engine.connect() as conn:
                for table in Base.metadata.sorted_tables:
                    for row in await conn.execute(text(f'SELECT * FROM "{table.name}"')):
                        for value in row:
                            if isinstance(value, bytes | memoryview):
                                parts.append(bytes(value).decode("latin-1"))
                            else:
                                parts.append(str(value))
        finally:
            await engine.dispose()
        return "\n".join(parts)

    return asyncio.run(go())


def in_db(database_url: str, fn: Callable[[Database], Awaitable[T]]) -> T:
    async def go() -> T:
        db = Database(database_url)
        try:
            return await fn(db)
        finally:
            await db.dispose()

    return asyncio.run(go())


def count(database_url: str, table: str) -> int:
    async def go() -> int:
        engine = create_async_engine(database_url)
        try:
            async with engine.connect() as conn:
                return int((await conn.execute(text(f'SELECT count(*) FROM "{table}"'))).scalar_one())
        finally:
            await engine.dispose()

    return asyncio.run(go())


def setup_alice(cli: Cli) -> str:
    """Human alice with an endpoint ``alice-bot`` on queues triage and ci; returns her sbo_ token."""
    token = ok(cli("human", "add", "alice", "--json"))["token"]
    ok(
        cli(
            "endpoint",
            "vend",
            "--name",
            "Alice Bot",
            "--owner",
            "alice",
            "--queue",
            "triage",
            "--queue",
            "ci",
            "--json",
        )
    )
    return token


# ---------------------------------------------------------------------------------------------
# Humans


def test_human_add_shows_the_token_once_and_stores_only_its_hash(cli: Cli, database_url: str) -> None:
    result = cli("human", "add", "alice", "--email", "alice@example.com")
    assert result.exit_code == 0
    token = next(w for w in result.stdout.split() if w.startswith("sbo_"))
    assert "shown once" in result.stdout

    listing = cli("human", "list")
    assert "alice" in listing.stdout and "alice@example.com" in listing.stdout
    assert token not in listing.stdout
    rows = ok(cli("human", "list", "--json"))["humans"]
    assert [h["handle"] for h in rows] == ["alice"]
    assert token not in json.dumps(rows) and rows[0]["token_prefix"].startswith("sbo_")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", rows[0]["created_at"])  # RFC 3339 UTC

    raw = dump_database(database_url)
    assert token not in raw and token_hash(token) in raw


def test_human_add_refuses_duplicates_bad_handles_and_bad_emails(cli: Cli, database_url: str) -> None:
    ok(cli("human", "add", "alice", "--json"))
    assert "already exists" in err(cli("human", "add", "alice"), "conflict")
    err(cli("human", "add", "Alice"), "invalid_argument")
    err(cli("human", "add", "--", "-alice"), "invalid_argument")
    err(cli("human", "add", "-alice"), "usage", exit_code=2)  # click's own errors are one line too
    err(cli("human", "add", "a" * 64), "invalid_argument")
    err(cli("human", "add", "bob", "--email", "not an email"), "invalid_argument")
    assert count(database_url, "humans") == 1


# ---------------------------------------------------------------------------------------------
# Teams


def test_team_lifecycle_and_membership_rules(cli: Cli, database_url: str) -> None:
    for handle in ("alice", "bob", "carol"):
        ok(cli("human", "add", handle, "--json"))
    team = ok(cli("team", "add", "ops", "--owner", "alice", "--json"))["team"]
    assert team["members"] == [{"handle": "alice", "role": "owner"}]
    assert ok(cli("team", "member", "add", "ops", "bob", "--role", "admin", "--json"))["role"] == "admin"
    ok(cli("team", "member", "add", "ops", "carol", "--json"))
    listed = ok(cli("team", "list", "--json"))["teams"]
    assert listed[0]["members"] == [
        {"handle": "alice", "role": "owner"},
        {"handle": "bob", "role": "admin"},
        {"handle": "carol", "role": "member"},
    ]
    assert "alice (owner)" in cli("team", "list").stdout

    err(cli("team", "add", "ops", "--owner", "bob"), "conflict")
    err(cli("team", "add", "Bad Team", "--owner", "bob"), "invalid_argument")
    err(cli("team", "add", "dev", "--owner", "nobody"), "not_found")
    err(cli("team", "member", "add", "nope", "bob"), "not_found")
    err(cli("team", "member", "add", "ops", "nobody"), "not_found")
    err(cli("team", "member", "remove", "ops", "alice"), "conflict")  # the last owner stays
    err(cli("team", "member", "add", "ops", "alice", "--role", "member"), "conflict")
    assert "boss" in err(cli("team", "member", "add", "ops", "bob", "--role", "boss"), "usage", 2)

    ok(cli("team", "member", "remove", "ops", "carol", "--json"))
    err(cli("team", "member", "remove", "ops", "carol"), "not_found")
    assert count(database_url, "teams") == 1
    assert count(database_url, "memberships") == 2


# ---------------------------------------------------------------------------------------------
# Endpoints


def test_endpoint_vend_prints_token_and_mcp_url_once(cli: Cli, database_url: str) -> None:
    ok(cli("human", "add", "alice", "--json"))
    result = cli("endpoint", "vend", "--name", "Alice Bot", "--owner", "alice")
    assert result.exit_code == 0
    assert f"MCP URL: {BASE_URL}/mcp" in result.stdout
    token = next(w for w in result.stdout.split() if w.startswith("sbk_"))
    assert "WARNING" not in result.stdout

    data = ok(cli("endpoint", "list", "--json"))
    (endpoint,) = data["endpoints"]
    assert endpoint["slug"] == "alice-bot" and endpoint["owner"] == "human:alice"
    assert endpoint["families"] == ["basics"] and "reply" not in endpoint["verbs"]
    assert token not in json.dumps(data) and token not in cli("endpoint", "list").stdout
    raw = dump_database(database_url)
    assert token not in raw and token_hash(token) in raw


def test_endpoint_vend_grants_are_opt_in_and_connection_verbs_are_flagged(cli: Cli) -> None:
    ok(cli("human", "add", "alice", "--json"))
    ok(cli("team", "add", "ops", "--owner", "alice", "--json"))
    replying = ok(cli("endpoint", "vend", "--name", "replier", "--owner", "alice", "--reply", "--json"))
    assert replying["endpoint"]["families"] == ["basics", "reply"]
    assert "warning" not in replying and replying["mcp_url"] == f"{BASE_URL}/mcp"

    flagged = cli("endpoint", "vend", "--name", "keyholder", "--team", "ops", "--connection-verbs")
    assert flagged.exit_code == 0
    assert "WARNING" in flagged.stdout and "outbound credentials" in flagged.stdout
    as_json = ok(
        cli(
            "endpoint",
            "vend",
            "--name",
            "other",
            "--team",
            "ops",
            "--family",
            "connections",
            "--expires-in-days",
            "30",
            "--queue",
            "ci",
            "--json",
        )
    )
    assert "outbound credentials" in as_json["warning"]
    assert as_json["endpoint"]["owner"] == "team:ops"
    assert as_json["endpoint"]["queues"] == ["ci"] and as_json["endpoint"]["expires_at"]
    assert "create_connection" in as_json["endpoint"]["verbs"]

    team_only = ok(cli("endpoint", "list", "--team", "ops", "--json"))["endpoints"]
    assert sorted(e["slug"] for e in team_only) == ["keyholder", "other"]
    mine = ok(cli("endpoint", "list", "--owner", "alice", "--json"))["endpoints"]
    assert [e["slug"] for e in mine] == ["replier"]


def test_endpoint_vend_refuses_bad_input_and_writes_nothing(cli: Cli, database_url: str) -> None:
    ok(cli("human", "add", "alice", "--json"))
    vend = ("endpoint", "vend", "--name")
    err(cli(*vend, "x", "--owner", "alice", "--family", "admin"), "invalid_argument")
    assert "quarantine" in err(
        cli(*vend, "x", "--owner", "alice", "--queue", "quarantine"), "invalid_argument"
    )
    err(cli(*vend, "x", "--owner", "alice", "--queue", "Bad Queue"), "invalid_argument")
    err(cli(*vend, "x", "--owner", "alice", "--expires-in-days", "0"), "invalid_argument")
    err(cli(*vend, "x", "--owner", "nobody"), "not_found")
    err(cli(*vend, "x", "--team", "nope"), "not_found")
    err(cli(*vend, "x"), "invalid_argument")
    err(cli(*vend, "x", "--owner", "alice", "--team", "ops"), "invalid_argument")
    err(cli(*vend, "!!!", "--owner", "alice"), "invalid_argument")
    assert count(database_url, "endpoints") == 0
    ok(cli(*vend, "x", "--owner", "alice", "--json"))
    err(cli(*vend, "X", "--owner", "alice"), "conflict")
    err(cli("endpoint", "list", "--owner", "nobody"), "not_found")
    assert count(database_url, "endpoints") == 1


def test_endpoint_revoke_dead_letters_open_todos(cli: Cli) -> None:
    setup_alice(cli)
    todo = ok(cli("todo", "push", "--endpoint", "alice-bot", "--title", "work", "--json"))["todo"]
    revoked = ok(cli("endpoint", "revoke", "alice-bot", "--json"))["endpoint"]
    assert revoked["state"] == "revoked" and revoked["revoked_at"]
    shown = ok(cli("todo", "show", todo["id"], "--json"))["todo"]
    assert shown["state"] == "failed" and shown["dead_letter"] is True
    # As for a webhook on it: a conflict with the endpoint's state, not a bad argument.
    err(cli("todo", "push", "--endpoint", "alice-bot", "--title", "more"), "conflict")
    err(cli("endpoint", "revoke", "nobody-bot"), "not_found")


# ---------------------------------------------------------------------------------------------
# Webhooks


def test_webhook_minted_secret_is_shown_once_and_stored_encrypted(cli: Cli, database_url: str) -> None:
    setup_alice(cli)
    created = ok(
        cli("webhook", "create", "--endpoint", "alice-bot", "--source", "github", "--allow-all", "--json")
    )
    secret, url = created["secret"], created["ingest_url"]
    webhook = created["webhook"]
    assert secret.startswith("whsec_") and url.startswith(f"{BASE_URL}/webhooks/")
    assert webhook["queue"] == "triage" and webhook["secret_state"] == "set"

    ingest_token = url.rsplit("/", 1)[1]
    listing = cli("webhook", "list", "--json").stdout + cli("webhook", "list").stdout
    assert secret not in listing and ingest_token not in listing

    rotated = ok(cli("webhook", "rotate", webhook["id"], "--json"))["secret"]
    assert rotated.startswith("whsec_") and rotated != secret
    raw = dump_database(database_url)
    for value in (secret, rotated, ingest_token):
        assert value not in raw
    assert token_hash(ingest_token) in raw

    # A minted kind's secret is not set by hand, and a provider kind's is not rotated.
    err(cli("webhook", "set-secret", webhook["id"], input="abc\n"), "invalid_argument")
    text_out = cli(
        "webhook", "create", "--endpoint", "alice-bot", "--source", "gitea", "--queue", "ci", "--allow-all"
    )
    assert text_out.exit_code == 0 and "signing secret (shown once" in text_out.stdout


def test_webhook_provider_secret_awaits_set_secret_from_stdin(cli: Cli, database_url: str) -> None:
    setup_alice(cli)
    created = ok(cli("webhook", "create", "--endpoint", "alice-bot", "--source", "slack", "--json"))
    assert created["secret"] is None and created["webhook"]["secret_state"] == "awaiting"
    text_out = cli("webhook", "create", "--endpoint", "alice-bot", "--source", "stripe")
    assert "set-secret" in text_out.stdout

    webhook_id = created["webhook"]["id"]
    err(cli("webhook", "rotate", webhook_id), "invalid_argument")
    err(cli("webhook", "set-secret", webhook_id, input=""), "invalid_argument")
    slack_secret = "8f742231b10e8888abcd99yyyzzz85a5"
    done = ok(cli("webhook", "set-secret", webhook_id, "--json", input=slack_secret + "\n"))
    assert done["webhook"]["secret_state"] == "set"
    assert slack_secret not in json.dumps(done)
    assert slack_secret not in dump_database(database_url)
    listed = ok(cli("webhook", "list", "--endpoint", "alice-bot", "--json"))["webhooks"]
    assert {w["source"]: w["secret_state"] for w in listed} == {"slack": "set", "stripe": "awaiting"}


def test_webhook_secret_is_plaintext_only_without_a_key_and_says_so(
    cli_nokey: Cli, database_url: str
) -> None:
    setup_alice(cli_nokey)
    result = cli_nokey(
        "webhook", "create", "--endpoint", "alice-bot", "--source", "github", "--allow-all", "--json"
    )
    assert result.exit_code == 0
    secret = json.loads(result.stdout)["secret"]
    assert secret.startswith("whsec_")
    assert "SWITCHBOARD_SECRET_ENCRYPTION_KEY" in result.stderr  # the first-run warning
    # Without a key the secret is kept as given (SPEC §3: a first run works) — which also shows that
    # the raw-database search used by the other tests does find a secret stored in the clear.
    assert secret in dump_database(database_url)


def test_webhook_errors_routes_and_delete(cli: Cli, database_url: str) -> None:
    setup_alice(cli)
    ok(cli("human", "add", "bob", "--json"))
    ok(cli("endpoint", "vend", "--name", "Bob Bot", "--owner", "bob", "--queue", "triage", "--json"))
    ok(cli("endpoint", "vend", "--name", "Bob CI", "--owner", "bob", "--queue", "ci", "--json"))
    err(cli("webhook", "create", "--endpoint", "alice-bot", "--source", "no_such_kind"), "invalid_argument")
    err(cli("webhook", "create", "--endpoint", "nobody", "--source", "github", "--allow-all"), "not_found")
    create_github = ("webhook", "create", "--endpoint", "alice-bot", "--source", "github", "--allow-all")
    err(cli(*create_github, "--queue", "other"), "invalid_argument")
    err(cli(*create_github, "--queue", "quarantine"), "invalid_argument")
    err(cli("webhook", "list", "--endpoint", "nobody"), "not_found")
    assert count(database_url, "webhooks") == 0

    webhook_id = ok(cli("webhook", "create", "--endpoint", "alice-bot", "--source", "generic", "--json"))[
        "webhook"
    ]["id"]
    # The operator may route across scopes.
    route = ok(cli("webhook", "route", "add", webhook_id, "--endpoint", "bob-bot", "--json"))["route"]
    assert route["endpoint"] == "bob-bot"
    assert ok(cli("webhook", "list", "--json"))["webhooks"][0]["routes"] == ["bob-bot"]
    err(cli("webhook", "route", "add", webhook_id, "--endpoint", "bob-bot"), "conflict")
    err(cli("webhook", "route", "add", webhook_id, "--endpoint", "alice-bot"), "invalid_argument")
    err(cli("webhook", "route", "add", webhook_id, "--endpoint", "bob-ci"), "invalid_argument")
    err(cli("webhook", "route", "add", webhook_id, "--endpoint", "nobody"), "not_found")
    err(cli("webhook", "route", "add", "wh_nope", "--endpoint", "bob-bot"), "not_found")
    ok(cli("webhook", "route", "remove", webhook_id, "--endpoint", "bob-bot", "--json"))
    err(cli("webhook", "route", "remove", webhook_id, "--endpoint", "bob-bot"), "not_found")

    for command in ("rotate", "delete"):
        err(cli("webhook", command, "wh_nope"), "not_found")
    err(cli("webhook", "set-secret", "wh_nope", input="x\n"), "not_found")
    assert ok(cli("webhook", "delete", webhook_id, "--json"))["deleted"] is True
    assert ok(cli("webhook", "list", "--json")) == {"webhooks": [], "next_before": None, "next_after": None}


# ---------------------------------------------------------------------------------------------
# Connections


@pytest.fixture
async def fake_github() -> Any:
    """A stand-in GitHub API on 127.0.0.1: ``GET /user`` answers for one known token only."""
    seen: list[str] = []

    async def user(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer ghp_goodtoken0000000000000000000000000000":
            return web.json_response({"message": "Bad credentials"}, status=401)
        return web.json_response({"login": "alice-bot"})

    app = web.Application()
    app.router.add_get("/user", user)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), seen
    await server.close()


async def test_connection_lifecycle_never_shows_the_secret(database_url: str, fake_github: Any) -> None:
    api_url, seen = fake_github
    env = {
        **_env(database_url),
        "SWITCHBOARD_GITHUB_API_URL": api_url,
        "SWITCHBOARD_OUTBOUND_ALLOW_HTTP": "true",
        "SWITCHBOARD_OUTBOUND_ALLOW_CIDRS": "127.0.0.0/8",
    }
    cli = _runner(env)

    async def run(*args: str, input: str | None = None) -> Result:
        # The stand-in provider runs on this loop; the CLI runs its own loop in a thread.
        return await asyncio.to_thread(cli, *args, input=input)

    ok(await run("human", "add", "alice", "--json"))
    ok(await run("endpoint", "vend", "--name", "Alice Bot", "--owner", "alice", "--json"))
    first = "ghp_badtoken11111111111111111111111111111"
    created = ok(
        await run(
            "connection",
            "add",
            "--owner",
            "alice",
            "--kind",
            "github",
            "--name",
            "gh",
            "--account-key",
            "github.com",
            "--target",
            "acme/*",
            "--endpoint",
            "alice-bot",
            "--json",
            input=first + "\n",
        )
    )["connection"]
    assert created["fingerprint"].startswith("fp_") and created["targets"] == ["acme/*"]
    conn_id = created["id"]

    failed = await run("connection", "test", conn_id, "--json")
    assert failed.exit_code == 1 and json.loads(failed.stdout)["test"]["error_class"] == "auth"

    good = "ghp_goodtoken0000000000000000000000000000"
    rotated = ok(await run("connection", "rotate", conn_id, "--json", input=good + "\n"))["connection"]
    assert rotated["fingerprint"] != created["fingerprint"]
    passed = ok(await run("connection", "test", conn_id, "--json"))
    assert passed["test"]["ok"] is True
    assert seen == [f"Bearer {first}", f"Bearer {good}"]

    listed = await run("connection", "list", "--owner", "alice", "--json")
    (row,) = ok(listed)["connections"]
    assert row["last_test"]["ok"] is True
    text_list = await run("connection", "list")
    outputs = [created, rotated, passed, listed.stdout, text_list.stdout, failed.stdout]
    for value in (first, good):
        assert value not in json.dumps(outputs, default=str)
        assert value not in await asyncio.to_thread(dump_database, database_url)

    dup = await run(
        "connection",
        "add",
        "--owner",
        "alice",
        "--kind",
        "github",
        "--name",
        "gh",
        "--account-key",
        "github.com",
        input="ghp_other\n",
    )
    err(dup, "conflict")
    assert ok(await run("connection", "delete", conn_id, "--json"))["deleted"] is True
    err(await run("connection", "delete", conn_id), "not_found")
    err(await run("connection", "test", conn_id), "not_found")


def test_connection_add_refusals_write_nothing(cli: Cli, cli_nokey: Cli, database_url: str) -> None:
    ok(cli("human", "add", "alice", "--json"))
    add = ("connection", "add", "--owner", "alice", "--kind", "github", "--name", "gh", "--account-key")
    err(cli(*add, "github.com", input=""), "invalid_argument")  # no secret on stdin
    err(cli(*add, "github.com", input="   \n"), "invalid_argument")
    err(cli(*add, "github.com", input="x" * 20000), "invalid_argument")
    err(
        cli(
            "connection",
            "add",
            "--owner",
            "alice",
            "--kind",
            "myspace",
            "--name",
            "m",
            "--account-key",
            "a",
            input="s\n",
        ),
        "invalid_argument",
    )
    err(
        cli(
            "connection",
            "add",
            "--owner",
            "nobody",
            "--kind",
            "github",
            "--name",
            "gh",
            "--account-key",
            "github.com",
            input="s\n",
        ),
        "not_found",
    )
    err(
        cli(
            "connection",
            "add",
            "--kind",
            "github",
            "--name",
            "gh",
            "--account-key",
            "github.com",
            input="s\n",
        ),
        "invalid_argument",
    )
    err(cli(*add, "github.com", "--endpoint", "nobody-bot", input="ghp_x\n"), "invalid_argument")
    err(cli_nokey(*add, "github.com", input="ghp_x\n"), "encryption_required")
    err(cli("connection", "rotate", "cn_nope", input="s\n"), "not_found")
    err(cli("connection", "list", "--team", "nope"), "not_found")
    # A secret is never an argument: there is no option that would take one.
    assert "--secret" in err(cli(*add, "github.com", "--secret", "ghp_x"), "usage", 2)
    assert count(database_url, "connections") == 0


# ---------------------------------------------------------------------------------------------
# Todos


def test_todo_push_list_show(cli: Cli, database_url: str) -> None:
    setup_alice(cli)
    first = ok(
        cli(
            "todo",
            "push",
            "--endpoint",
            "alice-bot",
            "--title",
            "Look at the build",
            "--queue",
            "ci",
            "--payload",
            '{"build": 17, "why": "<b>red</b>"}',
            "--json",
        )
    )["todo"]
    assert first["queue"] == "ci" and first["state"] == "pending" and first["source"] == "manual"
    second = ok(cli("todo", "push", "--endpoint", "alice-bot", "--title", "Triage", "--json"))["todo"]
    assert second["queue"] == "triage"

    listed = ok(cli("todo", "list", "--json"))["todos"]
    assert [t["id"] for t in listed] == [second["id"], first["id"]]  # newest first
    assert "payload" not in listed[0] and listed[0]["endpoint"] == "alice-bot"
    assert ok(cli("todo", "list", "--queue", "ci", "--json"))["todos"][0]["id"] == first["id"]
    assert ok(cli("todo", "list", "--state", "done", "--json")) == {
        "todos": [],
        "next_before": None,
        "next_after": None,
    }
    assert len(ok(cli("todo", "list", "--endpoint", "alice-bot", "--limit", "1", "--json"))["todos"]) == 1
    assert "Look at the build" in cli("todo", "list").stdout

    shown = ok(cli("todo", "show", first["id"], "--json"))["todo"]
    assert shown["payload"] == {"build": 17, "why": "<b>red</b>"}
    assert shown["attempts"] == [] and shown["replies"] == []
    human = cli("todo", "show", first["id"])
    assert human.exit_code == 0 and '"build": 17' in human.stdout

    err(
        cli("todo", "push", "--endpoint", "alice-bot", "--title", "x", "--payload", "{nope"),
        "invalid_argument",
    )
    err(cli("todo", "push", "--endpoint", "alice-bot", "--title", "   "), "invalid_argument")
    err(
        cli("todo", "push", "--endpoint", "alice-bot", "--title", "x", "--queue", "quarantine"),
        "invalid_argument",
    )
    err(
        cli("todo", "push", "--endpoint", "alice-bot", "--title", "x", "--queue", "other"), "invalid_argument"
    )
    err(cli("todo", "push", "--endpoint", "nobody", "--title", "x"), "not_found")
    err(cli("todo", "show", "td_nope"), "not_found")
    err(cli("todo", "list", "--endpoint", "nobody"), "not_found")
    err(cli("todo", "list", "--state", "lost"), "usage", 2)
    assert count(database_url, "todos") == 2


def test_todo_show_lists_attempts_and_replies(cli: Cli, database_url: str) -> None:
    setup_alice(cli)
    todo_id = ok(cli("todo", "push", "--endpoint", "alice-bot", "--title", "Fix", "--json"))["todo"]["id"]

    async def work(db: Database) -> None:
        endpoint = await tenancy.get_endpoint(db, "alice-bot")
        await todos.claim(db, endpoint, todo_id)
        await todos.fail(db, endpoint, todo_id, error="flaky", summary="first try")
        now = utcnow()
        async with db.write() as s:
            s.add(
                Reply(
                    id=new_id("rp"),
                    todo_id=todo_id,
                    endpoint_id=endpoint.id,
                    idempotency_key="k",
                    state="failed",
                    connection_id=None,
                    connection_name="gh",
                    connection_fingerprint="fp_1",
                    owner_scope=endpoint.owner_human_id or "",
                    address_kind="forge_comment",
                    display="github github.com/acme/api#7",
                    thread_key="github.com/acme/api#7",
                    text_hash="0" * 64,
                    error_class="auth",
                    created_at=now,
                    updated_at=now,
                )
            )

    in_db(database_url, work)
    shown = ok(cli("todo", "show", todo_id, "--json"))["todo"]
    (attempt,) = shown["attempts"]
    assert attempt["endpoint"] == "alice-bot" and attempt["outcome"] == "failed"
    (reply,) = shown["replies"]
    assert reply["state"] == "failed" and reply["error_class"] == "auth"
    text_out = cli("todo", "show", todo_id)
    assert text_out.exit_code == 0, text_out.stderr
    assert "attempt 1: alice-bot" in text_out.stdout and "(first try)" in text_out.stdout
    assert "failed github github.com/acme/api#7" in text_out.stdout
    listed = ok(cli("todo", "list", "--state", "failed", "--json"))["todos"]
    assert listed[0]["replies"]["count"] == 1 and listed[0]["replies"]["last_state"] == "failed"


# ---------------------------------------------------------------------------------------------
# The database itself


def test_missing_or_unmigrated_database_is_one_line_and_creates_nothing(
    tmp_path: Path, database_url: str
) -> None:
    missing = tmp_path / "nowhere.db"
    cli = _runner(_env(f"sqlite+aiosqlite:///{missing}"))
    line = err(cli("human", "list"), "unavailable")
    assert "db upgrade" in line
    assert not missing.exists()

    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    cli = _runner(_env(f"sqlite+aiosqlite:///{empty}"))
    assert "db upgrade" in err(cli("human", "add", "alice"), "unavailable")

    unreachable = _runner(_env("postgresql+asyncpg://postgres@127.0.0.1:1/none"))
    err(unreachable("team", "list"), "unavailable")
    if database_url.startswith("postgresql"):
        # The server is there, the database is not: say which, and do not call it a schema problem.
        gone = make_url(database_url).set(database="sb_no_such_database").render_as_string(False)
        line = err(_runner(_env(gone))("human", "list"), "unavailable")
        assert "sb_no_such_database" in line and "db upgrade" not in line

    bad = _runner(_env("mysql://localhost/x"))
    assert "must start with" in err(bad("human", "list"), "SWITCHBOARD_DATABASE_URL", exit_code=2)


def test_real_subprocess_on_the_configured_database(database_url: str) -> None:
    env = {**os.environ, **_env(database_url)}
    exe = [sys.executable, "-m", "switchboard"]

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603 (our own interpreter and module)
            [*exe, *args], env=env, input=input, capture_output=True, text=True, timeout=60, check=False
        )

    added = run("human", "add", "zoe", "--json")
    assert added.returncode == 0, added.stderr
    token = json.loads(added.stdout)["token"]
    vended = run("endpoint", "vend", "--name", "Zoe Bot", "--owner", "zoe", "--reply", "--json")
    assert vended.returncode == 0, vended.stderr
    data = json.loads(vended.stdout)
    assert data["endpoint"]["families"] == ["basics", "reply"] and data["token"].startswith("sbk_")

    refused = run("human", "add", "zoe")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.strip().count("\n") == 0 and "conflict" in refused.stderr

    listed = run("human", "list", "--json")
    assert json.loads(listed.stdout)["humans"][0]["handle"] == "zoe"
    assert token not in listed.stdout + listed.stderr

    # Secrets through a real pipe: stdin is not a terminal, so nothing prompts.
    slack = run("webhook", "create", "--endpoint", "zoe-bot", "--source", "slack", "--json")
    webhook_id = json.loads(slack.stdout)["webhook"]["id"]
    provider_secret = "d41d8cd98f00b204e9800998ecf8427e"
    piped = run("webhook", "set-secret", webhook_id, "--json", input=provider_secret)
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["webhook"]["secret_state"] == "set"
    credential = "ghp_subprocess000000000000000000000000000"
    added = run(
        "connection",
        "add",
        "--owner",
        "zoe",
        "--kind",
        "github",
        "--name",
        "gh",
        "--account-key",
        "github.com",
        "--json",
        input=credential + "\n",
    )
    assert added.returncode == 0, added.stderr
    raw = dump_database(database_url)
    for value in (token, data["token"], provider_secret, credential):
        assert value not in raw
        assert value not in added.stdout + piped.stdout + listed.stdout


def test_an_unexpected_failure_is_still_one_line_without_its_message(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(db: Database) -> list[Any]:
        raise RuntimeError("sbo_would-be-secret in a message")

    monkeypatch.setattr(tenancy, "list_humans", broken)
    line = err(cli("human", "list"), "internal")
    assert "RuntimeError" in line and "sbo_" not in line


def test_text_output_neutralises_terminal_escapes_from_payload_text(cli: Cli) -> None:
    setup_alice(cli)
    hostile = "Fix \x1b]0;owned\x07 now \x1b[2J \u202edesrever"
    todo_id = ok(cli("todo", "push", "--endpoint", "alice-bot", "--title", hostile, "--json"))["todo"]["id"]
    for result in (cli("todo", "list"), cli("todo", "show", todo_id)):
        assert result.exit_code == 0
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout and "\u202e" not in result.stdout
        assert "\\x1b]0;owned\\x07" in result.stdout
    # JSON output keeps the exact title (JSON escapes control characters itself).
    assert ok(cli("todo", "show", todo_id, "--json"))["todo"]["title"] == hostile


# ---------------------------------------------------------------------------------------------
# Hostile input: one line, never a traceback


@pytest.mark.parametrize("payload", ["[" * 100_000, "1" * 5000])
def test_cli_todo_push_with_a_hostile_payload_is_one_line(
    tmp_path: Any, monkeypatch: Any, payload: str
) -> None:
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
