"""The ingest floor: the least any correct webhook store does, with Switchboard's own tools.

The anchor row "bare store" of ``bench/ingest.py`` on PostgreSQL. A bare aiohttp handler, as
``bench.bare``, that also does what no implementation of the issue may skip:

* checks the GitHub signature (HMAC-SHA256 over the raw body, compared in constant time);
* parses the body (orjson) and encodes the payload again for its column;
* in the same column types as Switchboard's (the body and the payload ``bytea``, the headers
  ``json``; lz4-compressed where the server has it, as migration 0009 leaves Switchboard's);
* stores the delivery durably before answering: the raw body and headers as an event row, unique
  by its delivery id (a repeat is answered as a duplicate), and the payload as a todo row;
* through a group-commit writer on asyncpg, as Switchboard's on PostgreSQL: one batch at a time,
  each batch one statement from arrays (the events, then the todos of the events that went in, by
  data-modifying CTEs), which is its own transaction.

And nothing else: no tenancy, no configuration, no reply address or echo check, no intake, no
doorbell, no log lines, no metrics. So in one invocation the ceiling over this row is what storing
a delivery costs on this machine, and this row over Switchboard's is what everything else costs.

Run in its own process as the others are (``python -m bench.bare_store`` with
``SWITCHBOARD_HOST``/``SWITCHBOARD_PORT``, ``SWITCHBOARD_DATABASE_URL`` of a PostgreSQL database and
``BARE_STORE_SECRET``, the webhook secret the bodies are signed with). It makes its two tables.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import orjson
from aiohttp import web
from sqlalchemy.engine import make_url

from bench import bare

TABLES = """
CREATE TABLE IF NOT EXISTS bare_events (
    id text PRIMARY KEY,
    delivery_key text NOT NULL UNIQUE,
    headers json NOT NULL,
    body bytea NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS bare_todos (
    id text PRIMARY KEY,
    event_id text NOT NULL REFERENCES bare_events (id),
    payload bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
"""
STORE = """
WITH new_events AS (
    INSERT INTO bare_events (id, delivery_key, headers, body)
    SELECT * FROM unnest($1::text[], $2::text[], $3::json[], $4::bytea[])
    ON CONFLICT DO NOTHING RETURNING id
), new_todos AS (
    INSERT INTO bare_todos (id, event_id, payload)
    SELECT * FROM unnest($5::text[], $6::text[], $7::bytea[]) AS t (id, event_id, payload)
    WHERE t.event_id IN (SELECT id FROM new_events)
)
SELECT id FROM new_events
"""
# Switchboard's columns as its migrations leave them (0009): lz4 where the server has it.
LZ4 = """
DO $$ BEGIN
  IF (SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression') THEN
    ALTER TABLE bare_events ALTER COLUMN body SET COMPRESSION lz4;
    ALTER TABLE bare_events ALTER COLUMN headers SET COMPRESSION lz4;
    ALTER TABLE bare_todos ALTER COLUMN payload SET COMPRESSION lz4;
  END IF;
END $$;
"""
MAX_BATCH = 256
SECRET = web.AppKey("secret", bytes)


@dataclass(frozen=True)
class Row:
    event_id: str
    key: str
    headers: str
    body: bytes
    todo_id: str
    payload: bytes


@dataclass
class Writer:
    """Group commit: whatever accumulated while the previous batch was stored, in one statement."""

    # Any: asyncpg ships no type information.
    pool: Any
    _queue: deque[tuple[Row, asyncio.Future[bool]]] = field(default_factory=deque)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    async def submit(self, row: Row) -> bool:
        """True once stored, False if its delivery id was stored before (raises if not stored)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append((row, future))
        self._wake.set()
        return await future

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
            await self._commit(batch)

    async def _commit(self, batch: list[tuple[Row, asyncio.Future[bool]]]) -> None:
        # The same lock order in every batch (by delivery id), as Switchboard's writer.
        rows = sorted((row for row, _ in batch), key=lambda r: r.key)
        try:
            async with self.pool.acquire() as conn:
                went = {
                    record["id"]
                    for record in await conn.fetch(
                        STORE,
                        [r.event_id for r in rows],
                        [r.key for r in rows],
                        [r.headers for r in rows],
                        [r.body for r in rows],
                        [r.todo_id for r in rows],
                        [r.event_id for r in rows],
                        [r.payload for r in rows],
                    )
                }
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for row, future in batch:
            if not future.done():
                future.set_result(row.event_id in went)


WRITER = web.AppKey("writer", Writer)


def _error(status: int, code: str) -> web.Response:
    return web.json_response({"error": code}, status=status)


async def accept(request: web.Request) -> web.Response:
    body = await request.read()
    expected = b"sha256=" + hmac.new(request.app[SECRET], body, hashlib.sha256).hexdigest().encode()
    given = request.headers.get("X-Hub-Signature-256", "").encode("utf-8", "surrogateescape")
    if not hmac.compare_digest(given, expected):
        return _error(401, "signature_invalid")
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _error(400, "invalid_body")
    try:
        row = Row(
            event_id=f"ev_{uuid.uuid4().hex}",
            key=request.headers.get("X-GitHub-Delivery") or hashlib.sha256(body).hexdigest(),
            # str(): aiohttp's header names are a str subclass, which orjson refuses as keys.
            headers=orjson.dumps({str(k): v for k, v in request.headers.items()}).decode(),
            body=body,
            todo_id=f"td_{uuid.uuid4().hex}",
            payload=orjson.dumps(payload),
        )
    except orjson.JSONEncodeError:
        # A header with undecodable bytes (a lone surrogate) or a body orjson read but cannot write.
        return _error(400, "invalid_body")
    try:
        stored = await request.app[WRITER].submit(row)
    except (OSError, asyncpg.PostgresError):
        return _error(503, "unavailable")
    if not stored:
        return web.json_response({"todos": [], "created": 0, "disposition": "duplicate"}, status=202)
    return web.json_response(
        {"todos": [{"id": row.todo_id, "created": True}], "created": 1, "disposition": "routed"}, status=202
    )


async def _database(app: web.Application) -> Any:
    url = make_url(os.environ["SWITCHBOARD_DATABASE_URL"]).set(drivername="postgresql")
    pool = await asyncpg.create_pool(url.render_as_string(hide_password=False), min_size=2, max_size=4)
    async with pool.acquire() as conn, conn.transaction():
        # Two processes may start at once: one makes the tables, the other waits and finds them.
        await conn.execute("SELECT pg_advisory_xact_lock(7242)")
        await conn.execute(TABLES)
        await conn.execute(LZ4)
    app[WRITER] = Writer(pool)
    yield
    await pool.close()


def make_app() -> web.Application:
    app = bare.make_app(accept)
    app[SECRET] = os.environ["BARE_STORE_SECRET"].encode()
    app.cleanup_ctx.append(_database)
    return app


def main() -> None:
    bare.serve(make_app())


if __name__ == "__main__":
    main()
