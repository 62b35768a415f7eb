"""``/connections``: the owners' outbound credentials (forge tokens, Slack bots, …).

The secret is write-only: no response ever carries it, only a fingerprint. A scope's managers
(the human themself; a team's owners and admins) create, change, rotate, test and delete; team
members see names, kinds, account keys and fingerprints, nothing more.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from switchboard import connections as owner_connections
from switchboard.api.caller import Caller
from switchboard.api.openapi import OPEN_OBJECT, TIMESTAMP, deleted, list_of, obj, ref
from switchboard.api.routing import TEAM_QUERY, Operation, Param, Request, page_query, paged
from switchboard.errors import not_found
from switchboard.models import Connection
from switchboard.tenancy import Owner

# The bounds ``connections`` checks, stated in the document (refused beyond them, never cut).
NAME_MAX, SECRET_MAX = owner_connections.NAME_LIMIT, owner_connections.SECRET_LIMIT
ACCOUNT_KEY_MAX = 300
# The allowlists' lengths (``connections`` refuses longer ones, on every surface).
TARGETS_MAX, ENDPOINTS_MAX = owner_connections.TARGETS_LIMIT, owner_connections.ENDPOINTS_LIMIT

# What a team member (not owner/admin) may see of a team's connection (docs/api.md).
MEMBER_CONNECTION_FIELDS = ("id", "owner", "kind", "name", "account_key", "fingerprint")


async def _connection_scope(req: Request, connection_id: str) -> Owner:
    async with req.services.db.read() as s:
        row = (
            await s.execute(
                select(Connection.owner_human_id, Connection.owner_team_id).where(
                    Connection.id == connection_id
                )
            )
        ).first()
    if row is None:
        raise not_found(f"connection {connection_id!r}")
    owner = Owner(human_id=row[0], team_id=row[1])
    req.caller.require_visible(owner, f"connection {connection_id!r}")
    return owner


def _connection_for(caller: Caller, owner: Owner, row: dict[str, Any]) -> dict[str, Any]:
    """A connection as this caller may see it: members get names, kinds, keys and fingerprints."""
    row = {**row, "owner": caller.label(owner)}
    if caller.manages(owner):
        return row
    return {k: row.get(k) for k in MEMBER_CONNECTION_FIELDS}


async def list_connections(req: Request) -> tuple[int, dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for scope in req.caller.read_scopes(req.query.get("team")):
        for row in await owner_connections.list_connections(req.services, scope):
            rows.append(_connection_for(req.caller, scope, row))
    return 200, paged(req, "connections", rows, lambda c: c["id"], lambda c: c)


async def create_connection(req: Request) -> tuple[int, dict[str, Any]]:
    owner = req.caller.write_scope(req.body.get("team"), "connections")
    row = await owner_connections.create_connection(
        req.services,
        owner,
        kind=req.body["kind"],
        name=req.body["name"],
        account_key=req.body["account_key"],
        secret=req.body["secret"],
        targets=req.body.get("targets"),
        endpoints=req.body.get("endpoints"),
        config=req.body.get("config"),
    )
    return 201, {"connection": _connection_for(req.caller, owner, row)}


async def get_connection(req: Request) -> tuple[int, dict[str, Any]]:
    owner = await _connection_scope(req, req.path["id"])
    row = await owner_connections.get_connection(req.services, owner, req.path["id"])
    return 200, {"connection": _connection_for(req.caller, owner, row)}


async def patch_connection(req: Request) -> tuple[int, dict[str, Any]]:
    owner = await _connection_scope(req, req.path["id"])
    req.caller.require_manage(owner, f"connection {req.path['id']!r}")
    changes: dict[str, Any] = {}
    for key in ("name", "targets", "endpoints", "config"):
        if key in req.body:
            changes[key] = req.body[key]
    if "config" in changes and changes["config"] is None:
        # null clears the config (as it makes none on create); ``update_connection`` reads None as
        # "unchanged", which would answer 200 and ignore it.
        changes["config"] = {}
    row = await owner_connections.update_connection(req.services, owner, req.path["id"], **changes)
    return 200, {"connection": _connection_for(req.caller, owner, row)}


async def rotate_connection(req: Request) -> tuple[int, dict[str, Any]]:
    owner = await _connection_scope(req, req.path["id"])
    req.caller.require_manage(owner, f"connection {req.path['id']!r}")
    row = await owner_connections.rotate_connection(req.services, owner, req.path["id"], req.body["secret"])
    return 200, {"connection": _connection_for(req.caller, owner, row)}


async def delete_connection(req: Request) -> tuple[int, dict[str, Any]]:
    owner = await _connection_scope(req, req.path["id"])
    req.caller.require_manage(owner, f"connection {req.path['id']!r}")
    await owner_connections.delete_connection(req.services, owner, req.path["id"])
    return 200, {"connection": req.path["id"], "deleted": True}


async def test_connection(req: Request) -> tuple[int, dict[str, Any]]:
    owner = await _connection_scope(req, req.path["id"])
    req.caller.require_manage(owner, f"connection {req.path['id']!r}")
    result = await owner_connections.test_connection(req.services, owner, req.path["id"])
    return 200, {"connection": req.path["id"], "test": result}


def _allowlists(when: str) -> tuple[Param, Param]:
    """The two allowlists' fields, as create and update take them (``when``: what absent or null
    means there). An empty list is refused: it would read as the opposite of what it says."""
    return (
        Param(
            "targets",
            "array",
            f"Allowlist globs (repos, channel ids, artifact ids); {when} (every target).",
            nullable=True,
            min_items=1,
            max_items=TARGETS_MAX,
        ),
        Param(
            "endpoints",
            "array",
            f"Endpoint slugs allowed to use it; {when} (every endpoint of the owner).",
            nullable=True,
            min_items=1,
            max_items=ENDPOINTS_MAX,
        ),
    )


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/connections",
        "listConnections",
        "Connections in the caller's scopes: fingerprints only; team members see names, kinds, "
        "account keys and fingerprints.",
        "connections",
        list_connections,
        "ConnectionList",
        query=(TEAM_QUERY, *page_query()),
    ),
    Operation(
        "POST",
        "/connections",
        "createConnection",
        "Create a connection. The secret is write-only: no response ever carries it.",
        "connections",
        create_connection,
        "ConnectionEnvelope",
        status=201,
        errors=(400, 401, 403, 404, 409),
        body=(
            Param("team", "string", "Create for this team (owners/admins); default: the caller."),
            Param("kind", "string", "Connection kind (github, gitea, slack, cairn, …).", required=True),
            Param("name", "string", "Unique in the scope.", required=True, max_length=NAME_MAX),
            Param(
                "account_key",
                "string",
                "Forge host, Slack team id or https base URL (with its path, for an instance under one).",
                required=True,
                max_length=ACCOUNT_KEY_MAX,
            ),
            Param("secret", "string", "The credential (write-only).", required=True, max_length=SECRET_MAX),
            *_allowlists("absent or null: no allowlist"),
            Param("config", "object", "Kind-specific settings.", nullable=True),
        ),
    ),
    Operation(
        "GET",
        "/connections/{id}",
        "getConnection",
        "One connection (never its secret).",
        "connections",
        get_connection,
        "ConnectionEnvelope",
    ),
    Operation(
        "PATCH",
        "/connections/{id}",
        "updateConnection",
        "Change the name, allowlists or config; absent fields are unchanged, null clears an allowlist.",
        "connections",
        patch_connection,
        "ConnectionEnvelope",
        errors=(400, 401, 403, 404, 409),
        body=(
            Param("name", "string", "New name.", max_length=NAME_MAX),
            *_allowlists("New; null: no allowlist"),
            Param("config", "object", "New config (null: none).", nullable=True),
        ),
    ),
    Operation(
        "POST",
        "/connections/{id}/rotate",
        "rotateConnection",
        "Replace the secret (write-only).",
        "connections",
        rotate_connection,
        "ConnectionEnvelope",
        errors=(400, 401, 403, 404, 409),
        body=(Param("secret", "string", "The new credential.", required=True, max_length=SECRET_MAX),),
    ),
    Operation(
        "DELETE",
        "/connections/{id}",
        "deleteConnection",
        "Delete a connection.",
        "connections",
        delete_connection,
        "ConnectionDeleted",
        errors=(400, 401, 403, 404),
    ),
    Operation(
        "POST",
        "/connections/{id}/test",
        "testConnection",
        "One harmless authenticated read; reports ok or an error class.",
        "connections",
        test_connection,
        "ConnectionTest",
        errors=(400, 401, 403, 404),
    ),
)

# A test's verdict, as the test answers it and as the connection keeps it (``last_test``).
_VERDICT = {
    "ok": {"type": ["boolean", "null"], "description": "null: not tested since the secret was rotated."},
    "error_class": {"type": ["string", "null"], "description": "auth, network, … when not ok."},
    "detail": {"type": "string", "description": "What the provider said (never a secret)."},
    "tested_at": TIMESTAMP,
}

SCHEMAS: dict[str, Any] = {
    "Connection": obj(
        {
            "id": {"type": "string"},
            "owner": {"type": "string", "description": "human:HANDLE or team:SLUG"},
            "owner_id": {"type": "string", "description": "The owning human's or team's id."},
            "kind": {"type": "string"},
            "name": {"type": "string"},
            "account_key": {"type": "string"},
            "fingerprint": {"type": "string"},
            "targets": {"type": ["array", "null"], "items": {"type": "string"}},
            "endpoints": {"type": ["array", "null"], "items": {"type": "string"}},
            "config": {**OPEN_OBJECT, "description": "Kind-specific settings."},
            "last_test": {
                "anyOf": [
                    obj(
                        {
                            **_VERDICT,
                            "facts": {
                                **OPEN_OBJECT,
                                "description": "What a passing test learned (e.g. a Slack bot id).",
                            },
                        },
                        ["ok", "error_class", "detail", "tested_at"],
                    ),
                    {"type": "null"},
                ]
            },
            "blocked_until": {
                **TIMESTAMP,
                "description": "After a provider's 429: no reply is dialled with it before then.",
            },
            "created_at": TIMESTAMP,
            "updated_at": TIMESTAMP,
        },
        # A team member sees only these; owners and admins all of the above.
        ["id", "owner", "kind", "name", "account_key", "fingerprint"],
    ),
    "ConnectionEnvelope": obj({"connection": ref("Connection")}, ["connection"]),
    "ConnectionList": list_of("connections", "Connection"),
    "ConnectionDeleted": deleted("connection", "connection's id"),
    "ConnectionTest": obj(
        {
            "connection": {"type": "string"},
            "test": obj(_VERDICT, ["ok", "error_class", "detail", "tested_at"]),
        },
        ["connection", "test"],
    ),
}
