"""Webhook ingest: ``POST /webhooks/{ingest_token}`` turns a verified delivery into todos
(docs/architecture.md, "Ingest, step by step").

The order matters and is the contract: size cap, the webhook, its flood guard (nothing read or
stored), its targets, the provider's ``verify`` over the raw bytes (a refusal stores nothing), the
delivery key and deduplication, housekeeping, echo suppression, the reply address (verified
deliveries only), intake (trusted actors and the webhook's rules: ``intake``, docs/routing.md), then
one transaction for the event and its todos, and only after it commits the 202 and the doorbell.
The source kind is whatever a provider registered: nothing here names one.

Each step is a function of ``ingest_steps``, which a redelivery (``deliveries``) runs too; this
module strings them together for a request. Everything up to the rows is done per request, with no
write; the rows go to the process's group-commit writer (``ingest_writer``), which stores the
deliveries that accumulated while its previous commit ran in one transaction, finds duplicates by
the unique keys as it inserts, and hands back a delivery whose webhook changed meanwhile to be
decided again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from switchboard import content_coding
from switchboard import ingest_steps as steps
from switchboard.db import is_unavailable, utcnow
from switchboard.delivery_records import DELIVERY_RECORDER, DeliveryRecorder
from switchboard.echo import SharedEchoReads
from switchboard.ids import token_hash
from switchboard.ingest_admission import Admission, RateLimiter
from switchboard.ingest_answers import Outcome, Refusal, accepted, duplicate
from switchboard.ingest_config import ConfigCache, WebhookConfig, listen_for_changes
from switchboard.ingest_retention import EVENT_RETENTION, prune_events
from switchboard.ingest_statements import Rows
from switchboard.ingest_steps import MAX_BODY_BYTES, address_for
from switchboard.ingest_writer import IngestWriter, Result
from switchboard.intake import Plan, answered
from switchboard.logs import ACCESS_NOTE
from switchboard.provider import Delivery
from switchboard.services import Services, services_of

log = logging.getLogger("switchboard.ingest")

BODY_READ_SECONDS = 30.0


__all__ = [
    "BODY_READ_SECONDS",
    "EVENT_RETENTION",
    "INGEST_ADMISSION",
    "INGEST_CONFIGS",
    "INGEST_LIMITER",
    "INGEST_WRITER",
    "MAX_BODY_BYTES",
    "Outcome",
    "RateLimiter",
    "Refusal",
    "address_for",
    "handle_webhook",
    # The app's retention job knows it as ingest's.
    "prune_events",
    "setup",
]


@dataclass(frozen=True)
class Decision:
    """A delivery decided (steps 2-6), what intake made of it and its rows (step 7), ready for the
    writer. ``plan`` is None unless the delivery was ``routed`` into intake."""

    rows: Rows
    plan: Plan | None
    verified: bool
    disposition: str
    key: str
    secondary: str | None


# Deliveries decided again because their webhook changed before they could be stored; one more
# than that answers 503 (the sender retries).
DECIDE_ATTEMPTS = 3

INGEST_LIMITER = web.AppKey("ingest_limiter", RateLimiter)
INGEST_ADMISSION = web.AppKey("ingest_admission", Admission)
INGEST_WRITER = web.AppKey("ingest_writer", IngestWriter)
INGEST_ECHO_READS = web.AppKey("ingest_echo_reads", SharedEchoReads)
INGEST_CONFIGS = web.AppKey("ingest_configs", ConfigCache)


# ---------------------------------------------------------------------------------------------
# The handler


async def _read_body(request: web.Request) -> bytes:
    """The body as it was sent, its ``Content-Encoding`` undone (``content_coding``): whole, or a
    ``Refusal``."""
    header = content_coding.header_of(request.headers)
    try:
        # An encoding not decoded here is refused before a byte of the body is read.
        coded = content_coding.check(header)
        body = await _read_raw(request)
        return content_coding.decoded(body, header, MAX_BODY_BYTES, "5 MiB") if coded else body
    except content_coding.Undecodable as exc:
        raise Refusal(exc.status, exc.code, exc.message, close=exc.status == 415) from None


async def _read_raw(request: web.Request) -> bytes:
    content = request.content
    if content.is_eof() and content.exception() is None:
        # The whole body came with the request (webhooks are a few KiB): no timer, no chunk loop.
        body = content.read_nowait()
        if len(body) > MAX_BODY_BYTES:
            raise Refusal(413, "payload_too_large", "the body is larger than 5 MiB")
        return body
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
        # A truncated or malformed chunked body, or the sender hung up: nothing to store.
        raise Refusal(400, "invalid_body", "the body was cut off or malformed", close=True) from None
    return b"".join(chunks)


async def _ingest(
    request: web.Request, services: Services, limiter: RateLimiter, seen: dict[str, str]
) -> Outcome:
    """One delivery through the steps of docs/architecture.md ("Ingest, step by step"); a
    ``Refusal`` from any step ends it, and every refusal comes before anything is stored."""
    hashed = token_hash(steps.ingest_token(request))

    # 2. The webhook, its owner endpoint and its routes: from this process's cache when it has
    # them (see ingest_config for why a stale copy never leads to a wrong answer).
    cache = request.app[INGEST_CONFIGS]
    config = cache.get(hashed)
    cached = config is not None
    if config is None:
        config = await steps.lookup(services, cache, hashed)
    seen["source"], seen["webhook"] = config.webhook.source, config.id

    # 1. The size cap from Content-Length (the body is measured again as it arrives) and the flood
    # guard, once the webhook is known (a refusal of either is counted as its refusal) and before
    # a byte of the body is read; then the body.
    steps.check_length(request)
    steps.admit(limiter, config)
    body = await _read_body(request)
    received_at = utcnow()

    for _ in range(DECIDE_ATTEMPTS):
        if config is None:
            config = await steps.lookup(services, cache, hashed)
        seen["source"] = config.webhook.source
        # 3.-7. Verify, keys, disposition, address and the rows; a handshake is answered at once.
        try:
            decided = await _decide(request, services, config, body, received_at)
        except Refusal:
            # Refused on a cached copy: refuse only if the webhook is still as the copy says.
            newer = await _newer(services, cache, hashed, config) if cached else None
            if newer is None:
                raise
            config, cached = newer, False
            continue
        if isinstance(decided, Outcome):
            newer = await _newer(services, cache, hashed, config) if cached else None
            if newer is None:
                return decided
            config, cached = newer, False
            continue
        # 7. The group-commit writer stores the event and its todos in one transaction (with other
        # deliveries) and rings the doorbell after the commit (step 8).
        result = await request.app[INGEST_WRITER].submit(decided.rows)
        if result.status != "stale":
            return await _answer(services, config, decided, result)
        # The webhook changed (a route, a revocation, a new secret) after this delivery was decided:
        # nothing was stored; decide it again on the webhook as it is now.
        config, cached = None, False
    log.warning("ingest: webhook kept changing while a delivery was stored; answered 503")
    raise Refusal(503, "unavailable", "the webhook changed while storing; retry")


async def _newer(
    services: Services, cache: ConfigCache, hashed: str, config: WebhookConfig
) -> WebhookConfig | None:
    """The webhook as it is now if it differs from ``config`` (None: the same)."""
    current = await steps.lookup(services, cache, hashed)
    return None if current.version == config.version else current


async def _decide(
    request: web.Request, services: Services, config: WebhookConfig, body: bytes, received_at: datetime
) -> Decision | Outcome:
    """Steps 2-7 for one configuration of the webhook: every step but storing."""
    webhook = config.webhook
    # 2. Its provider, its live targets and its signing secret.
    kind = steps.source_kind(services, config)
    targets = steps.live_targets(config)
    verified, secret = steps.signing_secret(services, config, kind)

    # 3. Verify over the raw bytes; a handshake is answered at once and stores nothing.
    delivery = Delivery(
        source=webhook.source, headers=request.headers, body=body, received_at=received_at, secret=secret
    )
    verdict = steps.verify(services, config, delivery, functools.partial(_client, request))
    if verdict.respond is not None:
        return Outcome(web.json_response(verdict.respond, status=200), "handshake")

    # 4. The delivery keys (a delivery already stored is found by them when storing).
    key, secondary = steps.delivery_keys(verdict, delivery, verified)

    # 5./6. Housekeeping, the reply address and echo suppression (per target scope).
    disposition, address, minting, withheld = await steps.disposition(
        services, config, delivery, verdict, verified, targets, request.app[INGEST_ECHO_READS]
    )

    # 7. Intake (trust, rules, the action), then the event and its todos.
    event = steps.event_row(config, delivery, verdict, key, secondary, verified, disposition, withheld)
    decided, todos = await steps.intake(
        services, config, kind, delivery, verdict, verified, address, minting, targets, event
    )
    rows = Rows(
        config=config,
        target_ids=tuple(t.endpoint_id for t in targets),
        event=event,
        todos=todos,
        source=webhook.source,
    )
    # Intake may have let go of the provider's second key (a delivery that made no todo): a
    # duplicate is looked up by the keys the event is stored with.
    return Decision(rows, decided, verified, event["disposition"], key, event["secondary_key"])


async def _answer(services: Services, config: WebhookConfig, decision: Decision, result: Result) -> Outcome:
    """Step 8: the answer once the writer has committed (or could not)."""
    webhook = config.webhook
    if result.status == "duplicate":
        return await duplicate(
            services, config, key=decision.key, secondary=decision.secondary, verified=decision.verified
        )
    if result.status == "unavailable":
        error = result.error or RuntimeError("unavailable")
        log.warning("ingest: database unavailable (%s); answered 503", type(error).__name__)
        raise Refusal(503, "unavailable", "the database is unavailable; retry later")
    if result.status != "stored":
        raise Refusal(503, "unavailable", "the delivery could not be stored; retry later")
    disposition = decision.disposition
    note = (
        f"webhook={webhook.id} source={webhook.source} event={decision.rows.event['event_type']}"
        f" disposition={disposition} todos={len(decision.rows.todos)}"
    )
    made = decision.plan
    todos = answered(made, decision.rows.todos, result.folded) if made is not None else []
    return Outcome(
        accepted(
            todos,
            created=sum(1 for todo in todos if todo["created"]),
            verified=decision.verified,
            trust_mode=webhook.trust_mode,
            disposition=disposition,
        ),
        disposition,
        decision.rows.event["id"],
        decision.key,
        note,
    )


def _client(request: web.Request) -> str:
    """The client's address for the log (``X-Forwarded-For`` only from a trusted proxy)."""
    return request.app[INGEST_ADMISSION].client(request.remote, request.headers)


