"""Webhook ingest: ``POST /webhooks/{ingest_token}`` turns a verified delivery into todos (SPEC §4).

The order matters and is the contract: size cap and rate limit (nothing stored), the webhook and its
targets, the provider's ``verify`` over the raw bytes (a refusal stores nothing), the delivery key
and deduplication, housekeeping, echo suppression, the reply address (verified deliveries only),
then one transaction for the event and every fan-out todo, and only after it commits the 202 and
the doorbell. The source kind is whatever a provider registered: nothing here names one.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from sqlalchemy import delete, exists, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.db import is_unavailable, utcnow
from switchboard.echo import is_own_reply
from switchboard.ids import new_id, token_hash
from switchboard.models import Endpoint, Event, Route, Todo, Webhook
from switchboard.provider import Address, Delivery, EchoClues, SourceKind, Verdict
from switchboard.sanitize import clean_line, delivery_key, redact_headers, storable_encoded
from switchboard.services import Services, services_of
from switchboard.tenancy import endpoint_is_live, webhook_secret
from switchboard.todos import new_todo_row
from switchboard.vault import VaultError

log = logging.getLogger("switchboard.ingest")

MAX_BODY_BYTES = 5 * 1024 * 1024
BODY_READ_SECONDS = 30.0


class RateLimiter:
    """A token bucket per client IP, in memory (per process). Generous by default: it is there to
    stop one sender from flooding the database, not to shape normal traffic."""

    def __init__(self, rate: float = 50.0, burst: float = 500.0, max_clients: int = 50_000) -> None:
        self.rate = rate
        self.burst = burst
        self.max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}

    def configure(self, *, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self._buckets.clear()

    def take(self, client: str) -> float:
        """Spend one token; 0 when allowed, else the seconds until a token is available."""
        now = time.monotonic()
        tokens, last = self._buckets.get(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if len(self._buckets) >= self.max_clients and client not in self._buckets:
            self._prune(now)
        if tokens >= 1:
            self._buckets[client] = (tokens - 1, now)
            return 0.0
        self._buckets[client] = (tokens, now)
        return (1 - tokens) / self.rate if self.rate > 0 else 3600.0

    def _prune(self, now: float) -> None:
        # A bucket that has refilled completely carries no state worth keeping.
        full_after = self.burst / self.rate if self.rate > 0 else math.inf
        for client, (_, last) in list(self._buckets.items()):
            if now - last >= full_after:
                del self._buckets[client]
        if len(self._buckets) >= self.max_clients:
            # Still full (an address spray): forget the stalest half rather than grow without bound.
            stale = sorted(self._buckets.items(), key=lambda item: item[1][1])
            for client, _ in stale[: len(stale) // 2]:
                del self._buckets[client]


INGEST_LIMITER = web.AppKey("ingest_limiter", RateLimiter)


class Refusal(Exception):
    """An answer that ends ingest early; nothing has been stored when one is raised."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        close: bool = False,
    ) -> None:
        super().__init__(code)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}
        # Close the connection after answering: the rest of the body cannot be read anyway.
        self.close = close

    def response(self) -> web.Response:
        response = web.json_response(
            {"error": self.code, "message": self.message}, status=self.status, headers=self.headers
        )
        if self.close:
            response.force_close()
        return response


@dataclass(frozen=True)
class Target:
    endpoint_id: str
    slug: str
    owner_scope: str


@dataclass(frozen=True)
class Outcome:
    response: web.Response
    # routed | self_reply | duplicate | ignored, or "handshake" for an answered url_verification.
    disposition: str


# ---------------------------------------------------------------------------------------------
# Small helpers


def has_clues(clues: EchoClues | None) -> bool:
    return clues is not None and bool(clues.object_ids or clues.marker or clues.bot_id)


def address_for(services: Services, delivery: Delivery, verdict: Verdict, verified: bool) -> Address | None:
    """The reply address a provider derives, for verified deliveries only (SPEC §6.1)."""
    if not verified:
        return None
    try:
        address = services.providers.hook.derive_address(delivery=delivery, verdict=verdict)
    except Exception as exc:
        # A provider bug must not lose the delivery: the todo is still created, without an address.
        log.error("derive_address for %s raised %s; no reply address", delivery.source, type(exc).__name__)
        return None
    return address if isinstance(address, Address) else None


# ---------------------------------------------------------------------------------------------
# The handler


