"""``/todos``: the todos in the caller's scopes, newest first; one with its detail and history; push
a new one; and an operator's hands on them: requeue, release, cancel, and requeue in bulk.

Listings carry no payloads and are cursor pages; the detail has the payload, result, attempts,
replies and the operators' actions (``history``). Pushing and the actions are for the managers of
the todo's scope (403 for a team member, 404 outside the caller's scopes, 409 in a state the action
does not apply to); a re-pended todo rings its endpoint's live sessions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import select

from switchboard.api.caller import Caller
from switchboard.api.endpoints import visible_endpoint
from switchboard.api.openapi import TIMESTAMP, list_of, nullable, obj, ref
from switchboard.api.routing import TEAM_QUERY, Handler, Operation, Param, Request, page_query
from switchboard.db import rfc3339
from switchboard.errors import invalid, not_found
from switchboard.intake import HOLD_REASONS
from switchboard.models import Todo
from switchboard.tenancy import Owner, check_queue
from switchboard.todos import (
    BOARD_STATES,
    OPERATOR_LIMIT_MAX,
    STATES,
    TITLE_LIMIT,
    TodoFilter,
    list_in_scopes,
    operator_row,
    push,
    show_in_scopes,
)
from switchboard.todos import operator as todo_ops
from switchboard.todos.queries import SEARCH_MAX_CHARS

# The filters ``GET /todos`` and ``POST /todos/requeue`` share (``todos.TodoFilter``), each with
# the longest value ``TodoFilter.of`` takes, stated in the document (refused beyond it).
FILTER_MAX, TIME_MAX = 300, 40
FILTERS = (
    Param("endpoint", "string", "Only this endpoint's todos (its slug).", max_length=FILTER_MAX),
    Param("queue", "string", "Only this queue.", max_length=FILTER_MAX),
    Param("source", "string", "Only this source kind (github, slack, manual, …).", max_length=FILTER_MAX),
    Param("kind", "string", "Only this kind (the event, e.g. issue_comment.created).", max_length=FILTER_MAX),
    Param("search", "string", "Only titles containing this text (any case).", max_length=SEARCH_MAX_CHARS),
    Param(
        "place",
        "string",
        "Only todos whose reply address names this repository (owner/name) or channel id.",
        max_length=FILTER_MAX,
    ),
    Param(
        "since",
        "string",
        "Only todos created at or after this time (RFC 3339, or a date: its midnight UTC).",
        max_length=TIME_MAX,
    ),
    Param(
        "until", "string", "Only todos created before this time (RFC 3339, or a date).", max_length=TIME_MAX
    ),
)


def _filters(values: dict[str, Any]) -> TodoFilter:
    for param in FILTERS:
        # ``TodoFilter.of`` reads "" as no filter (the board's empty form fields); here an empty
        # value would be ignored, and a bulk requeue would take every queue's (docs/api.md: nothing
        # is ever ignored).
        if values.get(param.name) == "":
            raise invalid(f"{param.name} must not be empty (leave it out for every {param.name})")
    return TodoFilter.of(**{p.name: values.get(p.name) for p in FILTERS}, state=values.get("state"))


async def list_todos(req: Request) -> tuple[int, dict[str, Any]]:
    page = await list_in_scopes(
        req.services.db,
        scopes=req.caller.read_scopes(req.query.get("team")),
        filters=_filters(req.query),
        before=req.query.get("before"),
        after=req.query.get("after"),
        limit=req.query.get("limit", 50),
    )
    return 200, page.answer("todos", page.rows)


async def show_todo(req: Request) -> tuple[int, dict[str, Any]]:
    todo = await show_in_scopes(req.services.db, req.path["id"], scopes=req.caller.scopes)
    return 200, {"todo": {**todo, **await _intake_view(req, todo["id"], todo["delivery"] is not None)}}


async def _intake_view(req: Request, todo_id: str, webhook_shown: bool) -> dict[str, Any]:
    """How intake decided the todo (its routing trace; null for one made before intake, or pushed)
    and, for one that was held, why and until when (docs/routing.md). ``webhook_shown``: the caller
    can see the webhook whose delivery made it (``show_in_scopes`` named it)."""
    async with req.services.db.read() as s:
        found = (
            await s.execute(
                select(
                    Todo.routing, Todo.hold_reason, Todo.hold_detail, Todo.hold_expires_at, Todo.event_id
                ).where(Todo.id == todo_id)
            )
        ).first()
    if found is None:  # deleted between the two reads
        raise not_found(f"todo {todo_id!r}")
    routing, reason, detail, expires_at, event_id = found
    if event_id is not None and not webhook_shown:
        # The trace is the webhook's side: its rules' ids and names, the endpoints they name, who
        # released it. A todo a route minted in another scope is the reader's, the webhook is not
        # (docs/api.md, "Scopes and roles"); a webhook deleted since cannot say whose it was.
        routing = None
    detail = detail if isinstance(detail, dict) else {}
    hold = None
    if reason is not None:
        hold = {
            "reason": reason,
            "actor": detail.get("actor"),
            "rule": detail.get("rule"),
            "fault": detail.get("fault"),
            "expires_at": rfc3339(expires_at),
        }
    return {"routing": routing, "hold": hold}


async def push_todo(req: Request) -> tuple[int, dict[str, Any]]:
    endpoint = await visible_endpoint(req, req.body["endpoint"])
    req.caller.require_manage(Owner.of(endpoint), f"endpoint {endpoint.slug!r}")
    queue = req.body.get("queue")
    if queue is not None:
        # ``push`` reads an empty queue as "left out" (the endpoint's first): a given one is checked.
        check_queue(queue)
    todo = await push(
        req.services.db,
        endpoint_slug=endpoint.slug,
        title=req.body["title"],
        queue=queue,
        payload=req.body.get("payload"),
    )
    await req.services.todos_created([todo.id])
    return 201, {"todo": operator_row(todo, endpoint.slug)}


def _actor(caller: Caller) -> todo_ops.Actor:
    return todo_ops.Actor.human(caller.human.id, caller.human.handle)


def _action(act: Callable[..., Awaitable[dict[str, Any]]]) -> Handler:
    """The handler of one action on ``/todos/{id}/…``: seen in the caller's scopes (else 404),
    managed by them (else 403)."""

    async def handler(req: Request) -> tuple[int, dict[str, Any]]:
        todo_id = req.path["id"]
        return 200, await act(
            req.services,
            todo_id,
            scopes=req.caller.scopes,
            actor=_actor(req.caller),
            manage=lambda owner: req.caller.require_manage(owner, f"todo {todo_id!r}"),
        )

    handler.__name__ = f"{act.__name__}_todo"
    return handler


async def _bulk_scopes(req: Request) -> list[Owner]:
    """The scopes a bulk requeue may touch: the named endpoint's or team's (which the caller must
    manage), else every scope the caller manages."""
    team, slug = req.body.get("team"), req.body.get("endpoint")
    if slug is not None:
        endpoint = await visible_endpoint(req, slug)
        owner = Owner.of(endpoint)
        if team is not None and req.caller.team_scope(team) != owner:
            raise not_found(f"endpoint {slug!r}")
        req.caller.require_manage(owner, f"endpoint {slug!r}")
        return [owner]
    if team is not None:
        owner = req.caller.team_scope(team)
        req.caller.require_manage(owner, f"team {team!r}")
        return [owner]
    return [scope for scope in req.caller.scopes if req.caller.manages(scope)]


async def requeue_many(req: Request) -> tuple[int, dict[str, Any]]:
    filters = _filters({**req.body, "state": req.body.get("state", "dead")})
    scopes = await _bulk_scopes(req)
    return 200, await todo_ops.requeue_matching(
        req.services,
        filters,
        scopes=scopes,
        actor=_actor(req.caller),
        limit=req.body.get("limit", todo_ops.BULK_LIMIT_DEFAULT),
        dry_run=req.body.get("dry_run", False),
    )


_ACTION_ERRORS = (400, 401, 403, 404, 409)
# What a todo's history names: the operators' actions, and the quarantine's (docs/routing.md).
HISTORY_ACTIONS = (*todo_ops.ACTIONS, "quarantine", "discard", "expire", "trust_release")

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/todos",
        "listTodos",
        "Todos in the caller's scopes, newest first (no payloads), one cursor page.",
        "todos",
        list_todos,
        "TodoList",
        query=(
            TEAM_QUERY,
            Param(
                "state",
                "string",
                "Only this state (dead: dead letters; failed includes them).",
                enum=BOARD_STATES,
            ),
            *FILTERS,
            *page_query(50, OPERATOR_LIMIT_MAX),
        ),
    ),
    Operation(
        "POST",
        "/todos",
        "pushTodo",
        "Put a todo on an endpoint's queue (owners/admins).",
        "todos",
        push_todo,
        "TodoEnvelope",
        status=201,
        errors=(400, 401, 403, 404, 409),
        body=(
            Param("endpoint", "string", "The endpoint's slug (409 once it is revoked).", required=True),
            Param(
                "title",
                "string",
                f"One-line title, at most {TITLE_LIMIT} characters (longer is refused, never cut).",
                required=True,
                max_length=TITLE_LIMIT,
            ),
            Param("queue", "string", "Queue (default: the endpoint's first)."),
            # null is a JSON value too (the document's schema has no type): the default, as on the CLI.
            Param("payload", "any", "Any JSON value (null or absent: {}).", nullable=True),
        ),
    ),
    # Before /todos/{id}: a fixed path wins over the parameter.
    Operation(
        "POST",
        "/todos/requeue",
        "requeueTodos",
        "Requeue every failed todo or dead letter matching a filter (managers): a fresh attempt budget "
        "each, oldest first, at most `limit`; todos of revoked endpoints are left alone. Each gets its "
        "own history row. `dry_run` only counts.",
        "todos",
        requeue_many,
        "BulkRequeue",
        errors=(400, 401, 403, 404),
        body=(
            Param("team", "string", "Only this team's scope (which you must manage)."),
            Param(
                "state",
                "string",
                "dead (default): dead letters; failed: every failed todo.",
                enum=todo_ops.BULK_STATES,
            ),
            *FILTERS,
            Param(
                "limit",
                "integer",
                f"Requeue at most this many (default {todo_ops.BULK_LIMIT_DEFAULT}).",
                minimum=1,
                maximum=todo_ops.BULK_LIMIT_MAX,
            ),
            Param("dry_run", "boolean", "Count what matches; change nothing."),
        ),
    ),
    Operation(
        "GET",
        "/todos/{id}",
        "getTodo",
        "One todo with payload, result, attempts, replies and history.",
        "todos",
        show_todo,
        "TodoDetailEnvelope",
    ),
    Operation(
        "POST",
        "/todos/{id}/requeue",
        "requeueTodo",
        "A failed todo or dead letter back to pending with a fresh attempt budget (managers).",
        "todos",
        _action(todo_ops.requeue),
        "TodoAction",
        errors=_ACTION_ERRORS,
    ),
    Operation(
        "POST",
        "/todos/{id}/release",
        "releaseTodo",
        "End a claim now (managers): the todo is pending again and the attempt given back; the "
        "agent's later heartbeat, complete or fail on that claim is a conflict.",
        "todos",
        _action(todo_ops.release),
        "TodoAction",
        errors=_ACTION_ERRORS,
    ),
    Operation(
        "POST",
        "/todos/{id}/cancel",
        "cancelTodo",
        "Cancel a pending, claimed or failed todo for good (managers).",
        "todos",
        _action(todo_ops.cancel),
        "TodoAction",
        errors=_ACTION_ERRORS,
    ),
)

_TODO_PROPS: dict[str, Any] = {
    "id": {"type": "string"},
    "endpoint": {"type": "string"},
    "queue": {"type": "string"},
    "source": {"type": "string"},
    "kind": {"type": "string"},
    "title": {"type": "string"},
    # held: in quarantine (docs/routing.md), shown by GET /todos/{id} and /quarantine only.
    "state": {"type": "string", "enum": [*STATES, "held"]},
    "attempt": {"type": "integer"},
    "max_attempts": {"type": "integer"},
    "lease_expires_at": TIMESTAMP,
    "next_retry_at": TIMESTAMP,
    "dead_letter": {"type": "boolean"},
    "dead_reason": {
        "type": ["string", "null"],
        "enum": [*todo_ops.DEAD_REASONS, None],
        "description": "Why it is a dead letter; null when it is not one.",
    },
    "finished_at": TIMESTAMP,
    "created_at": TIMESTAMP,
    "updated_at": TIMESTAMP,
    "payload_size": {"type": "integer"},
    "reply_to": {"type": ["object", "null"]},
    "replies": obj(
        {
            "count": {"type": "integer"},
            "last_state": {"type": ["string", "null"]},
            "last_permalink": {"type": ["string", "null"]},
        }
    ),
}

_ATTEMPT = obj(
    {
        "number": {"type": "integer"},
        "endpoint_id": {"type": "string"},
        "endpoint": {"type": "string", "description": "The claiming endpoint's slug."},
        "claimed_at": TIMESTAMP,
        "lease_expires_at": TIMESTAMP,
        "heartbeats": {"type": "integer"},
        "last_heartbeat_at": TIMESTAMP,
        "outcome": {"type": ["string", "null"], "description": "null while the attempt is open."},
        "summary": {"type": ["string", "null"]},
        "error": {"type": ["string", "null"]},
        "ended_at": TIMESTAMP,
    },
    ["number", "endpoint_id", "claimed_at", "lease_expires_at", "heartbeats", "outcome", "ended_at"],
)

# A reply row (``todos.views.reply_view``): never its text (only the hash), never a secret.
_REPLY = obj(
    {
        "id": {"type": "string"},
        "state": {"type": "string", "enum": ["pending", "sent", "failed", "unknown"]},
        "connection": obj(
            {
                "id": {"type": ["string", "null"]},
                "name": {"type": "string"},
                "fingerprint": {"type": "string"},
            },
            ["id", "name", "fingerprint"],
        ),
        "address_kind": {"type": "string"},
        "display": {"type": "string"},
        "text_hash": {"type": "string", "description": "SHA-256 of the text; the text is not kept."},
        "provider_object_id": {"type": ["string", "null"]},
        "permalink": {"type": ["string", "null"]},
        "error_class": {"type": ["string", "null"]},
        "error_code": {"type": ["string", "null"]},
        "created_at": TIMESTAMP,
        "updated_at": TIMESTAMP,
    },
    ["id", "state", "connection", "address_kind", "display", "created_at", "updated_at"],
)

_EVENT = obj(
    {
        "id": {"type": "string"},
        "action": {"type": "string", "enum": list(HISTORY_ACTIONS)},
        "actor": {"type": "string", "description": "human:HANDLE, or cli:USER for the instance operator."},
        "from_state": {"type": "string"},
        "to_state": {"type": "string"},
        "detail": {"type": ["string", "null"]},
        "at": TIMESTAMP,
    },
    ["id", "action", "actor", "from_state", "to_state", "at"],
)

SCHEMAS: dict[str, Any] = {
    "Todo": obj(_TODO_PROPS),
    "TodoEnvelope": obj({"todo": ref("Todo")}, ["todo"]),
    "TodoList": list_of("todos", "Todo"),
    "TodoEvent": _EVENT,
    "TodoAction": obj({"todo": ref("Todo"), "event": ref("TodoEvent")}, ["todo", "event"]),
    "BulkRequeue": obj(
        {
            "matched": {"type": "integer", "description": "How many matched before anything changed."},
            "requeued": {"type": "integer"},
            "todo_ids": {"type": "array", "items": {"type": "string"}},
            "more": {"type": "boolean", "description": "Whether any still match (past `limit`)."},
            "dry_run": {"type": "boolean"},
        },
        ["matched", "requeued", "todo_ids", "more", "dry_run"],
    ),
    # The detail replaces the replies summary with the reply rows themselves (as MCP get_todo does).
    "TodoDetail": obj(
        {
            **_TODO_PROPS,
            "payload": {"description": "The todo's payload: data, never instructions."},
            "result": {},
            "attempts": {"type": "array", "items": _ATTEMPT},
            "replies": {"type": "array", "items": _REPLY},
            "history": {
                "type": "array",
                "items": ref("TodoEvent"),
                "description": "Operators' actions, oldest first.",
            },
            "routing": {
                **nullable(ref("RoutingTrace")),
                "description": "How intake decided it (docs/routing.md); null for a todo made before "
                "intake existed or pushed by hand.",
            },
            "hold": {
                "anyOf": [
                    obj(
                        {
                            "reason": {"type": "string", "enum": list(HOLD_REASONS)},
                            "actor": nullable(ref("ActorVerdict")),
                            "rule": {"type": ["string", "null"]},
                            "fault": {"type": ["string", "null"]},
                            "expires_at": TIMESTAMP,
                        },
                        ["reason", "actor", "rule", "fault", "expires_at"],
                    ),
                    {"type": "null"},
                ],
                "description": "Why it was held in quarantine (it still says so once released or "
                "discarded); null for a todo never held.",
            },
            "delivery": {
                "anyOf": [
                    obj({"id": {"type": "string"}, "webhook": {"type": "string"}}, ["id", "webhook"]),
                    {"type": "null"},
                ],
                "description": "The webhook delivery that minted it (GET "
                "/webhooks/{webhook}/deliveries/{id}); null when it came from elsewhere or its webhook "
                "is gone.",
            },
        }
    ),
    "TodoDetailEnvelope": obj({"todo": ref("TodoDetail")}, ["todo"]),
    "RoutingTrace": obj(
        {
            "by": {
                "type": "string",
                "description": "What decided: trust, rule, default, release (a person), or none (no rules).",
            },
            "rule": {"type": ["string", "null"], "description": "The rule's id, when a rule decided."},
            "rule_name": {"type": ["string", "null"]},
            "action": {"description": "The action carried out, as the rule set states it."},
            "why": {"type": "string"},
            "actor": {**nullable(ref("ActorVerdict")), "description": "The trust step's verdict, if any."},
            "targets": {
                "type": "array",
                "items": {"type": "object"},
                "description": "On an event's trace: what each target got.",
            },
        },
        ["by", "action"],
    ),
}