async def handle_webhook(request: web.Request) -> web.Response:
    services = services_of(request)
    started = time.perf_counter()
    # The source label is known once the webhook is found; refusals before that count as "unknown".
    seen = {"source": "unknown"}
    disposition, reason, detail = "refused", "", ""
    outcome = None
    try:
        outcome = await _ingest(request, services, request.app[INGEST_LIMITER], seen)
        response, disposition = outcome.response, outcome.disposition
        if outcome.note:  # written on the request's access line (logs.RedactingAccessLogger)
            request[ACCESS_NOTE] = outcome.note
    except Refusal as refusal:
        response = refusal.response()
        reason, detail = refusal.code, refusal.detail
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        # The database is down, locked or out of connections: nothing was acknowledged, so the
        # sender's retry loses nothing. A 503 tells it to retry; a 500 would look like our bug.
        log.warning("ingest: database unavailable (%s); answered 503", type(exc).__name__)
        response = Refusal(503, "unavailable", "the database is unavailable; retry later").response()
        reason = detail = "unavailable"
    if disposition == "refused" and "webhook" in seen:
        # Every refusal of a known webhook is visible to its operator, per webhook and reason:
        # counted, and noted in its delivery log (written later, off this path; see delivery_records).
        client = _client(request)
        request.app[INGEST_ADMISSION].refusals.refused(seen["webhook"], reason, client)
        request.app[DELIVERY_RECORDER].refused(seen["webhook"], response.status, reason, detail, client)
    elif disposition == "duplicate" and outcome is not None:
        recorder = request.app[DELIVERY_RECORDER]
        recorder.duplicate(seen["webhook"], outcome.key, outcome.event_id, _client(request))
    source = seen["source"]
    services.metrics.inc(
        "switchboard_ingest_total", source=source, status=str(response.status), disposition=disposition
    )
    services.metrics.observe("switchboard_ingest_seconds", time.perf_counter() - started, source=source)
    return response


