"""The OpenAPI 3.1 document served at ``/api/v1/openapi.json``, generated from the operations
table and the response schemas the resource modules declare beside their rows.

The helpers here (``obj``, ``ref``, ``list_of``, ``TIMESTAMP``) are what those modules write their
schemas with; ``document`` puts the table and the schemas together.

Every object schema ``obj`` writes is closed (``additionalProperties: false``): a field the server
returns but the document does not name makes a response invalid, so the contract test
(``tests/test_api_schemathesis.py``, schemathesis against a live server) catches any drift. Only
what is the caller's or a provider's own data (a payload, a result, a reply address, a config) is
an open object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from switchboard.api.routing import PREFIX, Operation

TIMESTAMP = {"type": ["string", "null"], "format": "date-time"}


def obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """A closed object: exactly these properties (``required`` of them always present)."""
    return {
        "type": "object",
        "properties": props,
        **({"required": required} if required else {}),
        "additionalProperties": False,
    }


# Data that is not ours to shape: a payload, an agent's result, a reply address, a kind's config.
OPEN_OBJECT: dict[str, Any] = {"type": "object"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def deleted(key: str, what: str) -> dict[str, Any]:
    """A deletion's answer: the id (or slug) of what was deleted under ``key``, and ``deleted``."""
    return obj(
        {key: {"type": "string", "description": f"The {what} deleted."}, "deleted": {"type": "boolean"}},
        [key, "deleted"],
    )


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


# Every listing is a cursor page (``paging``): where the pages either side of it start.
CURSORS = {
    "next_before": {
        "type": ["string", "null"],
        "description": "Pass as `before` for the older rows; null when there are none.",
    },
    "next_after": {
        "type": ["string", "null"],
        "description": "Pass as `after` for the newer rows; null when there are none (yet).",
    },
}


def list_of(key: str, item: str) -> dict[str, Any]:
    """A listing's answer: one page of ``item`` under ``key``, and the cursors."""
    return obj({key: {"type": "array", "items": ref(item)}, **CURSORS}, [key, *CURSORS])


# The schemas no one resource owns: the error every route may answer.
SHARED_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "properties": {
            "error": {"type": "string", "description": "Stable error code."},
            "message": {"type": "string"},
            "quota": {"type": "string", "description": "With `conflict` at a quota: which one."},
            "limit": {"type": "integer", "description": "With `conflict` at a quota: its limit."},
            "rule": {
                "type": ["string", "null"],
                "description": "With a rule set's code (`invalid_rule`, `not_granted`, …): the rule at "
                "fault (null: the set as a whole or its default action).",
            },
            "delivery": {
                "type": "string",
                "description": "With `invalid_rule` from a dry run: the stored delivery a rule faulted on.",
            },
            "queue": {"type": "string", "description": "With `not_granted` on a release: the queue."},
        },
        "required": ["error", "message"],
        "additionalProperties": False,
    },
}

_ERROR_TEXT = {
    400: "Bad input: `invalid_body` (not a JSON object), `duplicate_key` (a JSON object names a key "
    "twice), `invalid_argument` (a field, query parameter or value the route refuses), or a code of "
    "the route's own (its description lists them).",
    401: "Missing or unknown token (`unauthorized`).",
    403: "Visible but not yours to change (`forbidden`).",
    404: "No such thing in the caller's scopes (`not_found`).",
    408: "The body did not arrive within 30 s (`request_timeout`); the connection is closed.",
    409: "`conflict` (a duplicate, a team's last owner, a revoked endpoint, a state the action does "
    "not apply to, an owner at its endpoint quota) or `encryption_required`.",
    413: "The body is larger than 5 MiB (`payload_too_large`).",
    415: "The body's `Content-Encoding` is not gzip, deflate or identity (`unsupported_encoding`).",
    503: "The database cannot be reached, or a stored secret cannot be opened (`unavailable`); retry.",
}
# Every route may answer these whatever it does: bodies are bounded, only some codings are decoded
# (a body in another is 415 before any route reads it) and the database may be away.
_ALWAYS = (408, 413, 415, 503)


def _operation(op: Operation) -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": ref("Error")}}}
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in op.path_params
    ] + [
        {
            "name": p.name,
            "in": "query",
            "required": p.required,
            "schema": p.schema(),
            **({"description": p.description} if p.description else {}),
        }
        for p in op.query
    ]
    entry: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        **({"description": op.description} if op.description else {}),
        "tags": [op.tag],
        "responses": {
            str(op.status): {
                "description": "OK" if op.status == 200 else "Created",
                "content": {"application/json": {"schema": ref(op.response)}},
            },
            **{
                str(code): {"description": _ERROR_TEXT[code], **error}
                for code in sorted({*op.errors, *_ALWAYS})
            },
        },
    }
    if parameters:
        entry["parameters"] = parameters
    if op.body is not None:
        required = [p.name for p in op.body if p.required]
        entry["requestBody"] = {
            "required": bool(required),
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {p.name: p.schema() for p in op.body},
                        **({"required": required} if required else {}),
                    }
                }
            },
        }
    return entry


def document(operations: Iterable[Operation], schemas: Mapping[str, Any]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(PREFIX + op.path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Switchboard operator API",
            "version": "1",
            "description": "Manage your own and your teams' endpoints, webhooks, connections and todos. "
            "Authenticate with your personal token: `Authorization: Bearer sbo_…`. Another scope's ids "
            "answer 404. Unknown fields, repeated keys and repeated query parameters are refused. Tokens "
            "and secrets appear once, in the response that makes them. A method a path does not take "
            "answers 405 (`method_not_allowed`, with `Allow`); an unknown path under /api/v1 answers "
            "404 (`not_found`); every error is an `Error` object.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "sbo_…"}},
            "schemas": dict(schemas),
        },
        "paths": {
            f"{PREFIX}/openapi.json": {
                "get": {
                    "operationId": "getOpenapi",
                    "summary": "This document.",
                    "tags": ["meta"],
                    "security": [],
                    "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {}}}},
                }
            },
            **paths,
        },
    }
