"""``/endpoints``: vend, list, show and revoke the agents' endpoints in the caller's scopes.

The ``sbk_`` token is in the vend response only. Basics are always granted; ``reply`` and
``connections`` are opt-in, and vending with ``connections`` carries a warning, because those
verbs hand the agent the owner's outbound credentials.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from switchboard import tenancy
from switchboard.api.openapi import TIMESTAMP, list_of, obj, ref
from switchboard.api.routing import TEAM_QUERY, Operation, Param, Request, page_query, paged
from switchboard.errors import not_found
from switchboard.models import Endpoint
from switchboard.tenancy import CONNECTION_VERBS_WARNING, Owner

FAMILIES = tuple(f for f in tenancy.VERB_FAMILIES if f != "basics")
# The longest name ``tenancy.vend_endpoint`` takes, stated in the document (refused beyond it).
NAME_MAX = 200


async def visible_endpoint(req: Request, slug: str) -> Endpoint:
    """The endpoint ``slug`` if it is in the caller's scopes; 404 otherwise, as if it did not exist."""
    async with req.services.db.read() as s:
        endpoint = await s.scalar(select(Endpoint).where(Endpoint.slug == slug))
    if endpoint is None or not req.caller.sees(Owner.of(endpoint)):
        raise not_found(f"endpoint {slug!r}")
    return endpoint


async def list_endpoints(req: Request) -> tuple[int, dict[str, Any]]:
    rows: list[Endpoint] = []
    for scope in req.caller.read_scopes(req.query.get("team")):
        rows += await tenancy.list_endpoints(req.services.db, scope)
    state = req.query.get("state")
    return 200, paged(
        req,
        "endpoints",
        [e for e in rows if state is None or e.state == state],
        lambda e: e.id,
        lambda e: tenancy.endpoint_view(e, req.caller.label(Owner.of(e))),
    )


async def vend(req: Request) -> tuple[int, dict[str, Any]]:
    owner = req.caller.write_scope(req.body.get("team"), "endpoints")
    endpoint, token = await tenancy.vend_endpoint(
        req.services.db,
        name=req.body["name"],
        owner=owner,
        queues=req.body.get("queues"),
        families=req.body.get("families") or [],
        expires_in_days=req.body.get("expires_in_days"),
        default_lease_seconds=req.body.get("default_lease_seconds", 300),
        max_per_owner=req.services.settings.max_endpoints_per_owner,
    )
    view = tenancy.endpoint_view(endpoint, req.caller.label(owner))
    data: dict[str, Any] = {
        "endpoint": view,
        "token": token,
        "mcp_url": f"{req.services.settings.base_url.rstrip('/')}/mcp",
    }
    if "connections" in view["families"]:
        data["warning"] = CONNECTION_VERBS_WARNING
    return 201, data


async def get_endpoint(req: Request) -> tuple[int, dict[str, Any]]:
    endpoint = await visible_endpoint(req, req.path["slug"])
    return 200, {"endpoint": tenancy.endpoint_view(endpoint, req.caller.label(Owner.of(endpoint)))}


async def revoke(req: Request) -> tuple[int, dict[str, Any]]:
    endpoint = await visible_endpoint(req, req.path["slug"])
    req.caller.require_manage(Owner.of(endpoint), f"endpoint {endpoint.slug!r}")
    endpoint = await tenancy.revoke_endpoint(req.services.db, endpoint.slug)
    # Close its live MCP sessions now rather than at the next revocation pass (every MCP request
    # re-checks the token in any case).
    await req.services.endpoints_revoked([endpoint.id])
    return 200, {"endpoint": tenancy.endpoint_view(endpoint, req.caller.label(Owner.of(endpoint)))}


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/endpoints",
        "listEndpoints",
        "Endpoints in the caller's scopes, oldest first, one cursor page.",
        "endpoints",
        list_endpoints,
        "EndpointList",
        query=(
            TEAM_QUERY,
            Param("state", "string", "Only this state.", enum=("active", "revoked")),
            *page_query(),
        ),
    ),
    Operation(
        "POST",
        "/endpoints",
        "vendEndpoint",
        "Vend an endpoint. The `sbk_` token is in this response only. Basics are always granted; "
        "`reply` and `connections` are opt-in, and `connections` hands the agent the owner's "
        "outbound credentials.",
        "endpoints",
        vend,
        "VendedEndpoint",
        status=201,
        errors=(400, 401, 403, 404, 409),
        body=(
            Param(
                "name",
                "string",
                "Human-readable name; the slug is derived from it.",
                required=True,
                max_length=NAME_MAX,
            ),
            Param("team", "string", "Vend for this team (owners/admins); default: the caller."),
            Param("queues", "array", 'Granted queues (absent: ["default"]).', min_items=1),
            Param("families", "array", f"Extra verb families: {', '.join(FAMILIES)}."),
            Param("expires_in_days", "integer", "Token lifetime.", nullable=True, minimum=1, maximum=3650),
            Param(
                "default_lease_seconds",
                "integer",
                "Default claim lease.",
                minimum=1,
                maximum=tenancy.MAX_LEASE_SECONDS,
            ),
        ),
    ),
    Operation(
        "GET",
        "/endpoints/{slug}",
        "getEndpoint",
        "One endpoint.",
        "endpoints",
        get_endpoint,
        "EndpointEnvelope",
    ),
    Operation(
        "POST",
        "/endpoints/{slug}/revoke",
        "revokeEndpoint",
        "Revoke: the token dies at once, its sessions close and its open todos are dead-lettered.",
        "endpoints",
        revoke,
        "EndpointEnvelope",
        errors=(400, 401, 403, 404),
    ),
)

SCHEMAS: dict[str, Any] = {
    "Endpoint": obj(
        {
            "id": {"type": "string"},
            "slug": {"type": "string"},
            "name": {"type": "string"},
            "owner": {"type": "string", "description": "human:HANDLE or team:SLUG"},
            "token_prefix": {"type": "string"},
            "queues": {"type": "array", "items": {"type": "string"}},
            "verbs": {"type": "array", "items": {"type": "string"}},
            "families": {"type": "array", "items": {"type": "string"}},
            "state": {"type": "string", "enum": ["active", "revoked"]},
            "expires_at": TIMESTAMP,
            "default_lease_seconds": {"type": "integer"},
            "created_at": TIMESTAMP,
            "revoked_at": TIMESTAMP,
        }
    ),
    "EndpointEnvelope": obj({"endpoint": ref("Endpoint")}, ["endpoint"]),
    "EndpointList": list_of("endpoints", "Endpoint"),
    "VendedEndpoint": obj(
        {
            "endpoint": ref("Endpoint"),
            "token": {"type": "string", "description": "sbk_… — shown only here."},
            "mcp_url": {"type": "string"},
            "warning": {"type": "string"},
        },
        ["endpoint", "token", "mcp_url"],
    ),
}
