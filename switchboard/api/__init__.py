"""The operator API under ``/api/v1``: what a human may do with their own and their teams' things.

Authentication is the human's personal token (``Authorization: Bearer sbo_…``). A human sees only
their own scope and their teams' scopes; anything in another scope answers 404, exactly like an id
that does not exist, so ids cannot be probed. Team members read; team owners and admins manage.
Tokens and secrets appear only in the create/rotate response that makes them.

Where things are:

* this module — ``OPERATIONS`` (the resource modules' rows, in one table), ``setup(app)``;
* ``caller`` — the ``sbo_`` bearer token, and ``Caller``: what the human may see and change;
* ``routing`` — ``Operation`` and ``Param`` (one route's declaration), the checked ``Request`` a
  handler gets, body and query validation, and ``wrap``: one JSON error shape for every failure;
* ``openapi`` — the OpenAPI 3.1 document, generated from the table and the schemas;
* one module per resource, each with its handlers, its table rows and its response schemas:
  ``humans``, ``teams``, ``endpoints``, ``webhooks`` (``intake``: a webhook's trusted actors and
  routing rules; ``deliveries``: its delivery log), ``connections``, ``todos``, ``quarantine`` (held
  todos), ``kinds``.

Every route is one row of ``OPERATIONS``: the same row registers the aiohttp route, validates query
strings and JSON bodies (unknown fields are refused, never ignored), and documents the route in
``/api/v1/openapi.json``, so the document cannot drift from the code. Resource modules import the
framework modules, never this package.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from switchboard.api import (
    connections,
    deliveries,
    endpoints,
    humans,
    intake,
    kinds,
    openapi,
    quarantine,
    teams,
    todos,
    webhooks,
)
from switchboard.api.routing import PREFIX, Operation, dumps, wrap

__all__ = ["OPERATIONS", "PREFIX", "SCHEMAS", "openapi_document", "setup"]

# The order here is the order of the routes and of the OpenAPI document's paths.
_RESOURCES = (humans, teams, endpoints, webhooks, intake, deliveries, connections, todos, quarantine, kinds)

OPERATIONS: tuple[Operation, ...] = tuple(op for resource in _RESOURCES for op in resource.OPERATIONS)
SCHEMAS: dict[str, Any] = {
    **openapi.SHARED_SCHEMAS,
    **{name: schema for resource in _RESOURCES for name, schema in resource.SCHEMAS.items()},
}


def openapi_document() -> dict[str, Any]:
    return openapi.document(OPERATIONS, SCHEMAS)


async def openapi_view(request: web.Request) -> web.Response:
    return web.json_response(openapi_document(), dumps=dumps)


def setup(app: web.Application) -> None:
    """Add the operator API routes and its OpenAPI document to the app."""
    app.router.add_get(f"{PREFIX}/openapi.json", openapi_view)
    for op in OPERATIONS:
        app.router.add_route(op.method, PREFIX + op.path, wrap(op))
