"""The one aiohttp application: ingest, /mcp, /api/v1, the web UI, /healthz and /metrics on one port.

This is the top of the import graph: it composes the surfaces (each module's ``setup(app, …)``
adds its routes), gives the process its guarded outbound client, and runs every background job
from the one list in ``background_jobs``. Nothing imports this module but the CLI's ``serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from switchboard import (
    api,
    bodies,
    delivery_records,
    http_refusals,
    ingest,
    mcp,
    outbound,
    quarantine,
    reply,
    reseal,
    todos,
)
from switchboard import web as web_ui
from switchboard.bearers import bearer_token
from switchboard.checkpoints import Checkpointer
from switchboard.db import is_unavailable
from switchboard.provider import same
from switchboard.services import SERVICES, Services, build_services, services_of

__all__ = ["Services", "background_jobs", "build_services", "make_app"]

log = logging.getLogger("switchboard")


@dataclass(frozen=True)
class Job:
    """A background pass run every ``interval`` seconds. Every pass must be safe to run in several
    processes at once (against PostgreSQL each claims its rows with row locks or a single
    conditional UPDATE)."""

    name: str
    interval: float
    run: Callable[[], Awaitable[object]]


def background_jobs(app: web.Application) -> list[Job]:
    """Every background job of the process, in one place."""
    services = app[SERVICES]
    return [
        Job("todo-lifecycle", 1.0, lambda: todos.lifecycle_pass(services)),
        Job("event-retention", 3600, lambda: ingest.prune_events(services)),
        Job("delivery-record-retention", 3600, lambda: delivery_records.prune_records(services)),
        Job("quarantine-expiry", 600, lambda: quarantine.expire_held(services)),
        Job("reply-sweeper", reply.SWEEP_INTERVAL, lambda: reply.sweep_pending(services)),
        Job("web-session-purge", 3600, lambda: web_ui.session.purge_expired_sessions(services)),
        Job("doorbell-sweep", mcp.doorbell.SWEEP_INTERVAL, lambda: app[mcp.DOORBELL].sweep()),
        Job("mcp-revocation", mcp.REVOCATION_SWEEP_SECONDS, lambda: app[mcp.MCP_SERVICE].sweep_revoked()),
    ]


# On shutdown a pass in progress may finish for this long before it is cancelled.
STOP_GRACE_SECONDS = 5.0


async def run_periodically(job: Job, stop: asyncio.Event | None = None) -> None:
    """Run ``job`` until cancelled, or until ``stop`` is set (between passes). An outage is one
    warning when it starts and one line when it ends, not a traceback every pass; a bug is logged
    with its traceback and retried."""
    database_down = False
    while stop is None or not stop.is_set():
        try:
            await job.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not is_unavailable(exc):
                log.exception("background task %s failed; retrying in %ss", job.name, job.interval)
            elif not database_down:
                log.warning(
                    "background task %s: the database (or a peer) is unreachable (%s); retrying every %ss",
                    job.name,
                    type(exc).__name__,
                    job.interval,
                )
                database_down = True
        else:
            if database_down:
                log.info("background task %s: working again", job.name)
            database_down = False
        if stop is None:
            await asyncio.sleep(job.interval)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), job.interval)


async def _background(app: web.Application) -> AsyncIterator[None]:
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(run_periodically(job, stop), name=f"switchboard:{job.name}")
        for job in background_jobs(app)
    ]
    yield
    # Let a pass in progress finish rather than cancel it mid-statement: a cancelled SQLite
    # statement can leave aiosqlite's close waiting, which held shutdown for 30 s.
    stop.set()
    _, late = await asyncio.wait(tasks, timeout=STOP_GRACE_SECONDS)
    for task in late:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _resources(app: web.Application) -> AsyncIterator[None]:
    """The process's guarded outbound client, SQLite checkpoints, rule sandbox and database pool,
    closed on shutdown."""
    services = app[SERVICES]
    # A test (or an embedding) may install its own client first; only close what we made.
    made = services.outbound is None
    client = outbound.client_of(services)
    # SQLite: the WAL is copied back into the file beside the writer, not in its turn (checkpoints).
    checkpointer = Checkpointer(services.db) if services.db.sqlite_file is not None else None
    if checkpointer is not None:
        checkpointer.start()
    yield
    if checkpointer is not None:
        await checkpointer.close()
    if made:
        await client.close()
        services.outbound = None
    # The rule sandbox's workers (docs/routing.md); ingest has stored what was in flight by now.
    await services.sandbox.close()
    await services.db.dispose()


async def _plaintext_warning(app: web.Application) -> None:
    """One warning at start while secrets stored before the key was configured stay plaintext."""
    services = app[SERVICES]
    if not services.vault.has_key:
        return  # build_services has said that there is no key at all
    try:
        count = await reseal.plaintext_count(services)
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        return  # the outage is reported by every surface; the count can wait for the next start
    if count:
        log.warning(
            "%d secret(s) are stored in plaintext from before SWITCHBOARD_SECRET_ENCRYPTION_KEY was "
            "configured; run `switchboard db reseal` to seal them",
            count,
        )


# Every 503 (the database is away, the process is shutting down) tells the client when to retry.
RETRY_AFTER_SECONDS = 5


async def _retry_after(request: web.Request, response: web.StreamResponse) -> None:
    """Any surface's 503 without its own ``Retry-After`` gets one: a sender or agent should come
    back once the database (or the process) is back, not hammer it or give up."""
    if response.status == 503 and "Retry-After" not in response.headers:
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)


async def healthz(request: web.Request) -> web.Response:
    services = services_of(request)
    try:
        await services.db.ping()
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        return web.json_response({"status": "unavailable", "database": "unreachable"}, status=503)
    return web.json_response({"status": "ok", "database": services.db.dialect})


async def metrics_view(request: web.Request) -> web.Response:
    token = services_of(request).settings.metrics_token
    # Compared in constant time; ``provider.same`` never raises, whatever bytes the header holds.
    if token is not None and not same(bearer_token(request.headers), token.get_secret_value()):
        # The same answer for a missing and a wrong token, and neither is logged or echoed.
        return web.json_response(
            {"error": "unauthorized", "message": "/metrics needs the bearer token SWITCHBOARD_METRICS_TOKEN"},
            status=401,
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    return web.Response(
        text=services_of(request).metrics.render(),
        content_type="text/plain",
        charset="utf-8",
        headers={"Cache-Control": "no-store"},
    )


@web.middleware
async def json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every error a JSON body with a stable code; never a traceback, never a bare 500 page."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json" or request.path.startswith("/ui"):
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(
            exc.status, "http_error"
        )
        return web.json_response(
            {"error": code, "message": exc.reason},
            status=exc.status,
            headers={k: v for k, v in exc.headers.items() if k == "Allow"},
        )
    except (HttpProcessingError, RequestPayloadError) as exc:
        # A body that cannot be read (broken chunking, a chunk larger than aiohttp allows):
        # the client's mistake. The connection is closed, since the rest of the body is unreadable.
        log.info("unreadable request body on %s: %s", request.method, type(exc).__name__)
        response = web.json_response(
            {
                "error": "invalid_body",
                "message": "the request body could not be read (bad encoding or framing)",
            },
            status=400,
        )
        response.force_close()
        return response
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return web.json_response({"error": "internal", "message": "internal error"}, status=500)


# The API's largest body is a pushed todo, whose payload may be 5 MiB; UI forms are a few fields.
API_MAX_BODY_BYTES = 5 * bodies.MIB
UI_MAX_BODY_BYTES = 64 * bodies.KIB
OTHER_MAX_BODY_BYTES = 64 * bodies.KIB


def body_rules() -> tuple[tuple[bodies.BodyRule, ...], bodies.BodyRule]:
    """Every surface's body bounds, and the rule for any other path. Read per request from the
    surfaces' own constants, so a test that shortens one (``ingest.BODY_READ_SECONDS``) is obeyed."""
    return _body_rules(
        ingest.MAX_BODY_BYTES,
        ingest.BODY_READ_SECONDS,
        mcp.sessions.MAX_BODY_BYTES,
        API_MAX_BODY_BYTES,
        UI_MAX_BODY_BYTES,
        OTHER_MAX_BODY_BYTES,
        bodies.DEADLINE_SECONDS,
    )


