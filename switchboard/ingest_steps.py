"""Ingest's steps, one function each, in the order ``ingest`` runs them (docs/architecture.md,
"Ingest, step by step"): the size cap and the token, the webhook and its flood guard, its
provider, live targets and signing secret, the provider's verdict, the delivery keys, the reply
address, housekeeping and echo suppression, the event row, and intake's plan and todo rows.

Each step takes what the steps before it made and either returns what the next one needs or raises
``Refusal`` (nothing is stored before the last step's rows reach the writer). ``ingest`` strings
them together for a request; a redelivery (``deliveries``) runs the same steps on a stored body, so
the two cannot drift apart. None of them writes to the database.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from aiohttp import web

from switchboard.echo import SharedEchoReads, own_reply_scopes
from switchboard.ids import new_id
from switchboard.ingest_admission import RateLimiter
from switchboard.ingest_answers import Refusal
from switchboard.ingest_config import ConfigCache, Target, WebhookConfig
from switchboard.instances import bind_address
from switchboard.intake import Content, Plan, plan, todo_rows
from switchboard.provider import DISPLAY_MAX, Address, Delivery, SourceKind, Verdict
from switchboard.sanitize import (
    body_key,
    clean_line,
    delivery_key,
    read_from,
    redact_headers,
    storable_encoded,
)
from switchboard.services import Services
from switchboard.vault import VaultError
from switchboard.webhook_ops import PAUSED_RETRY_AFTER, previous_secret

log = logging.getLogger("switchboard.ingest")

MAX_BODY_BYTES = 5 * 1024 * 1024


def check_length(request: web.Request) -> None:
    """Step 1: the size cap, cheaply, from Content-Length."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise Refusal(413, "payload_too_large", "the body is larger than 5 MiB")


def admit(limiter: RateLimiter, config: WebhookConfig) -> None:
    """Step 1: the flood guard, a token bucket per webhook (see ``ingest_admission``)."""
    wait = limiter.take(config.id)
    if wait > 0:
        raise Refusal(
            429,
            "rate_limited",
            "too many deliveries for this webhook; retry later",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )


def ingest_token(request: web.Request) -> str:
    """The token from the URL; one of an impossible length is refused before any database work."""
    token = request.match_info["ingest_token"]
    if not 8 <= len(token) <= 200:
        raise Refusal(404, "not_found", "no such webhook")
    return token


async def lookup(services: Services, cache: ConfigCache, hashed: str) -> WebhookConfig:
    """Step 2: the webhook the token names, with its owner endpoint and its routes, as they are in
    the database now (and kept in the cache)."""
    config = await cache.read(services.db, hashed)
    if config is None:
        raise Refusal(404, "not_found", "no such webhook")
    return config


def source_kind(services: Services, config: WebhookConfig) -> SourceKind:
    """Step 2: the installed provider of the webhook's source kind, and a secret it can check."""
    webhook = config.webhook
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
    if webhook.paused_at is not None:
        # Paused by its owner: nothing is stored; a provider that retries delivers after the resume.
        retry = {"Retry-After": str(PAUSED_RETRY_AFTER)}
        raise Refusal(503, "paused", "this webhook is paused by its owner; retry later", headers=retry)
    return kind


def live_targets(config: WebhookConfig) -> list[Target]:
    """Step 2: the endpoints a todo goes to; none live is a 503 (the sender retries later)."""
    targets = config.targets()
    if not targets:
        raise Refusal(503, "unavailable", "this webhook has no active endpoint to deliver to")
    return targets


def signing_secret(services: Services, config: WebhookConfig, kind: SourceKind) -> tuple[bool, str | None]:
    """Step 2: whether the delivery is verified (a signed webhook of a kind with a secret), and the
    secret to verify it with; a signed webhook whose secret cannot be read is a 503."""
    webhook = config.webhook
    verified = kind.secret != "none" and webhook.trust_mode == "signed"
    try:
        secret = config.signing_secret(services.vault)
    except VaultError as exc:
        log.error("webhook %s: signing secret cannot be opened (%s)", webhook.id, type(exc).__name__)
        raise Refusal(503, "unavailable", "this webhook's signing secret cannot be read") from None
    if verified and not secret:
        raise Refusal(503, "unavailable", "this webhook is waiting for its signing secret")
    return verified, secret


