"""What an operator does to a webhook besides creating, rotating and deleting it (``tenancy``): name
and describe it, pause and resume it, and end the overlap of a rotated-away signing secret early.

The overlap: a rotation (``tenancy.rotate_webhook_secret``) or a replaced provider secret keeps the
old secret, sealed as it was, until ``previous_secret_expires_at``; ingest tries it when the current
one does not verify (``previous_secret``), so deliveries signed before the provider was updated
still land. After a leak, ``expire_previous_secret`` ends that at once.

Pausing: ingest answers a paused webhook 503 with ``Retry-After`` and stores nothing (providers that
retry deliver again after the resume; the others can redeliver by hand). Every change goes through
``config_changes.changing`` so ingest's per-process cache hears of it.
"""

from __future__ import annotations

import logging
from datetime import datetime

from switchboard.config_changes import changing
from switchboard.db import Database, utcnow
from switchboard.errors import not_found
from switchboard.models import Webhook
from switchboard.tenancy import WEBHOOK_DESCRIPTION_MAX, WEBHOOK_NAME_MAX, check_label
from switchboard.vault import Vault, VaultError, binding

log = logging.getLogger("switchboard")

# What ingest tells a sender of a paused webhook to wait before retrying, in seconds.
PAUSED_RETRY_AFTER = 600


class _Unset:
    """A field the caller left alone (``None`` clears it)."""


UNSET = _Unset()


def previous_secret(vault: Vault, webhook: Webhook, now: datetime | None = None) -> str | None:
    """The secret a rotation replaced, while its overlap lasts; None after it (or when it cannot be
    opened: a key rotation re-seals only the current secret, and the overlap is a convenience)."""
    expires = webhook.previous_secret_expires_at
    if webhook.previous_secret_ciphertext is None or webhook.previous_secret_key_id is None:
        return None
    if expires is None or expires <= (now or utcnow()):
        return None
    try:
        return vault.open(
            webhook.previous_secret_ciphertext,
            webhook.previous_secret_key_id,
            binding("webhooks", "secret", webhook.id),
        )
    except VaultError as exc:
        log.warning("webhook %s: its previous secret cannot be opened (%s)", webhook.id, type(exc).__name__)
        return None


async def update_webhook(
    db: Database,
    webhook_id: str,
    *,
    name: str | _Unset | None = UNSET,
    description: str | _Unset | None = UNSET,
    paused: bool | None = None,
) -> Webhook:
    """Change a webhook's name or description (``None`` or empty clears one), or pause (True) or
    resume (False) it; what is left out stays as it is."""
    if not isinstance(name, _Unset):
        name = check_label(name, "name", WEBHOOK_NAME_MAX)
    if not isinstance(description, _Unset):
        description = check_label(description, "description", WEBHOOK_DESCRIPTION_MAX)
    async with changing(db) as s:
        webhook = await s.get(Webhook, webhook_id, with_for_update=True)
        if webhook is None:
            raise not_found(f"webhook {webhook_id!r}")
        if not isinstance(name, _Unset):
            webhook.name = name
        if not isinstance(description, _Unset):
            webhook.description = description
        if paused is True and webhook.paused_at is None:
            webhook.paused_at = utcnow()
        elif paused is False:
            webhook.paused_at = None
    return webhook


async def expire_previous_secret(db: Database, webhook_id: str) -> tuple[Webhook, bool]:
    """End the overlap now: only the current secret verifies from this commit on. Returns the
    webhook and whether an old secret was still accepted until now."""
    async with changing(db) as s:
        webhook = await s.get(Webhook, webhook_id, with_for_update=True)
        if webhook is None:
            raise not_found(f"webhook {webhook_id!r}")
        expires = webhook.previous_secret_expires_at
        was_live = webhook.previous_secret_ciphertext is not None and (expires or utcnow()) > utcnow()
        webhook.previous_secret_ciphertext = None
        webhook.previous_secret_key_id = None
        webhook.previous_secret_expires_at = None
    return webhook, was_live