@functools.lru_cache(maxsize=8)
def _body_rules(
    ingest_bytes: int,
    ingest_seconds: float,
    mcp_bytes: int,
    api_bytes: int,
    ui_bytes: int,
    other: int,
    deadline: float,
) -> tuple[tuple[bodies.BodyRule, ...], bodies.BodyRule]:
    # Made once per set of numbers: building the rules on every request cost a percent of ingest's CPU.
    return (
        # Ingest streams its body itself under these same two numbers (see ingest._read_body).
        bodies.BodyRule("/webhooks/", ingest_bytes, ingest_seconds, read_here=False),
        bodies.BodyRule(mcp.sessions.PATH, mcp_bytes, deadline),
        bodies.BodyRule("/api/", api_bytes, deadline),
        bodies.BodyRule("/ui", ui_bytes, deadline),
    ), bodies.BodyRule("", other, deadline)


_BODY_TITLES = {408: "Too slow", 413: "Too large", 400: "Unreadable request"}


@web.middleware
async def bounded_bodies(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The one body rule of the server (``switchboard.bodies``): the size cap from Content-Length
    first, then the whole body within the deadline, before any handler runs."""
    rules, default = body_rules()
    try:
        request = await bodies.admit(request, bodies.rule_for(request.path, rules, default))
    except bodies.BodyRefused as exc:
        log.info("request body refused on %s: %s", request.method, exc.code)
        response: web.Response
        if web_ui.is_ui_path(request.path):
            title = _BODY_TITLES.get(exc.status, "Error")
            response = web_ui.html.error_page(
                None, exc.status, exc.message[:1].upper() + exc.message[1:] + ".", title
            )
        else:
            response = web.json_response({"error": exc.code, "message": exc.message}, status=exc.status)
        # The rest of the body is never read: answer, then close the connection.
        response.force_close()
        return response
    return await handler(request)


def make_app(services: Services) -> web.Application:
    # A request aiohttp's parser refuses never reaches the middlewares: its answer is made JSON here.
    http_refusals.install()
    app = web.Application(
        middlewares=[json_errors, bounded_bodies],
        client_max_size=5 * 1024 * 1024 + 1,
        # Bodies are read as they were sent and decoded by Switchboard (content_coding): aiohttp's
        # own decoding passed on a gzip stream cut short as a whole, shorter body.
        handler_args={"auto_decompress": False},
    )
    app[SERVICES] = services
    app.cleanup_ctx.append(_resources)
    app.on_startup.append(_plaintext_warning)
    app.on_response_prepare.append(_retry_after)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_view)
    ingest.setup(app)
    mcp.setup(app, services)
    api.setup(app)
    web_ui.setup(app)
    # Last, so the jobs start once every surface is set up and stop before their resources close.
    app.cleanup_ctx.append(_background)
    return app
