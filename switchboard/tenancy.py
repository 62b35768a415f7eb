"""Webhooks and routes: what an owner scope vends to receive deliveries, and where they go.

Every function here takes the ``Database`` and does its work in one write transaction, so a
refused request leaves nothing half-written. The CLI, the operator API and the web UI all call
these; none of them writes these tables directly.

Humans, teams and owner scopes live in ``switchboard.owners``, endpoints in ``switchboard.endpoints``;
this module re-exports them, so ``tenancy.add_human``, ``tenancy.vend_endpoint``, ``tenancy.Owner``
and the rest keep working. Likewise ``remove_route`` from ``switchboard.routes`` (routes seen from
both ends).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.config_changes import changing
from switchboard.db import Database, utcnow
from switchboard.endpoints import (
    ALL_VERBS,
    CONNECTION_VERBS_WARNING,
    MAX_ENDPOINTS_PER_OWNER,
    MAX_LEASE_SECONDS,
    QUEUE_RE,
    RESERVED_QUEUES,
    VERB_FAMILIES,
    check_queue,
    endpoint_by_token,
    endpoint_is_live,
    endpoint_view,
    families_of,
    get_endpoint,
    list_endpoints,
    revoke_endpoint,
    scope_filter,
    vend_endpoint,
    verbs_for,
)
from switchboard.errors import SwitchboardError, conflict, invalid, not_found
from switchboard.ids import new_id, new_token, token_display, token_hash
from switchboard.instances import normalize_instance
from switchboard.models import Endpoint, Route, Webhook
from switchboard.owners import (
    HANDLE_RE,
    ROLES,
    Owner,
    add_human,
    add_team,
    can_manage,
    can_see,
    check_handle,
    human_by_token,
    human_view,
    list_humans,
    list_teams,
    owner_label,
    remove_member,
    resolve_owner,
    role_in,
    set_member,
)
from switchboard.plugins import Providers, UnknownKind
from switchboard.routes import remove_route
from switchboard.vault import Vault, binding

# Every public name, this module's and the ones re-exported from ``owners`` and ``endpoints``
# (``tenancy.X`` works for every X callers used before the splits).
__all__ = [
    "ALL_VERBS",
    "CONNECTION_VERBS_WARNING",
    "HANDLE_RE",
    "MAX_ENDPOINTS_PER_OWNER",
    "MAX_LEASE_SECONDS",
    "QUEUE_RE",
    "RESERVED_QUEUES",
    "ROLES",
    "VERB_FAMILIES",
    "NewWebhook",
    "Owner",
    "add_human",
    "add_route",
    "add_team",
    "can_manage",
    "can_see",
    "check_handle",
    "check_label",
    "check_queue",
    "create_webhook",
    "delete_webhook",
    "endpoint_by_token",
    "endpoint_is_live",
    "endpoint_view",
    "families_of",
    "get_endpoint",
    "get_webhook",
    "human_by_token",
    "human_view",
    "ingest_url",
    "list_endpoints",
    "list_humans",
    "list_teams",
    "list_webhooks",
    "owner_label",
    "remove_member",
    "remove_route",
    "resolve_owner",
    "revoke_endpoint",
    "role_in",
    "rotate_webhook_secret",
    "scope_filter",
    "set_member",
    "set_webhook_secret",
    "vend_endpoint",
    "verbs_for",
    "webhook_secret",
    "webhook_view",
]

# ---------------------------------------------------------------------------------------------
# Webhooks and routes


@dataclass(frozen=True)
class NewWebhook:
    webhook: Webhook
    ingest_token: str
    # Shown once, for kinds whose secret Switchboard mints.
    secret: str | None


def _mint_secret() -> str:
    return new_token("whsec", 24)


# The default of SWITCHBOARD_SECRET_OVERLAP_SECONDS (the surfaces pass the configured value).
SECRET_OVERLAP_SECONDS = 24 * 3600
WEBHOOK_NAME_MAX, WEBHOOK_DESCRIPTION_MAX = 100, 500


def check_label(value: str | None, what: str, limit: int) -> str | None:
    """A webhook's name or description: one line of printable text, at most ``limit`` characters
    (refused beyond, never cut); empty is none."""
    text = (value or "").strip()
    if len(text) > limit:
        raise invalid(f"the {what} is longer than {limit} characters")
    if not text.isprintable():
        raise invalid(f"the {what} must be one line of printable text")
    return text or None


def _retire_secret(webhook: Webhook, overlap_seconds: int) -> None:
    """Before a new secret replaces the current one: keep the current one, still accepted for
    ``overlap_seconds`` (``webhook_ops.previous_secret``), so the provider can be updated without
    lost deliveries. With no overlap, or no secret yet, nothing is kept."""
    keep = overlap_seconds > 0 and webhook.secret_state == "set" and webhook.secret_ciphertext is not None
    webhook.previous_secret_ciphertext = webhook.secret_ciphertext if keep else None
    webhook.previous_secret_key_id = webhook.secret_key_id if keep else None
    webhook.previous_secret_expires_at = utcnow() + timedelta(seconds=overlap_seconds) if keep else None


async def create_webhook(
    db: Database,
    vault: Vault,
    providers: Providers,
    *,
    endpoint_slug: str,
    source: str,
    queue: str | None = None,
    instance: str | None = None,
    name: str | None = None,
    description: str | None = None,
    trust: dict[str, Any] | None = None,
) -> NewWebhook:
    """``instance`` pins the webhook to the instance it serves (``ghes.example.com``,
    ``https://git.example.com/gitea``); left out, its first verified delivery with a reply address
    binds it (see ``instances``). ``trust``: its trusted actors as ``intake_config.trust_for_create``
    checked them (required for kinds with actors; without it every delivery is quarantined)."""
    try:
        kind = providers.source(source)
    except UnknownKind:
        raise invalid(
            f"unknown source kind {source!r} (known: {', '.join(sorted(providers.sources))})"
        ) from None
    pinned = normalize_instance(providers, source, instance) if instance is not None else None
    name = check_label(name, "name", WEBHOOK_NAME_MAX)
    description = check_label(description, "description", WEBHOOK_DESCRIPTION_MAX)
    ingest_token = new_token("wh", 24)
    async with changing(db) as s:
        endpoint = await s.scalar(select(Endpoint).where(Endpoint.slug == endpoint_slug))
        if endpoint is None:
            raise not_found(f"endpoint {endpoint_slug!r}")
        if not endpoint_is_live(endpoint):
            raise conflict(f"endpoint {endpoint_slug!r} is not active")
        # Only a queue left out is the endpoint's first: an empty one is refused, never ignored.
        queue = endpoint.queues[0] if queue is None else queue
        check_queue(queue)
        if queue not in endpoint.queues:
            raise invalid(f"queue {queue!r} is not granted to endpoint {endpoint_slug!r}")
        webhook = Webhook(
            id=new_id("wh"),
            endpoint_id=endpoint.id,
            source=source,
            queue=queue,
            ingest_token_hash=token_hash(ingest_token),
            ingest_token_display=token_display(ingest_token),
            trust_mode="token" if kind.secret == "none" else "signed",
            secret_state={"minted": "set", "provider": "awaiting", "none": "none"}[kind.secret],
            created_at=utcnow(),
            instance=pinned,
            name=name,
            description=description,
            trust=trust,
        )
        secret = _mint_secret() if kind.secret == "minted" else None
        if secret is not None:
            webhook.secret_ciphertext, webhook.secret_key_id = vault.seal(
                secret, binding("webhooks", "secret", webhook.id), allow_plaintext=True
            )
        s.add(webhook)
    return NewWebhook(webhook, ingest_token, secret)


async def _webhook(s: AsyncSession, webhook_id: str, *, locked: bool = False) -> Webhook:
    webhook = await s.get(Webhook, webhook_id, with_for_update=locked)
    if webhook is None:
        raise not_found(f"webhook {webhook_id!r}")
    return webhook


async def get_webhook(db: Database, webhook_id: str) -> Webhook:
    async with db.read() as s:
        return await _webhook(s, webhook_id)


async def rotate_webhook_secret(
    db: Database,
    vault: Vault,
    providers: Providers,
    webhook_id: str,
    *,
    overlap_seconds: int = SECRET_OVERLAP_SECONDS,
) -> str:
    """Mint a new signing secret (minted kinds only); returns it, shown once. The old one still
    verifies for ``overlap_seconds``."""
    async with changing(db) as s:
        # Locked: two changes of the secret at once each retired the same old one and the later
        # write won, so the first operator was shown a secret that never verified (PostgreSQL).
        webhook = await _webhook(s, webhook_id, locked=True)
        kind = providers.sources.get(webhook.source)
        if kind is None or kind.secret != "minted":
            raise invalid(
                f"a {webhook.source} webhook's secret is not minted by Switchboard "
                f"({'use set-secret' if kind and kind.secret == 'provider' else 'it has none'})"
            )
        secret = _mint_secret()
        _retire_secret(webhook, overlap_seconds)
        webhook.secret_ciphertext, webhook.secret_key_id = vault.seal(
            secret, binding("webhooks", "secret", webhook.id), allow_plaintext=True
        )
        webhook.secret_rotated_at = utcnow()
    return secret


async def set_webhook_secret(
    db: Database,
    vault: Vault,
    providers: Providers,
    webhook_id: str,
    secret: str,
    *,
    overlap_seconds: int = SECRET_OVERLAP_SECONDS,
) -> Webhook:
    """Set (or replace) a provider-issued secret; a replaced one still verifies for ``overlap_seconds``."""
    secret = secret.strip()
    if not secret or len(secret) > 512 or not secret.isprintable() or any(c.isspace() for c in secret):
        raise invalid("the secret must be 1 to 512 printable characters with no spaces")
    async with changing(db) as s:
        # Locked: two changes of the secret at once each retired the same old one and the later
        # write won, so the first operator was shown a secret that never verified (PostgreSQL).
        webhook = await _webhook(s, webhook_id, locked=True)
        kind = providers.sources.get(webhook.source)
        if kind is None or kind.secret != "provider":
            raise invalid(
                f"a {webhook.source} webhook's secret is not set by hand "
                f"({'use rotate' if kind and kind.secret == 'minted' else 'it has none'})"
            )
        _retire_secret(webhook, overlap_seconds)
        webhook.secret_ciphertext, webhook.secret_key_id = vault.seal(
            secret, binding("webhooks", "secret", webhook.id), allow_plaintext=True
        )
        webhook.secret_state = "set"
        webhook.secret_rotated_at = utcnow()
    return webhook


def webhook_secret(vault: Vault, webhook: Webhook) -> str | None:
    if webhook.secret_ciphertext is None or webhook.secret_key_id is None:
        return None
    return vault.open(
        webhook.secret_ciphertext, webhook.secret_key_id, binding("webhooks", "secret", webhook.id)
    )


async def delete_webhook(db: Database, webhook_id: str) -> None:
    async with changing(db) as s:
        await s.delete(await _webhook(s, webhook_id))


async def list_webhooks(
    db: Database, endpoint_slug: str | None = None, owner: Owner | None = None
) -> list[dict[str, Any]]:
    async with db.read() as s:
        query = select(Webhook, Endpoint.slug).join(Endpoint).order_by(Webhook.created_at)
        if endpoint_slug is not None:
            query = query.where(Endpoint.slug == endpoint_slug)
        if owner is not None:
            query = (
                query.where(Endpoint.owner_human_id == owner.human_id)
                if owner.human_id
                else query.where(Endpoint.owner_team_id == owner.team_id)
            )
        rows = (await s.execute(query)).all()
        out = []
        for webhook, slug in rows:
            routes = await s.scalars(
                select(Endpoint.slug)
                .join(Route, Route.endpoint_id == Endpoint.id)
                .where(Route.webhook_id == webhook.id)
                .order_by(Route.created_at)
            )
            out.append(webhook_view(webhook, slug, list(routes.all())))
        return out


def webhook_view(webhook: Webhook, endpoint_slug: str, routes: list[str] | None = None) -> dict[str, Any]:
    """A webhook as every surface shows it: never its secret, the ingest token only as a prefix."""
    return {
        "id": webhook.id,
        "endpoint": endpoint_slug,
        "source": webhook.source,
        "queue": webhook.queue,
        "trust_mode": webhook.trust_mode,
        "secret_state": webhook.secret_state,
        # The instance it serves (pinned, or bound by its first delivery with a reply address).
        "instance": webhook.instance,
        "ingest_token_prefix": webhook.ingest_token_display,
        "routes": routes or [],
        "created_at": webhook.created_at,
        "secret_rotated_at": webhook.secret_rotated_at,
        "name": webhook.name,
        "description": webhook.description,
        # Paused: ingest answers 503 with Retry-After and stores nothing until it is resumed.
        "paused": webhook.paused_at is not None,
        "paused_at": webhook.paused_at,
        # Until then the secret a rotation replaced still verifies (null: none does).
        "previous_secret_expires_at": webhook.previous_secret_expires_at
        if webhook.previous_secret_expires_at is not None and webhook.previous_secret_expires_at > utcnow()
        else None,
        # Who may create work, and how many routing rules decide what does (docs/routing.md).
        "trust": webhook.trust,
        "rules": len((webhook.routing or {}).get("rules") or []),
    }


def ingest_url(base_url: str, ingest_token: str) -> str:
    return f"{base_url.rstrip('/')}/webhooks/{ingest_token}"


async def add_route(
    db: Database, webhook_id: str, endpoint_slug: str, *, consenting_human_id: str | None = None
) -> Route:
    """Fan a webhook out to another endpoint. Across owner scopes, a human caller must administer
    both; the CLI (the instance operator) passes no human and is trusted."""
    async with changing(db) as s:
        webhook = await _webhook(s, webhook_id)
        target = await s.scalar(select(Endpoint).where(Endpoint.slug == endpoint_slug))
        if target is None:
            raise not_found(f"endpoint {endpoint_slug!r}")
        if target.id == webhook.endpoint_id:
            raise invalid("the webhook's own endpoint always receives its deliveries")
        if not endpoint_is_live(target):
            raise conflict(f"endpoint {endpoint_slug!r} is not active")
        source = await s.get(Endpoint, webhook.endpoint_id)
        assert source is not None
        if consenting_human_id is not None and not (
            await can_manage(s, consenting_human_id, Owner.of(source))
            and await can_manage(s, consenting_human_id, Owner.of(target))
        ):
            raise SwitchboardError("forbidden", "a route into another scope needs that scope's consent")
        if webhook.queue not in target.queues:
            raise invalid(f"endpoint {endpoint_slug!r} is not granted queue {webhook.queue!r}")
        route = Route(id=new_id("rt"), webhook_id=webhook.id, endpoint_id=target.id, created_at=utcnow())
        s.add(route)
        try:
            await s.flush()
        except IntegrityError:
            raise conflict(f"endpoint {endpoint_slug!r} is already a route of this webhook") from None
    return route


# ``remove_route`` (re-exported above) is in ``switchboard.routes``, with removal by route id: either
# side of a route may withdraw it.