async def _lifetime(app: web.Application) -> AsyncIterator[None]:
    """While the app runs: on PostgreSQL, hear of configuration changes made by other processes.
    At shutdown the writer stores what is still in flight (the server stops taking requests and
    waits for its handlers before this cleanup runs)."""
    services = services_of(app)
    listener = None
    if not services.db.is_sqlite:
        listener = asyncio.create_task(
            listen_for_changes(services.settings.database_url), name="switchboard:ingest-config-listen"
        )
    try:
        yield
    finally:
        await app[INGEST_WRITER].close()
        await app[DELIVERY_RECORDER].close()
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener


def setup(app: web.Application) -> None:
    """Add this module's routes and lifetimes to the app."""
    services = services_of(app)
    settings = services.settings
    app[INGEST_LIMITER] = RateLimiter(rate=settings.ingest_rate, burst=settings.ingest_burst)
    app[INGEST_ADMISSION] = Admission(services.metrics, settings.trusted_proxy_networks)
    app[INGEST_WRITER] = IngestWriter(services)
    app[INGEST_ECHO_READS] = SharedEchoReads(services.db)
    app[INGEST_CONFIGS] = ConfigCache()
    app[DELIVERY_RECORDER] = DeliveryRecorder(services)
    # After ``_resources`` (app.py): cleaned up before the database pool is disposed of.
    app.cleanup_ctx.append(_lifetime)
    app.router.add_post("/webhooks/{ingest_token}", handle_webhook)