def verify(
    services: Services, config: WebhookConfig, delivery: Delivery, remote: Callable[[], str | None]
) -> Verdict:
    """Step 3: the provider's verdict over the raw bytes (it compares in constant time). A refusal
    is a 401 (or 400 for a signed body that is not JSON); a provider that fails is a 503."""
    source, webhook_id = delivery.source, config.id
    try:
        verdict = services.providers.source(delivery.source).verify(delivery)
        # Within a rotation's overlap the secret it replaced still verifies (webhook_ops).
        overlap = not verdict.ok and delivery.secret is not None
        old = previous_secret(services.vault, config.webhook) if overlap else None
        if old is not None:
            retried = services.providers.source(delivery.source).verify(replace(delivery, secret=old))
            verdict = retried if retried.ok else verdict
    except Exception as exc:
        log.error("webhook %s: the %s verifier raised %s", webhook_id, source, type(exc).__name__)
        raise Refusal(503, "unavailable", f"the {source} provider could not check this delivery") from None
    if not verdict.ok:
        # The detail is the provider's reason ("signature mismatch", …): never a signature or secret.
        log.warning(
            "ingest refused: webhook=%s source=%s remote=%s reason=%s",
            webhook_id,
            source,
            # Worked out only for a refusal's log line (a trusted proxy's header is parsed).
            remote(),
            clean_line(verdict.detail, 200),
        )
        if verdict.error == "invalid_body":
            raise Refusal(400, "invalid_body", "the signed body is not valid JSON")
        raise Refusal(
            401,
            "signature_invalid",
            "the delivery's signature did not verify",
            detail=clean_line(verdict.detail, 200),
        )
    return verdict


def delivery_keys(verdict: Verdict, delivery: Delivery, verified: bool) -> tuple[str, str | None]:
    """Step 4: the delivery key (the provider's, else the body's hash) and the second key: the
    provider's (Slack: one message seen as two events), or the body's hash when a verified
    delivery's key came from a request header.

    A forge (GitHub, Gitea) signs only the body and names the delivery in a header the signature
    does not cover: a captured body and signature replayed under a fresh delivery id would
    otherwise be a new delivery. With the body's hash as its second key, it is the duplicate of the
    first. A redelivery (same id, same body) is a duplicate by either key, as before. Unverified
    (generic) deliveries may legitimately repeat a body, so they keep to their own key."""
    body = delivery.body
    key = delivery_key(verdict.delivery_key, body)
    if verdict.secondary_key:
        return key, delivery_key(verdict.secondary_key, b"")
    named = verdict.delivery_key.strip() if verdict.delivery_key else None
    if verified and named is not None and any(v.strip() == named for v in delivery.headers.values()):
        return key, body_key(body)
    return key, None


def address_for(services: Services, delivery: Delivery, verdict: Verdict, verified: bool) -> Address | None:
    """The reply address a provider derives, for verified deliveries only (docs/sources/*.md,
    "Reply address")."""
    if not verified:
        return None
    try:
        address = services.providers.source(delivery.source).derive_address(delivery, verdict)
    except Exception as exc:
        # A provider bug must not lose the delivery: the todo is still created, without an address.
        log.error("derive_address for %s raised %s; no reply address", delivery.source, type(exc).__name__)
        return None
    if not isinstance(address, Address):
        return None
    if len(address.display) > DISPLAY_MAX:
        # Within every field's own bounds, but longer than a reply row can record: as an address a
        # strict check refuses, no address (the todo is still created).
        log.warning(
            "%s address of %d characters is too long to reply to; none kept",
            delivery.source,
            len(address.display),
        )
        return None
    return address


