"""A webhook's delivery log (issue 10 item 1): what arrived, what ingest decided, what it answered,
and the todos it minted; and the operator's two ways to make a delivery, redeliver and test.

The log merges two tables, newest first, one cursor page at a time (``paging``: ``before`` pages
older, ``after`` newer; ids are time-ordered in both, so one cursor means the same in each):

* ``events``: every stored delivery (routed, ignored, self_reply) with its redacted headers and
  raw body, answered 202;
* ``delivery_records``: the deliveries that stored no event, as small rows (``delivery_records``):
  refusals with their status and reason, and duplicates naming the original they repeated.

A **redelivery** (``redeliver``) runs a stored delivery through ingest again as a new delivery: the
kind's verifier (re-signed with the current secret, ``delivery_signing``), the webhook's routes and
echo rules as they are now, and the group-commit writer. It never bypasses deduplication silently:
its delivery key is ``redelivery:<original id>:<n>`` (the n-th redelivery), so it cannot take the
original's key, a second click makes a second redelivery (the operator is told it mints new todos),
and the new event names the original in ``redelivery_of``. A **test delivery** (``send_test``) is the
kind's signed hello through the same path.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy
from sqlalchemy import select

from switchboard import ingest_steps as steps
from switchboard.db import Database, utcnow
from switchboard.delivery_signing import REDELIVERABLE, TESTABLE, hello_delivery, signed
from switchboard.errors import SwitchboardError, conflict, not_found
from switchboard.ingest_answers import Refusal
from switchboard.ingest_config import WebhookConfig, config_by_token_hash
from switchboard.ingest_statements import Rows
from switchboard.ingest_writer import IngestWriter
from switchboard.models import DeliveryRecord, Endpoint, Event, Todo, Webhook
from switchboard.paging import Page, check_page, stamp
from switchboard.provider import Delivery
from switchboard.sanitize import clean_line
from switchboard.services import Services
from switchboard.tenancy import Owner
from switchboard.todos import rfc3339
from switchboard.todos.queries import visible

DISPOSITIONS = (
    "routed",
    "duplicate",
    "ignored",
    "self_reply",
    "quarantined",
    "dropped",
    "faulted",
    "refused",
)
# The answer to the operator's redelivery or test delivery is the same the sender would have had.
ATTEMPTS = 3


# ---------------------------------------------------------------------------------------------
# The log


def _event_row(event: Event, todos: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": event.id,
        "received_at": rfc3339(event.received_at),
        "event": event.event_type,
        "delivery_key": event.delivery_key,
        "verified": event.verified,
        "detail": event.verify_detail,
        "disposition": event.disposition,
        "status": 202,
        "reason": None,
        "count": 1,
        "stored": True,
        "redelivery_of": event.redelivery_of,
        "original": None,
        "todos": todos,
    }


def _record_row(record: DeliveryRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "received_at": rfc3339(record.received_at),
        "event": None,
        "delivery_key": record.delivery_key,
        "verified": None,
        "detail": record.detail,
        "disposition": record.disposition,
        "status": record.status,
        "reason": record.reason or None,
        "count": record.count,
        "stored": False,
        "redelivery_of": None,
        "original": record.original_event_id,
        "todos": [],
    }


async def _todos_of(
    s: Any, event_ids: list[str], scopes: list[Owner] | None
) -> dict[str, list[dict[str, Any]]]:
    """The todos each event minted, those of endpoints in ``scopes`` only (None: all, for the
    instance operator): a todo a route minted in another scope's endpoint is that scope's, and its
    state is its agents' work, not the webhook side's to watch."""
    out: dict[str, list[dict[str, Any]]] = {e: [] for e in event_ids}
    if not event_ids:
        return out
    rows = await s.execute(
        select(Todo.id, Todo.event_id, Todo.queue, Todo.state, Endpoint.slug)
        .join(Endpoint, Endpoint.id == Todo.endpoint_id)
        .where(Todo.event_id.in_(event_ids), visible(scopes))
        .order_by(Todo.id)
    )
    for r in rows:
        out[str(r.event_id)].append({"id": r.id, "endpoint": r.slug, "queue": r.queue, "state": r.state})
    return out


async def list_deliveries(
    db: Database,
    webhook_id: str,
    *,
    before: Any = None,
    after: Any = None,
    limit: Any = 50,
    scopes: list[Owner] | None = None,
) -> Page[dict[str, Any]]:
    """One page of the webhook's delivery log, newest first (both tables merged by id); each
    delivery's todos in the reader's ``scopes`` (None: every scope)."""
    before, after, limit = check_page(before, after, limit)
    tables: tuple[tuple[Any, str], ...] = ((Event, "ev_"), (DeliveryRecord, "dr_"))
    found: list[Any] = []
    async with db.read() as s:
        for model, prefix in tables:
            query = select(model).where(model.webhook_id == webhook_id)
            if after is not None:
                query = query.where(model.id > prefix + stamp(after)).order_by(model.id.asc())
            else:
                if before is not None:
                    query = query.where(model.id < prefix + stamp(before))
                query = query.order_by(model.id.desc())
            found += list((await s.scalars(query.limit(limit + 1))).all())
        found.sort(key=lambda r: stamp(r.id), reverse=after is None)
        more = len(found) > limit
        shown = found[:limit]
        if after is not None:
            shown.reverse()  # newest first, as every page of this list
        # Rows on the other side of the cursor exist when a cursor was given (it came from one).
        newer = more if after is not None else (before is not None and await _any(s, webhook_id, ">", before))
        older = more if after is None else await _any(s, webhook_id, "<", after)
        todos = await _todos_of(s, [r.id for r in shown if isinstance(r, Event)], scopes)
    rows = [_event_row(r, todos[r.id]) if isinstance(r, Event) else _record_row(r) for r in shown]
    return Page(
        rows,
        next_before=rows[-1]["id"] if rows and older else None,
        next_after=rows[0]["id"] if rows and newer else None,
    )


async def _any(s: Any, webhook_id: str, op: str, cursor: str) -> bool:
    for model, prefix in ((Event, "ev_"), (DeliveryRecord, "dr_")):
        column = model.id
        # The cursor's own row counts: it is on the other side of the page it led to.
        where = column >= prefix + stamp(cursor) if op == ">" else column <= prefix + stamp(cursor)
        if await s.scalar(select(model.id).where(model.webhook_id == webhook_id, where).limit(1)):
            return True
    return False


async def delivery_detail(
    db: Database, webhook_id: str, delivery_id: str, *, scopes: list[Owner] | None = None
) -> dict[str, Any]:
    """One delivery of the webhook: its row, and for a stored one its redacted headers and body
    (base64; the UI serves it as a download, never as a page); its todos in the reader's
    ``scopes`` (None: every scope)."""
    async with db.read() as s:
        if delivery_id.startswith("dr_"):
            record = await s.get(DeliveryRecord, delivery_id)
            if record is None or record.webhook_id != webhook_id:
                raise not_found(f"delivery {delivery_id!r}")
            return {
                **_record_row(record),
                "headers": {},
                "body_base64": None,
                "body_bytes": 0,
                "body_sha256": None,
            }
        event = await s.get(Event, delivery_id)
        if event is None or event.webhook_id != webhook_id:
            raise not_found(f"delivery {delivery_id!r}")
        todos = await _todos_of(s, [event.id], scopes)
        redeliveries = list(
            (
                await s.scalars(select(Event.id).where(Event.redelivery_of == event.id).order_by(Event.id))
            ).all()
        )
    return {
        **_event_row(event, todos[event.id]),
        "headers": dict(event.headers),
        "body_base64": base64.b64encode(event.body).decode(),
        "body_bytes": len(event.body),
        "body_sha256": hashlib.sha256(event.body).hexdigest(),
        "redeliveries": redeliveries,
    }


async def stored_body(db: Database, webhook_id: str, event_id: str) -> bytes:
    async with db.read() as s:
        event = await s.get(Event, event_id)
    if event is None or event.webhook_id != webhook_id:
        raise not_found(f"delivery {event_id!r}")
    return event.body


# ---------------------------------------------------------------------------------------------
# Making a delivery: redeliver and test


@dataclass(frozen=True)
class Made:
    """A delivery the operator made, as ingest decided it."""

    event_id: str
    disposition: str
    todos: list[str]
    redelivery_of: str | None = None


async def _config(db: Database, webhook_id: str) -> WebhookConfig:
    async with db.read() as s:
        webhook = await s.get(Webhook, webhook_id)
        config = await config_by_token_hash(s, webhook.ingest_token_hash) if webhook is not None else None
    if config is None:
        raise not_found(f"webhook {webhook_id!r}")
    return config


async def _make(
    services: Services,
    writer: IngestWriter,
    webhook_id: str,
    headers: dict[str, str],
    body: bytes,
    *,
    note: str,
    original: str | None = None,
) -> Made:
    """Ingest's steps 2-8 for a delivery made here: the same checks, verifier and writer."""
    for _ in range(ATTEMPTS):
        config = await _config(services.db, webhook_id)
        source = config.webhook.source
        try:
            kind = steps.source_kind(services, config)
            targets = steps.live_targets(config)
            verified, secret = steps.signing_secret(services, config, kind)
            wire = signed(source, secret, headers, body)
            received_at = utcnow()
            delivery = Delivery(
                source=source,
                headers=CIMultiDictProxy(CIMultiDict(wire)),
                body=body,
                received_at=received_at,
                secret=secret,
            )
            verdict = steps.verify(services, config, delivery, lambda: "operator")
        except Refusal as refusal:
            raise conflict(f"ingest would refuse it ({refusal.code}): {refusal.message}") from None
        if verdict.respond is not None:
            raise conflict("the kind answers this delivery as a handshake: nothing would be stored")
        key, secondary = steps.delivery_keys(verdict, delivery, verified)
        if original is not None:
            key, secondary = await _redelivery_key(services.db, webhook_id, original), None
        disposition, address, minting, withheld = await steps.disposition(
            services, config, delivery, verdict, verified, targets
        )
        event = steps.event_row(config, delivery, verdict, key, secondary, verified, disposition, withheld)
        event["verify_detail"] = clean_line(f"{note}; {event['verify_detail']}", 200)
        event["redelivery_of"] = original
        # Intake as for any delivery: trust and the webhook's rules as they are now.
        _, todos = await steps.intake(
            services, config, kind, delivery, verdict, verified, address, minting, targets, event
        )
        disposition = event["disposition"]
        rows = Rows(
            config=config,
            target_ids=tuple(t.endpoint_id for t in targets),
            event=event,
            todos=todos,
            source=source,
        )
        result = await writer.submit(rows)
        if result.status == "stored":
            made = [str(t["id"]) for t in todos if str(t["id"]) not in result.folded]
            return Made(event["id"], disposition, made, original)
        if result.status == "duplicate" and original is None:
            raise conflict("this delivery's key is already stored: nothing new was made")
        if result.status in ("failed", "unavailable"):
            raise SwitchboardError("unavailable", "the delivery could not be stored; retry later")
        # stale (the webhook changed) or two redeliveries raced for one counter: decide again.
    raise SwitchboardError("unavailable", "the webhook kept changing; retry")


