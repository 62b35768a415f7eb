"""A webhook is bound to the one instance it serves (github.com, a GHES host, a Gitea or Cairn base).

A reply address comes from a verified delivery, but a signature proves only who holds the webhook's
secret, not that the payload's URLs name the instance the webhook was made for. Without a binding,
a delivery on a github.com webhook whose ``html_url`` named the owner's GHES host got an address
that the owner's GHES connection then served. So each webhook is bound to one instance: pinned when
it is created (``webhook create --instance``), or else by its first verified delivery with a reply
address. A later delivery whose address names another instance still mints its todos, without an
address, and its event's ``verify_detail`` says why.

The instance is the connection kind's account key for the address (its ``instance_of``): the host
for GitHub, the https base URL (path included) for Gitea and Cairn. Kinds without ``instance_of``
(Slack: one app serves many workspaces through one API host) are not bound.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select, update

from switchboard import config_changes
from switchboard.errors import invalid
from switchboard.models import Webhook
from switchboard.plugins import Providers, UnknownKind
from switchboard.provider import Address
from switchboard.services import Services

log = logging.getLogger("switchboard.instances")


@dataclass(frozen=True)
class Bound:
    """The address a delivery keeps (None when withheld) and, when withheld, the reason for its
    event's ``verify_detail`` (short, one line, never a secret)."""

    address: Address | None
    withheld: str | None = None


def instance_of(providers: Providers, address: Address) -> str | None:
    """The instance an address names, as its connection kind's account key; None if the kind does
    not say (not installed, no ``instance_of``, or an address it cannot read)."""
    try:
        kind = providers.connection(address.provider)
    except UnknownKind:
        return None
    if kind.instance_of is None:
        return None
    try:
        instance = kind.instance_of(address)
    except (KeyError, TypeError, ValueError):
        return None
    return instance if isinstance(instance, str) and instance else None


def pinnable(providers: Providers, source: str) -> bool:
    """Can a webhook of this source kind be bound (its addresses name an instance)?"""
    try:
        return providers.connection(source).instance_of is not None
    except UnknownKind:
        return False


def normalize_instance(providers: Providers, source: str, value: object) -> str:
    """The instance an owner pins at create, normalised like the connection kind's account key
    (``ghes.example.com``; ``https://git.example.com/gitea``), or ``invalid``."""
    if not pinnable(providers, source):
        raise invalid(f"a {source} webhook cannot be bound to an instance: its deliveries name none")
    if not isinstance(value, str) or not value.strip() or len(value) > 300:
        raise invalid("the instance must be text of at most 300 characters")
    try:
        return providers.connection(source).normalize_account_key(value.strip())
    except ValueError as exc:
        raise invalid(f"instance for {source}: {exc}") from None


async def _bind_first(services: Services, webhook_id: str, instance: str) -> str | None:
    """Bind an unbound webhook; the instance it is bound to afterwards (a concurrent first delivery
    may have bound it to its own). None if the webhook is gone."""
    # Through ``changing``: ingest serves from a per-process copy of the webhook row, which must
    # learn of the binding (here at commit, other processes by NOTIFY on PostgreSQL).
    async with config_changes.changing(services.db) as s:
        await s.execute(
            update(Webhook)
            .where(Webhook.id == webhook_id, Webhook.instance.is_(None))
            .values(instance=instance)
        )
        return await s.scalar(select(Webhook.instance).where(Webhook.id == webhook_id))


async def bind_address(services: Services, webhook: Webhook, address: Address | None) -> Bound:
    """Keep ``address`` if it names the instance the webhook serves, binding an unbound webhook to
    it; withhold it (with the reason) if it names another one. Costs a statement only while the
    webhook is unbound: ``webhook.instance`` comes with the row ingest has already read."""
    if address is None:
        return Bound(None)
    instance = instance_of(services.providers, address)
    bound = webhook.instance
    if instance is None:
        if bound is None:
            return Bound(address)
        # Bound, but the address does not say which instance it names: fail closed.
        return _withhold(webhook, "the delivery names no instance", bound)
    if bound is None:
        bound = await _bind_first(services, webhook.id, instance)
        if bound is None or bound == instance:
            if bound is not None:
                log.info("webhook %s bound to instance %s by its first verified delivery", webhook.id, bound)
            return Bound(address)
    if bound == instance:
        return Bound(address)
    return _withhold(webhook, f"the delivery names {instance}", bound)


def _withhold(webhook: Webhook, names: str, bound: str) -> Bound:
    log.warning("webhook %s: reply address withheld, %s but the webhook serves %s", webhook.id, names, bound)
    return Bound(None, f"reply address withheld: {names}, the webhook serves {bound}")