async def _read_body(request: web.Request) -> bytes:
    chunks, size = [], 0
    try:
        # A sender that stops mid-body must not hold the request (and its socket) open forever.
        async with asyncio.timeout(BODY_READ_SECONDS):
            async for chunk in request.content.iter_chunked(64 * 1024):
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise Refusal(413, "payload_too_large", "the body is larger than 5 MiB")
                chunks.append(chunk)
    except TimeoutError:
        raise Refusal(
            408, "request_timeout", f"the body did not arrive within {BODY_READ_SECONDS:g} s", close=True
        ) from None
    except (HttpProcessingError, RequestPayloadError, ConnectionError):
        # A truncated or malformed chunked body, a Content-Encoding that does not decode, or the
        # sender hung up: nothing to store.
        raise Refusal(400, "invalid_body", "the body was cut off or malformed", close=True) from None
    return b"".join(chunks)


async def _routed(s: AsyncSession, webhook: Webhook) -> list[Endpoint]:
    """The endpoints of the webhook's routes, in the order the routes were added."""
    return list(
        (
            await s.scalars(
                select(Endpoint)
                .join(Route, Route.endpoint_id == Endpoint.id)
                .where(Route.webhook_id == webhook.id)
                .order_by(Route.created_at, Route.id)
            )
        ).all()
    )


def _targets(webhook: Webhook, owner: Endpoint | None, routed: list[Endpoint]) -> list[Target]:
    """The owner endpoint first, then the routes in the order they were added; live ones only."""
    now = utcnow()
    return [
        Target(e.id, e.slug, e.owner_human_id or e.owner_team_id or "")
        for e in ([owner] if owner is not None else []) + routed
        if endpoint_is_live(e, now) and webhook.queue in e.queues
    ]


async def _original(s: AsyncSession, webhook: Webhook, key: str, secondary: str | None) -> Event | None:
    match = Event.delivery_key == key
    if secondary is not None:
        match = or_(match, Event.secondary_key == secondary)
    return await s.scalar(
        select(Event).where(Event.webhook_id == webhook.id, match).order_by(Event.received_at).limit(1)
    )


async def _duplicate(services: Services, webhook: Webhook, event: Event, verified: bool) -> web.Response:
    """202 with the original delivery's todos and ``created: 0``."""
    async with services.db.read() as s:
        rows = (
            await s.execute(
                select(Todo.id, Todo.queue, Todo.endpoint_id, Endpoint.slug)
                .join(Endpoint, Endpoint.id == Todo.endpoint_id)
                .where(Todo.event_id == event.id)
            )
        ).all()
        route_order = (
            await s.scalars(
                select(Route.endpoint_id).where(Route.webhook_id == webhook.id).order_by(Route.created_at)
            )
        ).all()
    rank = {webhook.endpoint_id: -1, **{eid: i for i, eid in enumerate(route_order)}}
    rows = sorted(rows, key=lambda r: (rank.get(r.endpoint_id, len(rank)), r.id))
    return _accepted(
        [{"id": r.id, "endpoint": r.slug, "queue": r.queue, "created": False} for r in rows],
        created=0,
        verified=verified,
        trust_mode=event.trust_mode,
        disposition="duplicate",
    )


def _accepted(
    todos: list[dict[str, Any]], *, created: int, verified: bool, trust_mode: str, disposition: str
) -> web.Response:
    return web.json_response(
        {
            "todos": todos,
            "created": created,
            "verified": verified,
            "trust_mode": trust_mode,
            "disposition": disposition,
        },
        status=202,
    )


