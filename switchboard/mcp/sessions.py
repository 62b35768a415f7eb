"""The MCP service: ``/mcp`` over Streamable HTTP (docs/agents.md), its sessions, their limits, and
the revocation pass that closes the sessions of revoked or expired endpoints.

Stateful sessions are kept here rather than in the SDK's session manager, so that this process
knows each session's endpoint, its connection (to push doorbells on its GET stream) and its
transport (to close it when the endpoint is revoked). Requests on the newest, stateless protocol
revision go to the SDK's own stateless entry. Every request, whatever its revision, is
authenticated first with the endpoint's bearer token: a lifecycle tool call against the endpoint
this process keeps for it, every other request against the database (``endpoint_cache`` says why
that is safe). A tool call on an established session is then answered here, in the request's own
task, with the SDK's own checks (``tool_calls``); everything else is handed to the session's SDK
transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import anyio
import anyio.abc
from aiohttp import web
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from sqlalchemy import select

from switchboard import tenancy
from switchboard.bearers import bearer_token
from switchboard.db import is_unavailable
from switchboard.mcp import tool_calls
from switchboard.mcp.bridge import jsonrpc_error, run_asgi
from switchboard.mcp.doorbell import CAPABILITY, Doorbell, LiveSession, ringing
from switchboard.mcp.endpoint_cache import EndpointCache
from switchboard.mcp.tools import SCOPE_ENDPOINT, build_server
from switchboard.models import Endpoint
from switchboard.services import Services

log = logging.getLogger("switchboard.mcp")

PATH = "/mcp"
MAX_BODY_BYTES = 4 * 1024 * 1024
# Per endpoint, as before the owner limits; the owner and process limits are settings
# (SWITCHBOARD_MAX_SESSIONS_PER_OWNER, SWITCHBOARD_MAX_SESSIONS).
MAX_SESSIONS_PER_ENDPOINT = 64
SESSION_IDLE_SECONDS = 30 * 60
REVOCATION_SWEEP_SECONDS = 1.0


def _is_json(content_type: str | None) -> bool:
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() == "application/json"


def _unauthorized(message: str) -> web.Response:
    return web.json_response(
        {"error": "unauthorized", "message": message}, status=401, headers={"WWW-Authenticate": "Bearer"}
    )


@dataclass(eq=False)
class HeldSession(LiveSession):
    """A live session with what the limits need: its owner scope and how recently it was used."""

    owner_id: str = ""
    # Requests being served now. A session with one in flight or an open GET stream is not idle.
    busy: int = 0
    last_active: float = field(default_factory=time.monotonic)

    @property
    def idle(self) -> bool:
        return self.busy == 0 and not self.stream_open


def _eviction_order(session: HeldSession) -> tuple[bool, float]:
    # Idle sessions before busy ones, then the least recently used first.
    return (not session.idle, session.last_active)


def to_evict(
    held: Iterable[HeldSession],
    endpoint_id: str,
    owner_id: str,
    *,
    per_endpoint: int,
    per_owner: int,
    total: int,
) -> list[tuple[HeldSession, str]]:
    """The sessions to close (with the limit that chose each) so that one more session of
    ``endpoint_id`` (owned by ``owner_id``) fits every limit.

    The endpoint's and then the owner's own sessions make room first: an agent that reconnects
    without closing its sessions, or a tenant that floods from many endpoints, only ever pushes out
    its own. The process limit is the last resort and takes from the largest holder, so one
    tenant's flood never refuses another tenant's first session.
    """
    live = list(held)
    out: list[tuple[HeldSession, str]] = []

    def evict(candidates: list[HeldSession], limit: str) -> None:
        victim = min(candidates, key=_eviction_order)
        out.append((victim, limit))
        live.remove(victim)

    while True:
        own_endpoint = [s for s in live if s.endpoint_id == endpoint_id]
        if own_endpoint and len(own_endpoint) >= per_endpoint:
            evict(own_endpoint, "endpoint")
            continue
        own = [s for s in live if s.owner_id == owner_id]
        if own and len(own) >= per_owner:
            evict(own, "owner")
            continue
        if live and len(live) >= total:
            counts = Counter(s.owner_id for s in live)
            largest = max(counts, key=lambda owner: counts[owner])
            evict([s for s in live if s.owner_id == largest], "process")
            continue
        return out


class McpService:
    """The ``/mcp`` route and the stateful sessions this process holds (kept in the doorbell's table,
    so a ring can find them)."""

    def __init__(self, services: Services, bell: Doorbell) -> None:
        self.services = services
        self.server = build_server(services)
        self.init_options = self.server.create_initialization_options(
            experimental_capabilities={CAPABILITY: {}}
        )
        self.bell = bell
        # The endpoint each token names, kept for the lifecycle tool calls (``endpoint_cache``).
        self.endpoints = EndpointCache()
        # The SDK's stateless entry serves requests on the newest (per-request envelope) revision.
        self.stateless = StreamableHTTPSessionManager(app=self.server, stateless=True)
        self._tg: anyio.abc.TaskGroup | None = None
        self._lock = asyncio.Lock()
        # The same sessions as the doorbell's table, with their owner and activity.
        self.held: dict[str, HeldSession] = {}
        # Tool calls answered without the SDK's per-request machinery (``tool_calls``); off only
        # in the tests that compare the two paths.
        self.answer_tool_calls = True

    # -- lifetime ----------------------------------------------------------------------------

    async def run(self, started: asyncio.Event, stop: asyncio.Event) -> None:
        """Own the task group the sessions run in (entered and left in this one task)."""
        async with self.stateless.run(), anyio.create_task_group() as tg:
            self._tg = tg
            started.set()
            try:
                await stop.wait()
            finally:
                self._tg = None
                await self.close_all()
                tg.cancel_scope.cancel()

    async def close_all(self) -> None:
        for session in list(self.bell.sessions.values()):
            await self.discard(session)

    async def discard(self, session: LiveSession) -> None:
        """Forget a session and close its transport (its streams end, its id answers 404)."""
        self.bell.remove(session.id)
        self.held.pop(session.id, None)
        if not session.transport.is_terminated:
            with anyio.CancelScope(shield=True):
                await session.transport.terminate()

    # -- requests ----------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        token = bearer_token(request.headers)
        if token is None:
            return _unauthorized("an endpoint token is required: Authorization: Bearer sbk_…")
        # Already read, whole, within the server's body rule (switchboard.bodies): from memory.
        too_large = request.content_length is not None and request.content_length > MAX_BODY_BYTES
        body = b"" if too_large else await request.read()
        tool_call = tool_calls.parse(request.method, body)
        try:
            cached = tool_call is not None and tool_call.lifecycle
            endpoint = await self.endpoints.endpoint(self.services.db, token, cached=cached)
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            return web.json_response({"error": "unavailable", "message": "database unavailable"}, status=503)
        if endpoint is None:
            return _unauthorized("unknown, revoked or expired endpoint token")
        if too_large or len(body) > MAX_BODY_BYTES:
            return web.json_response(
                {"error": "payload_too_large", "message": "MCP request bodies are limited to 4 MiB"},
                status=413,
            )
        if request.method == "POST" and not _is_json(request.headers.get("Content-Type")):
            # The SDK would answer this in plain text; every error here is JSON.
            return jsonrpc_error(415, "Unsupported Media Type: Content-Type must be application/json")
        extra = {SCOPE_ENDPOINT: endpoint}
        version = request.headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return await run_asgi(request, body, self.stateless.handle_request, extra)
        if self._tg is None:
            return web.json_response({"error": "unavailable", "message": "shutting down"}, status=503)

        session_id = request.headers.get("mcp-session-id")
        if session_id is None:
            return await self._open_session(request, body, endpoint, extra)
        session = self.held.get(session_id)
        if session is None or session.endpoint_id != endpoint.id:
            # Another endpoint's session answers exactly like an unknown one.
            return jsonrpc_error(404, "Session not found")
        if tool_call is not None and self.answer_tool_calls:
            answered = await self._answer_tool_call(request, session, endpoint, tool_call)
            if answered is not None:
                return answered
        # Only a GET answered 200 is the session's notification stream (a second GET gets 409 and
        # must not mark the first one closed when it ends).
        opened: list[bool] = []

        def on_start(status: int) -> None:
            if request.method == "GET" and status == 200:
                opened.append(True)
                self.bell.stream_opened(session)

        session.busy += 1
        session.last_active = time.monotonic()
        try:
            response = await run_asgi(request, body, session.transport.handle_request, extra, on_start)
        finally:
            session.busy -= 1
            session.last_active = time.monotonic()
            if opened:
                self.bell.stream_closed(session)
        if session.transport.is_terminated:
            await self.discard(session)
        return response

    async def _answer_tool_call(
        self,
        request: web.Request,
        session: HeldSession,
        endpoint: Endpoint,
        tool_call: tool_calls.ToolCall,
    ) -> web.Response | None:
        """A tool call answered in this task (``tool_calls``), or None for the SDK to answer: the
        handshake not yet accepted, the session ending, an Accept without JSON."""
        connection, transport = session.connection, session.transport
        idle = transport.idle_scope
        if (
            connection is None
            or not connection.initialize_accepted
            or transport.is_terminated
            or (idle is not None and idle.cancel_called)
            or not tool_calls.accepts_json(request)
        ):
            return None
        session.busy += 1
        session.last_active = time.monotonic()
        try:
            return await tool_calls.answer(
                self.services,
                endpoint,
                tool_call,
                protocol_version=connection.protocol_version,
                session_id=session.id,
            )
        finally:
            session.busy -= 1
            session.last_active = time.monotonic()
            tool_calls.keep_alive(idle, SESSION_IDLE_SECONDS)

    async def _open_session(
        self, request: web.Request, body: bytes, endpoint: Endpoint, extra: dict[str, Any]
    ) -> web.StreamResponse:
        if request.method != "POST":
            return jsonrpc_error(400, "Bad Request: Missing session ID")
        owner_id = tenancy.Owner.of(endpoint).id
        settings = self.services.settings
        async with self._lock:
            # Room is made by closing sessions, never by refusing this one.
            for victim, limit in to_evict(
                self.held.values(),
                endpoint.id,
                owner_id,
                per_endpoint=MAX_SESSIONS_PER_ENDPOINT,
                per_owner=settings.max_sessions_per_owner,
                total=settings.max_sessions,
            ):
                self.services.metrics.inc("switchboard_mcp_sessions_evicted_total", limit=limit)
                await self.discard(victim)
            session_id = uuid4().hex
            session = HeldSession(
                id=session_id,
                endpoint_id=endpoint.id,
                queues=tuple(endpoint.queues),
                transport=StreamableHTTPServerTransport(
                    mcp_session_id=session_id,
                    # A request is answered with one JSON body, not an event stream: nothing of
                    # Switchboard's is sent on a request's own stream (doorbells go on the
                    # session's GET stream), and a JSON answer costs the server far less.
                    is_json_response_enabled=True,
                    idle_timeout=SESSION_IDLE_SECONDS,
                ),
                owner_id=owner_id,
                # Busy until its first answer has started (it is not idle while being opened).
                busy=1,
            )
            self.bell.add(session)
            self.held[session_id] = session
        # Decided when the answer starts: aiohttp may cancel this handler once the client has read
        # the response and hung up, and that must not undo a session the client now holds.
        established: list[bool] = []
        try:
            tg = self._tg
            if tg is None:
                return web.json_response({"error": "unavailable", "message": "shutting down"}, status=503)
            await tg.start(self._serve_session, session)
            return await run_asgi(
                request,
                body,
                session.transport.handle_request,
                extra,
                lambda status: established.append(status < 400),
            )
        finally:
            session.busy -= 1
            session.last_active = time.monotonic()
            if not any(established):
                await self.discard(session)

    async def _serve_session(
        self,
        session: LiveSession,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        transport = session.transport
        try:
            async with transport.connect() as (read_stream, write_stream):
                dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(
                    read_stream, write_stream, inline_methods=frozenset({"initialize"})
                )
                session.connection = Connection.for_loop(dispatcher, session_id=session.id)
                task_status.started()
                idle = transport.idle_scope or anyio.CancelScope()
                with idle:
                    await serve_connection(
                        self.server,
                        dispatcher,
                        connection=session.connection,
                        lifespan_state={},
                        init_options=self.init_options,
                    )
        except Exception:
            log.exception("MCP session %s crashed", session.id[:8])
        finally:
            await self.discard(session)

    # -- revocation --------------------------------------------------------------------------

    async def sweep_revoked(self) -> int:
        """Close the sessions of endpoints revoked or expired since they connected, and forget
        those endpoints' kept rows (the CLI may have revoked them from another process, unheard)."""
        sessions = list(self.bell.sessions.values())
        ids = {s.endpoint_id for s in sessions} | self.endpoints.endpoint_ids()
        if not ids:
            return 0
        async with self.services.db.read() as s:
            live = {
                e.id
                for e in (await s.scalars(select(Endpoint).where(Endpoint.id.in_(ids)))).all()
                if tenancy.endpoint_is_live(e)
            }
        self.endpoints.forget(ids - live)
        closed = 0
        for session in sessions:
            if session.endpoint_id not in live:
                await self.discard(session)
                closed += 1
        if closed:
            log.info("closed %d MCP session(s) of revoked or expired endpoints", closed)
        return closed