async def disposition(
    services: Services,
    config: WebhookConfig,
    delivery: Delivery,
    verdict: Verdict,
    verified: bool,
    targets: list[Target],
    echo_reads: SharedEchoReads | None = None,
) -> tuple[str, Address | None, list[Target], str | None]:
    """Steps 5 and 6: (disposition, address, the targets that get a todo, why an address was
    withheld). Housekeeping is ``ignored``. The reply address (verified deliveries only) is kept
    only if it names the instance the webhook serves (an unbound webhook is bound to it). A target
    whose scope sent this very reply gets no todo; a delivery that is every target's own reply is
    a ``self_reply``. Only ``routed`` mints todos."""
    if verdict.ignore:
        return "ignored", None, [], None
    bound = await bind_address(services, config.webhook, address_for(services, delivery, verdict, verified))
    address = bound.address
    if not verified:
        return "routed", address, targets, bound.withheld
    scopes = [t.owner_scope for t in targets]
    echoed = await own_reply_scopes(services, delivery, verdict, address, scopes, echo_reads)
    if echoed:
        services.metrics.inc("switchboard_echo_drops_total", source=delivery.source)
    minting = [t for t in targets if t.owner_scope not in echoed]
    return ("routed" if minting else "self_reply"), address, minting, bound.withheld


def event_row(
    config: WebhookConfig,
    delivery: Delivery,
    verdict: Verdict,
    key: str,
    secondary: str | None,
    verified: bool,
    disposition: str,
    withheld: str | None = None,
) -> dict[str, Any]:
    """Step 7: the stored delivery, whatever its disposition (headers with credentials redacted);
    ``verify_detail`` also says why a reply address was withheld (another instance)."""
    detail = f"{verdict.detail}; {withheld}" if withheld else verdict.detail
    return {
        "id": new_id("ev"),
        "webhook_id": config.id,
        "source": delivery.source,
        "event_type": clean_line(verdict.event or delivery.source, 100),
        "delivery_key": key,
        "secondary_key": secondary,
        "headers": redact_headers(delivery.headers),
        "body": delivery.body,
        "verified": verified,
        "verify_detail": clean_line(detail, 200),
        "trust_mode": config.webhook.trust_mode,
        "disposition": disposition,
        "received_at": delivery.received_at,
        # Set by a redelivery (``deliveries``). Every event row sets every key, so the rows of a
        # batch share one insert's columns.
        "redelivery_of": None,
        # Intake's trace (``intake``).
        "routing": None,
    }


async def intake(
    services: Services,
    config: WebhookConfig,
    kind: SourceKind,
    delivery: Delivery,
    verdict: Verdict,
    verified: bool,
    address: Address | None,
    minting: list[Target],
    targets: list[Target],
    event: dict[str, Any],
) -> tuple[Plan | None, list[dict[str, Any]]]:
    """Step 7 for a ``routed`` delivery: intake's plan (trust, rules, the action; ``minting``: the
    live ``targets`` that did not send this very reply), kept on the event, and the todo rows."""
    if event["disposition"] != "routed":
        return None, []
    payload = verdict.payload if verdict.payload is not None else {}
    # A body read as it came is already the payload's stored form: the todos keep no copy of it
    # (``Todo.payload``). Storing it a second time cost PostgreSQL about a tenth of ingest's
    # throughput (bench/HISTORY.md, "The session of 2026-12-05, evening").
    in_event = kind.payload_is_body and read_from(payload, delivery.body)
    encoded = (payload, delivery.body) if in_event else storable_encoded(payload)
    decided = await plan(
        services, config, kind, delivery, verdict, verified, address, minting, live=targets, encoded=encoded
    )
    event["disposition"], event["routing"] = decided.disposition, decided.event_trace
    at, source = event["received_at"], config.webhook.source
    content = Content.of(
        source, verdict, address, event_id=event["id"], now=at, encoded=encoded, in_event=in_event
    )
    # The todos of the plan, all with the same payload (encoded once) and reply address.
    rows = todo_rows(decided, content)
    if verdict.secondary_key and (not rows or decided.hold is not None):
        # A provider's second key folds the other deliveries of one thing into the todo this one
        # makes (Slack's ``message`` and ``app_mention`` of one message). A delivery that made no
        # work (a rule dropped it, or held it for a look) must not claim the key: the other
        # delivery, which a rule may pick ("only mentions"), would be a duplicate of nothing (or
        # of the held one) and its todo never made.
        event["secondary_key"] = None
    return decided, rows
