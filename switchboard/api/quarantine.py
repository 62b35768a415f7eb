"""``/quarantine``: the held todos in the caller's scopes, and what a human decides for each
(docs/routing.md, "Quarantine").

A held todo is a delivery that trust refused, that a rule sent to quarantine or that a rule faulted
on: one todo on its webhook's own endpoint that no agent lists, claims or hears of. Members of a
scope see its quarantine; its owners and admins release (routing run again with trust satisfied,
or straight to one of the endpoint's granted queues; with ``trust``, the delivery's actor is first
added to the webhook's trusted actors) or discard it with a reason. A todo decided already is a
409 ``conflict``; one outside the caller's scopes is 404, exactly like one that does not exist.
"""

from __future__ import annotations

from typing import Any

from switchboard import quarantine
from switchboard.api.intake import acting
from switchboard.api.openapi import TIMESTAMP, list_of, nullable, obj, ref
from switchboard.api.routing import TEAM_QUERY, Operation, Param, Request, page_query
from switchboard.intake import DISPOSITIONS, HOLD_REASONS
from switchboard.paging import LIMIT_MAX


async def list_held(req: Request) -> tuple[int, dict[str, Any]]:
    caller = acting(req, "the quarantine", req.caller.read_scopes(req.query.get("team")))
    page = await quarantine.list_held(
        req.services.db,
        caller,
        webhook_id=req.query.get("webhook"),
        before=req.query.get("before"),
        after=req.query.get("after"),
        limit=req.query.get("limit", quarantine.LIST_LIMIT_DEFAULT),
    )
    return 200, page.answer("todos", page.rows)


async def release(req: Request) -> tuple[int, dict[str, Any]]:
    todo_id = req.path["id"]
    return 200, await quarantine.release(
        req.services,
        acting(req, f"todo {todo_id!r}"),
        todo_id,
        queue=req.body.get("queue"),
        trust=req.body.get("trust", False),
    )


async def discard(req: Request) -> tuple[int, dict[str, Any]]:
    todo_id = req.path["id"]
    return 200, await quarantine.discard(
        req.services, acting(req, f"todo {todo_id!r}"), todo_id, req.body["reason"]
    )


_DECIDE_ERRORS = (400, 401, 403, 404, 409)

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/quarantine",
        "listQuarantine",
        "Held todos in the caller's scopes (or one webhook's), newest first, one cursor page.",
        "quarantine",
        list_held,
        "HeldTodoList",
        query=(
            TEAM_QUERY,
            Param("webhook", "string", "Only this webhook's held todos (404 outside your scopes)."),
            *page_query(quarantine.LIST_LIMIT_DEFAULT, LIMIT_MAX),
        ),
    ),
    Operation(
        "POST",
        "/quarantine/{id}/release",
        "releaseHeldTodo",
        "Release a held todo (owners/admins): routing runs again on its delivery with trust satisfied "
        "(its rules may still drop or hold it), or with `queue` one todo goes straight to that queue of "
        "its endpoint. `trust` first adds the delivery's actor to the webhook's trusted actors.",
        "quarantine",
        release,
        "HeldTodoReleased",
        errors=_DECIDE_ERRORS,
        body=(
            Param("queue", "string", "Release to this queue of the todo's endpoint (it must be granted it)."),
            Param("trust", "boolean", "Trust the delivery's actor from now on, then release."),
        ),
        description="Refusals: 400 `not_granted` (`queue` is not granted to the endpoint; `queue` names "
        "it), `invalid_argument` (not a queue name, or the reserved `quarantine`), `trust_not_supported` "
        "(with `trust`: the webhook's deliveries name no actor); 409 `conflict` (no longer held: decided "
        "already; the endpoint is not active; routing cannot run again on the delivery: release it to a "
        "named queue instead).",
    ),
    Operation(
        "POST",
        "/quarantine/{id}/discard",
        "discardHeldTodo",
        "Discard a held todo for good with a reason (owners/admins); its history keeps who, when and why.",
        "quarantine",
        discard,
        "HeldTodoDiscarded",
        errors=_DECIDE_ERRORS,
        body=(
            Param(
                "reason",
                "string",
                "Why (printable text; whitespace is collapsed).",
                required=True,
                max_length=quarantine.DISCARD_REASON_MAX,
            ),
        ),
        description="Refusals: 400 `invalid_argument` (no reason); 409 `conflict` (no longer held).",
    ),
)

SCHEMAS: dict[str, Any] = {
    "HeldTodo": obj(
        {
            "id": {"type": "string"},
            "webhook": {"type": ["string", "null"], "description": "null once the webhook is deleted."},
            "endpoint": {"type": "string", "description": "The webhook's own endpoint, which holds it."},
            "source": {"type": "string"},
            "event": {"type": "string", "description": "The delivery's event (issue_comment.created, …)."},
            "delivery": {
                "type": ["string", "null"],
                "description": "The stored delivery (GET /webhooks/{webhook}/deliveries/{delivery}).",
            },
            "title": {"type": "string"},
            "state": {
                "type": "string",
                "enum": ["held", "cancelled"],
                "description": "held until decided; cancelled once released, discarded or expired.",
            },
            "reason": {
                "type": ["string", "null"],
                "enum": [*HOLD_REASONS, None],
                "description": "untrusted_actor, rule (a rule chose quarantine) or rule_fault.",
            },
            "actor": {**nullable(ref("ActorVerdict")), "description": "The trust step's verdict."},
            "rule": {"type": ["string", "null"], "description": "The rule that held it or faulted."},
            "fault": {"type": ["string", "null"], "description": "The fault, for rule_fault."},
            "reply_to": {"type": ["object", "null"]},
            "created_at": TIMESTAMP,
            "expires_at": {**TIMESTAMP, "description": "Cancelled then if nobody decides (30 days)."},
        },
        [
            "id",
            "webhook",
            "endpoint",
            "source",
            "event",
            "delivery",
            "title",
            "state",
            "reason",
            "actor",
            "rule",
            "fault",
            "reply_to",
            "created_at",
            "expires_at",
        ],
    ),
    "HeldTodoList": list_of("todos", "HeldTodo"),
    "HeldTodoReleased": obj(
        {
            "todo": {
                **ref("HeldTodo"),
                "description": "As it is now: cancelled, or held when routing held it again.",
            },
            "event": ref("TodoEvent"),
            "outcome": {
                "type": "string",
                "enum": list(DISPOSITIONS),
                "description": "What routing made of it (routed: `todos` were made, unless `once` "
                "folded them).",
            },
            "todos": {
                "type": "array",
                "items": obj(
                    {"id": {"type": "string"}, "endpoint": {"type": "string"}, "queue": {"type": "string"}},
                    ["id", "endpoint", "queue"],
                ),
            },
            "routing": ref("RoutingTrace"),
            "trusted": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The actors `trust` added (none when already trusted).",
            },
        },
        ["todo", "event", "outcome", "todos", "routing", "trusted"],
    ),
    "HeldTodoDiscarded": obj({"todo": ref("HeldTodo"), "event": ref("TodoEvent")}, ["todo", "event"]),
}
