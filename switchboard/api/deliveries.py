"""``/webhooks/{id}/deliveries``: a webhook's delivery log, one delivery's detail, redeliver and
test delivery (``switchboard.deliveries``). Reading needs the webhook's scope; making a delivery
needs to manage it. Another scope's webhook or delivery is a 404."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from switchboard import deliveries
from switchboard.api.openapi import TIMESTAMP, list_of, obj, ref
from switchboard.api.routing import Operation, Request, page_query
from switchboard.errors import not_found
from switchboard.ingest import INGEST_WRITER
from switchboard.models import Endpoint, Webhook
from switchboard.paging import LIMIT_DEFAULT
from switchboard.tenancy import Owner


async def _visible(req: Request, manage: bool = False) -> Webhook:
    webhook_id = req.path["id"]
    async with req.services.db.read() as s:
        found = (
            await s.execute(
                select(Webhook, Endpoint)
                .join(Endpoint, Webhook.endpoint_id == Endpoint.id)
                .where(Webhook.id == webhook_id)
            )
        ).first()
    if found is None or not req.caller.sees(Owner.of(found[1])):
        raise not_found(f"webhook {webhook_id!r}")
    if manage:
        req.caller.require_manage(Owner.of(found[1]), f"webhook {webhook_id!r}")
    return found[0]


async def list_deliveries(req: Request) -> tuple[int, dict[str, Any]]:
    webhook = await _visible(req)
    page = await deliveries.list_deliveries(
        req.services.db,
        webhook.id,
        before=req.query.get("before"),
        after=req.query.get("after"),
        limit=req.query.get("limit", LIMIT_DEFAULT),
        scopes=req.caller.scopes,
    )
    return 200, page.answer("deliveries", page.rows)


async def get_delivery(req: Request) -> tuple[int, dict[str, Any]]:
    webhook = await _visible(req)
    return 200, {
        "delivery": await deliveries.delivery_detail(
            req.services.db, webhook.id, req.path["event_id"], scopes=req.caller.scopes
        )
    }


async def redeliver(req: Request) -> tuple[int, dict[str, Any]]:
    webhook = await _visible(req, manage=True)
    writer = req.web.app[INGEST_WRITER]
    made = await deliveries.redeliver(
        req.services, writer, webhook.id, req.path["event_id"], by=req.caller.human.handle
    )
    return 201, deliveries.made_view(made)


async def send_test(req: Request) -> tuple[int, dict[str, Any]]:
    webhook = await _visible(req, manage=True)
    writer = req.web.app[INGEST_WRITER]
    made = await deliveries.send_test(req.services, writer, webhook.id, by=req.caller.human.handle)
    return 201, deliveries.made_view(made)


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/webhooks/{id}/deliveries",
        "listWebhookDeliveries",
        "The webhook's delivery log, newest first, one cursor page: stored deliveries (routed, "
        "ignored, self_reply) with their todos, and the ones that stored nothing (refused with their "
        "reason, duplicate naming the original). Refusals past 20 a minute are counted in one row.",
        "webhooks",
        list_deliveries,
        "DeliveryList",
        query=page_query(),
    ),
    Operation(
        "GET",
        "/webhooks/{id}/deliveries/{event_id}",
        "getWebhookDelivery",
        "One delivery: its row and, when stored, its redacted headers and raw body (base64).",
        "webhooks",
        get_delivery,
        "DeliveryEnvelope",
    ),
    Operation(
        "POST",
        "/webhooks/{id}/deliveries/{event_id}/redeliver",
        "redeliverWebhookDelivery",
        "Run a stored delivery through ingest again as a new delivery (routes and echo rules as they "
        "are now). It mints new todos; its key is redelivery:<original>:<n>, never the original's.",
        "webhooks",
        redeliver,
        "MadeDelivery",
        status=201,
        errors=(400, 401, 403, 404, 409),
    ),
    Operation(
        "POST",
        "/webhooks/{id}/test",
        "sendWebhookTestDelivery",
        "Send the kind's signed hello (github, gitea, cairn: ping, stored as ignored; generic: "
        "switchboard.test, routed) through ingest; other kinds answer 409.",
        "webhooks",
        send_test,
        "MadeDelivery",
        status=201,
        errors=(400, 401, 403, 404, 409),
    ),
)

_ROW: dict[str, Any] = {
    "id": {"type": "string", "description": "ev_… (stored) or dr_… (refused or duplicate)."},
    "received_at": TIMESTAMP,
    "event": {"type": ["string", "null"], "description": "The event type; null when nothing was stored."},
    "delivery_key": {"type": ["string", "null"]},
    "verified": {"type": ["boolean", "null"]},
    "detail": {"type": "string", "description": "The verifier's word, or why it was refused."},
    "disposition": {"type": "string", "enum": list(deliveries.DISPOSITIONS)},
    "status": {"type": "integer", "description": "The HTTP status ingest answered."},
    "reason": {"type": ["string", "null"], "description": "A refusal's code (signature_invalid, …)."},
    "count": {"type": "integer", "description": "Deliveries this row stands for (>1: counted)."},
    "stored": {"type": "boolean", "description": "Headers and body kept (an event)."},
    "redelivery_of": {"type": ["string", "null"], "description": "The delivery this one redelivered."},
    "original": {"type": ["string", "null"], "description": "A duplicate's original delivery."},
    "todos": {
        "type": "array",
        "items": obj(
            {
                "id": {"type": "string"},
                "endpoint": {"type": "string"},
                "queue": {"type": "string"},
                "state": {"type": "string"},
            },
            ["id", "endpoint", "queue", "state"],
        ),
    },
}

SCHEMAS: dict[str, Any] = {
    "Delivery": obj(_ROW, list(_ROW)),
    "DeliveryList": list_of("deliveries", "Delivery"),
    "DeliveryDetail": obj(
        {
            **_ROW,
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body_base64": {"type": ["string", "null"], "description": "The raw body; null when not stored."},
            "body_bytes": {"type": "integer"},
            "body_sha256": {"type": ["string", "null"]},
            "redeliveries": {"type": "array", "items": {"type": "string"}},
        },
        [*_ROW, "headers", "body_base64", "body_bytes", "body_sha256"],
    ),
    "DeliveryEnvelope": obj({"delivery": ref("DeliveryDetail")}, ["delivery"]),
    "MadeDelivery": obj(
        {
            "delivery": {"type": "string", "description": "The new delivery's id."},
            "disposition": {
                "type": "string",
                "enum": ["routed", "ignored", "self_reply", "quarantined", "dropped", "faulted"],
            },
            "todos": {"type": "array", "items": {"type": "string"}},
            "redelivery_of": {"type": ["string", "null"]},
        },
        ["delivery", "disposition", "todos", "redelivery_of"],
    ),
}
