"""What ingest answers (docs/architecture.md, "What ingest answers"): a refusal that ends a delivery
before anything is stored, and the 202 bodies, for a delivery just stored and for a duplicate of
one stored before it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.ingest_config import WebhookConfig
from switchboard.models import Endpoint, Event, Todo
from switchboard.sanitize import json_text
from switchboard.services import Services

log = logging.getLogger("switchboard.ingest")


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
        detail: str = "",
    ) -> None:
        super().__init__(code)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}
        # For the delivery log only (never in the answer): e.g. the verifier's reason.
        self.detail = detail or message
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
class Outcome:
    response: web.Response
    # routed | self_reply | duplicate | ignored, or "handshake" for an answered url_verification.
    disposition: str
    # The event stored (or, for a duplicate, the original) and the delivery key: the delivery log's.
    event_id: str | None = None
    key: str | None = None
    # For the request's access line (``logs.ACCESS_NOTE``): what was stored.
    note: str | None = None


async def original(s: AsyncSession, webhook_id: str, key: str, secondary: str | None) -> Event | None:
    match = Event.delivery_key == key
    if secondary is not None:
        match = or_(match, Event.secondary_key == secondary)
    return await s.scalar(
        select(Event).where(Event.webhook_id == webhook_id, match).order_by(Event.received_at).limit(1)
    )


async def duplicate(
    services: Services, config: WebhookConfig, *, key: str, secondary: str | None, verified: bool
) -> Outcome:
    """202 with the original delivery's todos and ``created: 0``: the delivery hit a unique key of
    one stored before it (earlier, by another copy in the same batch, or by another process)."""
    webhook = config.webhook
    async with services.db.read() as s:
        found = await original(s, webhook.id, key, secondary)
        if found is None:
            # The original went between the conflict and this read (retention, a deleted webhook).
            log.warning("webhook %s changed while a delivery was being stored", webhook.id)
            raise Refusal(503, "unavailable", "the webhook changed while storing; retry")
        rows = (
            await s.execute(
                select(Todo.id, Todo.queue, Todo.endpoint_id, Endpoint.slug)
                .join(Endpoint, Endpoint.id == Todo.endpoint_id)
                # A held todo is the owner's business, not the sender's: a replay names only work.
                # Once decided on (discarded, expired, released) it is no longer ``held`` but keeps
                # its hold reason, and is still never named.
                .where(Todo.event_id == found.id, Todo.hold_reason.is_(None))
            )
        ).all()
    # Ordered as the first answer was: the owner's todo first, then the routed endpoints' in order.
    rank = {config.owner.slug: -1, **{e.slug: i for i, e in enumerate(config.routed)}}
    named = [(r.id, r.slug, r.queue) for r in rows] + _folded_into(found)
    named.sort(key=lambda t: (rank.get(t[1], len(rank)), t[0]))
    response = accepted(
        [{"id": i, "endpoint": slug, "queue": queue, "created": False} for i, slug, queue in named],
        created=0,
        verified=verified,
        trust_mode=found.trust_mode,
        disposition="duplicate",
    )
    return Outcome(response, "duplicate", found.id, key)


def _folded_into(event: Event) -> list[tuple[str, str, str]]:
    """(open todo id, endpoint slug, queue) of each ``once`` todo of ``event`` that was folded into an
    open one instead of stored: the first answer named that open todo (``intake.answered``), so its
    repeat does too. Its event's routing trace is the only record of it
    (``ingest_statements._folded_trace``)."""
    trace = event.routing if isinstance(event.routing, dict) else {}
    return [
        (str(t["open"]), str(t.get("endpoint")), str(t.get("queue")))
        for t in trace.get("targets") or []
        if isinstance(t, dict) and t.get("outcome") == "once" and t.get("open")
    ]


def accepted(
    todos: list[dict[str, Any]], *, created: int, verified: bool, trust_mode: str, disposition: str
) -> web.Response:
    answer = {
        "todos": todos,
        "created": created,
        "verified": verified,
        "trust_mode": trust_mode,
        "disposition": disposition,
    }
    return web.json_response(answer, status=202, dumps=json_text)
