"""The one aiohttp application: ingest, /mcp, /api/v1, the web UI, /healthz and /metrics on one port.

``Services`` is what every module gets from the app (settings, database, vault, providers, metrics);
each surface module exposes ``setup(app)`` that adds its routes and its lifetimes (``cleanup_ctx``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from switchboard import metrics as metrics_mod
from switchboard.db import Database, DatabaseUnavailable
from switchboard.plugins import Providers
from switchboard.plugins import load as load_providers
from switchboard.settings import Settings
from switchboard.vault import Vault

log = logging.getLogger("switchboard")


@dataclass
class Services:
    settings: Settings
    db: Database
    vault: Vault
    providers: Providers
    metrics: metrics_mod.Metrics = field(default_factory=metrics_mod.standard)
    # Filled by the modules that own them during setup (doorbell hub, outbound client, …).
    extras: dict[str, Any] = field(default_factory=dict)
    # Called after the transaction that created todos commits (the doorbell subscribes here).
    todo_listeners: list[Callable[[list[str]], Awaitable[None]]] = field(default_factory=list)

    async def todos_created(self, todo_ids: list[str]) -> None:
        """Tell listeners about committed todos. A listener's failure never loses a todo: the
        queue is the record and pull alone is complete, so it is logged and swallowed."""
        for listener in self.todo_listeners:
            try:
                await listener(todo_ids)
            except Exception:
                log.exception("todo listener %r failed", listener)


SERVICES = web.AppKey("services", Services)


def services_of(request_or_app: web.Request | web.Application) -> Services:
    app = request_or_app.app if isinstance(request_or_app, web.Request) else request_or_app
    return app[SERVICES]


def build_services(settings: Settings, providers: Providers | None = None) -> Services:
    vault = Vault(settings.encryption_key)
    if not vault.has_key:
        log.warning(
            "no SWITCHBOARD_SECRET_ENCRYPTION_KEY: webhook signing secrets are stored in plaintext and "
            "connections cannot be created (run `switchboard keygen`)"
        )
    return Services(
        settings=settings,
        db=Database(settings.database_url),
        vault=vault,
        providers=providers or load_providers(),
    )


# What an outage raises: the driver cannot connect (OSError, which a peer's socket can raise
# too), loses or cannot get a connection (OperationalError, InterfaceError, pool TimeoutError).
DATABASE_DOWN = (DatabaseUnavailable, OSError, OperationalError, InterfaceError, PoolTimeout)


def periodic(
    name: str, interval: float, fn: Callable[[Services], Awaitable[Any]]
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A ``cleanup_ctx`` that runs ``fn`` every ``interval`` seconds until shutdown.

    Background work must be safe to run in several processes at once (it is, against PostgreSQL:
    each pass claims its rows with row locks or a single conditional UPDATE).
    """

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        services = app[SERVICES]

        async def loop() -> None:
            database_down = False
            while True:
                try:
                    await fn(services)
                except asyncio.CancelledError:
                    raise
                except DATABASE_DOWN as exc:
                    # An outage, not a bug: one line when it starts (not a traceback every pass).
                    if not database_down:
                        log.warning(
                            "background task %s: the database (or a peer) is unreachable (%s); "
                            "retrying every %ss",
                            name,
                            type(exc).__name__,
                            interval,
                        )
                    database_down = True
                except Exception:
                    log.exception("background task %s failed; retrying in %ss", name, interval)
                else:
                    if database_down:
                        log.info("background task %s: working again", name)
                    database_down = False
                await asyncio.sleep(interval)

        task = asyncio.create_task(loop(), name=f"switchboard:{name}")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return ctx


async def healthz(request: web.Request) -> web.Response:
    services = services_of(request)
    try:
        await services.db.ping()
    except DatabaseUnavailable:
        return web.json_response({"status": "unavailable", "database": "unreachable"}, status=503)
    return web.json_response({"status": "ok", "database": services.db.dialect})


async def metrics_view(request: web.Request) -> web.Response:
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
        # A body that cannot be read (a Content-Encoding that does not decode, broken chunking):
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


async def _database(app: web.Application) -> AsyncIterator[None]:
    yield
    await app[SERVICES].db.dispose()


def make_app(services: Services) -> web.Application:
    from switchboard import api, ingest, mcp, reply, todos
    from switchboard import web as web_ui

    app = web.Application(middlewares=[json_errors], client_max_size=5 * 1024 * 1024 + 1)
    app[SERVICES] = services
    app.cleanup_ctx.append(_database)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_view)
    for module in (todos, ingest, reply, mcp, api, web_ui):
        module.setup(app)
    return app