async def _redelivery_key(db: Database, webhook_id: str, original: str) -> str:
    """``redelivery:<original>:<n>``, ``n`` one past the highest still stored. Not the count of those
    stored: event retention deletes old redeliveries that made no todo, and the count would then
    name a key a later redelivery still holds (every redelivery of that original a duplicate)."""
    prefix = f"redelivery:{original}:"
    async with db.read() as s:
        keys = (
            await s.scalars(
                select(Event.delivery_key).where(
                    Event.webhook_id == webhook_id, Event.redelivery_of == original
                )
            )
        ).all()
    numbers = [int(k[len(prefix) :]) for k in keys if k.startswith(prefix) and k[len(prefix) :].isdigit()]
    return f"{prefix}{max(numbers, default=0) + 1}"


async def redeliver(
    services: Services, writer: IngestWriter, webhook_id: str, event_id: str, *, by: str
) -> Made:
    """Run a stored delivery through ingest again as a new, marked delivery (see the module)."""
    async with services.db.read() as s:
        event = await s.get(Event, event_id)
        webhook = await s.get(Webhook, webhook_id)
    if event is None or webhook is None or event.webhook_id != webhook_id:
        raise not_found(f"delivery {event_id!r}")
    if webhook.source not in REDELIVERABLE:
        raise conflict(
            f"{webhook.source} deliveries cannot be redelivered from here: "
            + (
                "the signed body carries the time it was sent, so its verifier refuses a copy as a replay"
                if webhook.source in ("cairn", "linear", "plain")
                else "Switchboard cannot sign for this kind"
            )
            + "; ask the sender to redeliver"
        )
    original = event.redelivery_of or event.id
    note = f"redelivery of {original} by {by}"
    return await _make(
        services, writer, webhook_id, dict(event.headers), event.body, note=note, original=original
    )


async def send_test(services: Services, writer: IngestWriter, webhook_id: str, *, by: str) -> Made:
    """The kind's signed hello through ingest (see ``delivery_signing``)."""
    config = await _config(services.db, webhook_id)
    source = config.webhook.source
    if source not in TESTABLE:
        raise conflict(
            f"{source} webhooks cannot make a test delivery: Switchboard has no hello of that kind "
            "its verifier would store without minting a todo; send one from the provider instead"
        )
    headers, body = hello_delivery(source)
    return await _make(services, writer, webhook_id, headers, body, note=f"test delivery sent by {by}")


def made_view(made: Made) -> dict[str, Any]:
    return {
        "delivery": made.event_id,
        "disposition": made.disposition,
        "todos": made.todos,
        "redelivery_of": made.redelivery_of,
    }