async def _ingest(
    request: web.Request, services: Services, limiter: RateLimiter, seen: dict[str, str]
) -> Outcome:
    """One delivery through the steps of SPEC §4; a ``Refusal`` from any step ends it, and every
    refusal comes before anything is stored."""
    # 1. Size cap and rate limit, then the body (its size checked again as it arrives).
    _admit(request, limiter)
    body = await _read_body(request)
    received_at = utcnow()
    token = _ingest_token(request)

    # 2.-4. run in one read transaction: the webhook with its owner endpoint (one statement), the
    # routes, then (after verify) the deduplication check. A copy that commits after that check is
    # still caught by the unique keys when storing, and answered as the duplicate it is.
    async with services.db.read() as s:
        # 2. The webhook, its provider, its live targets and its signing secret.
        webhook, owner = await _lookup(s, token)
        source = seen["source"] = webhook.source
        kind = _source_kind(services, webhook)
        targets = await _live_targets(s, webhook, owner)
        verified, secret = _signing_secret(services, webhook, kind)

        # 3. Verify over the raw bytes; a handshake is answered at once and stores nothing.
        delivery = Delivery(
            source=source, headers=request.headers, body=body, received_at=received_at, secret=secret
        )
        verdict = _verify(services, webhook, delivery, request.remote)
        if verdict.respond is not None:
            return Outcome(web.json_response(verdict.respond, status=200), "handshake")

        # 4. Delivery key and deduplication.
        key, secondary = _delivery_keys(verdict, body)
        original = await _original(s, webhook, key, secondary)
    if original is not None:
        return Outcome(await _duplicate(services, webhook, original, verified), "duplicate")

    # 5./6. Housekeeping, echo suppression and the reply address.
    disposition, address = await _disposition(services, delivery, verdict, verified, targets)

    # 7. One transaction: the event and one todo per target.
    event = _event_row(webhook, delivery, verdict, key, secondary, verified, disposition)
    todos = _todo_rows(webhook, event, verdict, address, targets) if disposition == "routed" else []
    try:
        await _store(services, event, [todo for _, todo in todos])
    except IntegrityError:
        # Another copy of this delivery committed first (unique keys): answer as its duplicate.
        return await _raced(services, webhook, key, secondary, verified)

    # 8. Acknowledge (the data is committed) and ring the doorbell.
    await _ring(services, source, [todo.id for _, todo in todos])
    log.info(
        "ingest webhook=%s source=%s event=%s disposition=%s todos=%d",
        webhook.id,
        source,
        event.event_type,
        disposition,
        len(todos),
    )
    return Outcome(
        _accepted(
            [{"id": t.id, "endpoint": tg.slug, "queue": t.queue, "created": True} for tg, t in todos],
            created=len(todos),
            verified=verified,
            trust_mode=webhook.trust_mode,
            disposition=disposition,
        ),
        disposition,
    )


# ---------------------------------------------------------------------------------------------
# The steps, in the order ``_ingest`` runs them


def _admit(request: web.Request, limiter: RateLimiter) -> None:
    """Step 1: the size cap (cheaply, from Content-Length) and the per-client rate limit."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise Refusal(413, "payload_too_large", "the body is larger than 5 MiB")
    wait = limiter.take(request.remote or "unknown")
    if wait > 0:
        raise Refusal(
            429,
            "rate_limited",
            "too many deliveries from this address; retry later",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )


def _ingest_token(request: web.Request) -> str:
    """The token from the URL; one of an impossible length is refused before any database work."""
    token = request.match_info["ingest_token"]
    if not 8 <= len(token) <= 200:
        raise Refusal(404, "not_found", "no such webhook")
    return token


async def _lookup(s: AsyncSession, token: str) -> tuple[Webhook, Endpoint | None]:
    """Step 2: the webhook the token names, with its owner endpoint, in one statement."""
    found = (
        await s.execute(
            select(Webhook, Endpoint)
            .outerjoin(Endpoint, Endpoint.id == Webhook.endpoint_id)
            .where(Webhook.ingest_token_hash == token_hash(token))
        )
    ).first()
    if found is None:
        raise Refusal(404, "not_found", "no such webhook")
    webhook, owner = found
    return webhook, owner


def _source_kind(services: Services, webhook: Webhook) -> SourceKind:
    """Step 2: the installed provider of the webhook's source kind, and a secret it can check."""
    kind = services.providers.sources.get(webhook.source)
    if kind is None:
        log.error("webhook %s: no installed provider handles source kind %r", webhook.id, webhook.source)
        raise Refusal(
            503,
            "unavailable",
            f"no installed provider handles source kind {webhook.source!r}; the operator must install it",
        )
    if webhook.secret_state == "awaiting":
        raise Refusal(503, "unavailable", "this webhook is waiting for its signing secret")
    return kind


async def _live_targets(s: AsyncSession, webhook: Webhook, owner: Endpoint | None) -> list[Target]:
    """Step 2: the endpoints a todo goes to; none live is a 503 (the sender retries later)."""
    targets = _targets(webhook, owner, await _routed(s, webhook))
    if not targets:
        raise Refusal(503, "unavailable", "this webhook has no active endpoint to deliver to")
    return targets