def quiet_wire_loggers() -> None:
    """The SDK and the SSE writer log whole JSON-RPC messages at DEBUG. Tool arguments carry
    connection secrets and results carry lease tokens, so those loggers never go below INFO, even
    when the operator runs with LOG_LEVEL=DEBUG."""
    for name in ("mcp", "sse_starlette"):
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < logging.INFO:
            logger.setLevel(logging.INFO)


MCP_SERVICE = web.AppKey("mcp_service", McpService)
DOORBELL = web.AppKey("doorbell", Doorbell)


def setup(app: web.Application, services: Services) -> None:
    """``/mcp`` (GET, POST, DELETE), the session task group and the doorbell. ``app.py`` schedules
    the revocation pass and the doorbell sweep with the other background jobs."""
    bell = app[DOORBELL] = Doorbell(services)
    service = app[MCP_SERVICE] = McpService(services, bell)

    async def close_revoked(endpoint_ids: list[str]) -> None:
        service.endpoints.forget(endpoint_ids)
        await service.sweep_revoked()

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        quiet_wire_loggers()
        started, stop = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(service.run(started, stop), name="switchboard:mcp-sessions")
        await started.wait()
        services.revocation_listeners.append(close_revoked)
        services.live_sessions = lambda: Counter(session.endpoint_id for session in bell.sessions.values())
        try:
            async with ringing(bell):
                yield
        finally:
            with contextlib.suppress(ValueError):
                services.revocation_listeners.remove(close_revoked)
            services.live_sessions = None
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close_sessions(app: web.Application) -> None:
        # on_shutdown runs before aiohttp waits for open handlers: end the GET streams now.
        await service.close_all()

    app.cleanup_ctx.append(lifetime)
    app.on_shutdown.append(close_sessions)
    for method in ("GET", "POST", "DELETE"):
        app.router.add_route(method, PATH, service.handle)