def _signing_secret(services: Services, webhook: Webhook, kind: SourceKind) -> tuple[bool, str | None]:
    """Step 2: whether the delivery is verified (a signed webhook of a kind with a secret), and the
    secret to verify it with; a signed webhook whose secret cannot be read is a 503."""
    verified = kind.secret != "none" and webhook.trust_mode == "signed"
    try:
        secret = webhook_secret(services.vault, webhook)
    except VaultError as exc:
        log.error("webhook %s: signing secret cannot be opened (%s)", webhook.id, type(exc).__name__)
        raise Refusal(503, "unavailable", "this webhook's signing secret cannot be read") from None
    if verified and not secret:
        raise Refusal(503, "unavailable", "this webhook is waiting for its signing secret")
    return verified, secret


def _verify(services: Services, webhook: Webhook, delivery: Delivery, remote: str | None) -> Verdict:
    """Step 3: the provider's verdict over the raw bytes (it compares in constant time). A refusal
    is a 401 (or 400 for a signed body that is not JSON); a provider that fails is a 503."""
    source = delivery.source
    try:
        verdict = services.providers.hook.verify(delivery=delivery)
    except Exception as exc:
        log.error("webhook %s: the %s verifier raised %s", webhook.id, source, type(exc).__name__)
        raise Refusal(503, "unavailable", f"the {source} provider could not check this delivery") from None
    if not isinstance(verdict, Verdict):
        log.error("webhook %s: no provider verified source kind %r", webhook.id, source)
        raise Refusal(503, "unavailable", f"no installed provider verifies source kind {source!r}")
    if not verdict.ok:
        # The detail is the provider's reason ("signature mismatch", …): never a signature or secret.
        log.warning(
            "ingest refused: webhook=%s source=%s remote=%s reason=%s",
            webhook.id,
            source,
            remote,
            clean_line(verdict.detail, 200),
        )
        if verdict.error == "invalid_body":
            raise Refusal(400, "invalid_body", "the signed body is not valid JSON")
        raise Refusal(401, "signature_invalid", "the delivery's signature did not verify")
    return verdict


def _delivery_keys(verdict: Verdict, body: bytes) -> tuple[str, str | None]:
    """Step 4: the delivery key (the provider's, else the body's hash) and the optional second key."""
    key = delivery_key(verdict.delivery_key, body)
    secondary = delivery_key(verdict.secondary_key, b"") if verdict.secondary_key else None
    return key, secondary


async def _disposition(
    services: Services, delivery: Delivery, verdict: Verdict, verified: bool, targets: list[Target]
) -> tuple[str, Address | None]:
    """Steps 5 and 6: housekeeping is ``ignored``; the reply address (verified deliveries only); a
    verified delivery that is Switchboard's own reply is a ``self_reply``. Only ``routed`` mints todos."""
    if verdict.ignore:
        return "ignored", None
    address = address_for(services, delivery, verdict, verified)
    if verified and await _is_echo(services, delivery, verdict, targets, address):
        services.metrics.inc("switchboard_echo_drops_total", source=delivery.source)
        return "self_reply", address
    return "routed", address


def _event_row(
    webhook: Webhook,
    delivery: Delivery,
    verdict: Verdict,
    key: str,
    secondary: str | None,
    verified: bool,
    disposition: str,
) -> Event:
    """Step 7: the stored delivery, whatever its disposition (headers with credentials redacted)."""
    return Event(
        id=new_id("ev"),
        webhook_id=webhook.id,
        source=delivery.source,
        event_type=clean_line(verdict.event or delivery.source, 100),
        delivery_key=key,
        secondary_key=secondary,
        headers=redact_headers(delivery.headers),
        body=delivery.body,
        verified=verified,
        verify_detail=clean_line(verdict.detail, 200),
        trust_mode=webhook.trust_mode,
        disposition=disposition,
        received_at=delivery.received_at,
    )


def _todo_rows(
    webhook: Webhook, event: Event, verdict: Verdict, address: Address | None, targets: list[Target]
) -> list[tuple[Target, Todo]]:
    """Step 7: one todo per target, all with the same payload (encoded once) and reply address."""
    source = webhook.source
    payload, encoded = storable_encoded(verdict.payload if verdict.payload is not None else {})
    reply_to = address.as_dict() if address is not None else None
    todo_kind = clean_line(verdict.event or source, 100)
    title = clean_line(verdict.title or f"{source} delivery", 300)
    return [
        (
            target,
            new_todo_row(
                endpoint_id=target.endpoint_id,
                queue=webhook.queue,
                source=source,
                kind=todo_kind,
                title=title,
                payload=payload,
                reply_to=dict(reply_to) if reply_to else None,
                event_id=event.id,
                now=event.received_at,
                encoded=encoded,
            ),
        )
        for target in targets
    ]


async def _store(services: Services, event: Event, todos: list[Todo]) -> None:
    """Step 7: the event and its todos in one transaction (the todos point at the event)."""
    async with services.db.write() as s:
        s.add(event)
        await s.flush()
        s.add_all(todos)


async def _raced(
    services: Services, webhook: Webhook, key: str, secondary: str | None, verified: bool
) -> Outcome:
    """Step 7 lost to a copy of the delivery that committed first: answer as its duplicate."""
    async with services.db.read() as s:
        original = await _original(s, webhook, key, secondary)
    if original is None:
        log.warning("webhook %s changed while a delivery was being stored", webhook.id)
        raise Refusal(503, "unavailable", "the webhook changed while storing; retry") from None
    return Outcome(await _duplicate(services, webhook, original, verified), "duplicate")


async def _ring(services: Services, source: str, todo_ids: list[str]) -> None:
    """Step 8, after the commit: count the new todos and ring the doorbell for them."""
    if todo_ids:
        services.metrics.inc("switchboard_todos_created_total", float(len(todo_ids)), source=source)
        await services.todos_created(todo_ids)


async def _is_echo(
    services: Services, delivery: Delivery, verdict: Verdict, targets: list[Target], address: Address | None
) -> bool:
    try:
        clues = services.providers.hook.is_echo(delivery=delivery, verdict=verdict)
    except Exception as exc:
        log.error("is_echo for %s raised %s; treating as not an echo", delivery.source, type(exc).__name__)
        return False
    if not isinstance(clues, EchoClues) or not has_clues(clues):
        return False
    scopes = list(dict.fromkeys(t.owner_scope for t in targets))
    async with services.db.read() as s:
        return await is_own_reply(s, scopes, clues, thread_key=address.display if address else None)


async def handle_webhook(request: web.Request) -> web.Response:
    services = services_of(request)
    started = time.perf_counter()
    # The source label is known once the webhook is found; refusals before that count as "unknown".
    seen = {"source": "unknown"}
    disposition = "refused"
    try:
        outcome = await _ingest(request, services, request.app[INGEST_LIMITER], seen)
        response, disposition = outcome.response, outcome.disposition
    except Refusal as refusal:
        response = refusal.response()
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        # The database is down, locked or out of connections: nothing was acknowledged, so the
        # sender's retry loses nothing. A 503 tells it to retry; a 500 would look like our bug.
        log.warning("ingest: database unavailable (%s); answered 503", type(exc).__name__)
        response = Refusal(503, "unavailable", "the database is unavailable; retry later").response()
    source = seen["source"]
    services.metrics.inc(
        "switchboard_ingest_total", source=source, status=str(response.status), disposition=disposition
    )
    services.metrics.observe("switchboard_ingest_seconds", time.perf_counter() - started, source=source)
    return response


# Events that minted no todo (ignored, self_reply) are only kept for deduplication and audit. Their
# delivery keys must outlive any provider retry (SPEC: at least 7 days); a month is generous.
EVENT_RETENTION = timedelta(days=30)
RETENTION_BATCH = 1000


async def prune_events(services: Services, now: datetime | None = None) -> int:
    """Delete old events that no todo points at, in batches; returns how many went."""
    cutoff = (now or utcnow()) - EVENT_RETENTION
    total = 0
    while True:
        async with services.db.write() as s:
            stale = (
                select(Event.id)
                .where(Event.received_at < cutoff, ~exists().where(Todo.event_id == Event.id))
                .limit(RETENTION_BATCH)
            )
            ids = list((await s.scalars(stale)).all())
            if ids:
                await s.execute(delete(Event).where(Event.id.in_(ids)))
        total += len(ids)
        if len(ids) < RETENTION_BATCH:
            return total


def setup(app: web.Application) -> None:
    """Add this module's routes and lifetimes to the app."""
    app[INGEST_LIMITER] = RateLimiter()
    app.router.add_post("/webhooks/{ingest_token}", handle_webhook)
