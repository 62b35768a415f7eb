"""The operator API under ``/api/v1``: what a human may do with their own and their teams' things.

Authentication is the human's personal token (``Authorization: Bearer sbo_…``). A human sees only
their own scope and their teams' scopes; anything in another scope answers 404, exactly like an id
that does not exist, so ids cannot be probed. Team members read; team owners and admins manage.

Every route is one row of ``OPERATIONS``: the same table registers the aiohttp routes, validates
query strings and JSON bodies (unknown fields are refused, never ignored), and generates the OpenAPI
3.1 document served at ``/api/v1/openapi.json``, so the document cannot drift from the code.

Tokens and secrets appear only in the create/rotate response that makes them.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiohttp import web
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, IntegrityError

from switchboard import connections, tenancy, todos
from switchboard.db import Database, DatabaseUnavailable
from switchboard.errors import SwitchboardError, invalid, not_found
from switchboard.models import Connection, Endpoint, Human, Membership, Team, Webhook
from switchboard.services import Services, services_of
from switchboard.tenancy import Owner
from switchboard.vault import EncryptionRequired, VaultError

log = logging.getLogger("switchboard.api")

PREFIX = "/api/v1"
CONNECTION_VERBS_WARNING = (
    "this endpoint holds the connection verbs: they hand the agent the owner's outbound "
    "credentials (it can create, rotate and delete connections; it never sees a secret)"
)
# What a team member (not owner/admin) may see of a team's connection (SPEC §6.2).
MEMBER_CONNECTION_FIELDS = ("id", "owner", "kind", "name", "account_key", "fingerprint")


# ---------------------------------------------------------------------------------------------
# The caller


@dataclass(frozen=True)
class Caller:
    human: Human
    # team id → the caller's role in it
    roles: dict[str, str]
    team_slugs: dict[str, str]

    @property
    def own(self) -> Owner:
        return Owner(human_id=self.human.id)

    @property
    def scopes(self) -> list[Owner]:
        return [self.own, *(Owner(team_id=t) for t in self.roles)]

    def sees(self, owner: Owner) -> bool:
        if owner.human_id is not None:
            return owner.human_id == self.human.id
        return owner.team_id in self.roles

    def manages(self, owner: Owner) -> bool:
        if owner.human_id is not None:
            return owner.human_id == self.human.id
        return self.roles.get(owner.team_id or "") in ("owner", "admin")

    def label(self, owner: Owner) -> str:
        if owner.human_id is not None:
            return f"human:{self.human.handle}" if owner.human_id == self.human.id else "human:?"
        return f"team:{self.team_slugs.get(owner.team_id or '', '?')}"

    def require_visible(self, owner: Owner, what: str) -> None:
        if not self.sees(owner):
            raise not_found(what)

    def require_manage(self, owner: Owner, what: str) -> None:
        """404 outside the caller's scopes (existence is never revealed), 403 for a team member."""
        self.require_visible(owner, what)
        if not self.manages(owner):
            raise SwitchboardError("forbidden", f"only the team's owners and admins may change {what}")

    def team_scope(self, slug: str) -> Owner:
        for team_id, team_slug in self.team_slugs.items():
            if team_slug == slug:
                return Owner(team_id=team_id)
        raise not_found(f"team {slug!r}")


async def _caller(request: web.Request) -> Caller:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    human = None
    if scheme.lower() == "bearer" and token:
        human = await tenancy.human_by_token(services_of(request).db, token)
    if human is None:
        raise _Unauthorized
    async with services_of(request).db.read() as s:
        rows = (
            await s.execute(
                select(Membership.team_id, Membership.role, Team.slug)
                .join(Team, Team.id == Membership.team_id)
                .where(Membership.human_id == human.id)
            )
        ).all()
    return Caller(human, {t: r for t, r, _ in rows}, {t: slug for t, _, slug in rows})


class _Unauthorized(Exception):
    """No valid human token on the request."""


# ---------------------------------------------------------------------------------------------
# The route table, validation and OpenAPI


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # string | integer | boolean | array | object | any
    description: str = ""
    required: bool = False
    nullable: bool = False
    enum: tuple[str, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None

    def schema(self) -> dict[str, Any]:
        base: dict[str, Any]
        if self.type == "array":
            base = {"type": "array", "items": {"type": "string"}}
        elif self.type == "any":
            base = {}
        else:
            base = {"type": self.type}
        if self.enum:
            base["enum"] = list(self.enum)
        if self.minimum is not None:
            base["minimum"] = self.minimum
        if self.maximum is not None:
            base["maximum"] = self.maximum
        if self.nullable and "type" in base:
            base["type"] = [base["type"], "null"]
        if self.description:
            base["description"] = self.description
        return base


@dataclass(frozen=True)
class Request:
    """What a handler gets: the caller, path parameters, a checked query and a checked body."""

    web: web.Request
    caller: Caller
    services: Services
    path: dict[str, str]
    query: dict[str, Any]
    body: dict[str, Any]


Handler = Callable[[Request], Awaitable[tuple[int, dict[str, Any]]]]


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    operation_id: str
    summary: str
    tag: str
    handler: Handler
    response: str
    status: int = 200
    query: tuple[Param, ...] = ()
    body: tuple[Param, ...] | None = None
    errors: tuple[int, ...] = (400, 401, 404)
    description: str = ""
    path_params: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path_params", tuple(re.findall(r"{(\w+)}", self.path)))


def _type_ok(param: Param, value: Any) -> bool:
    if value is None:
        return param.nullable
    if param.type == "string":
        ok = isinstance(value, str)
    elif param.type == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif param.type == "boolean":
        ok = isinstance(value, bool)
    elif param.type == "array":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    elif param.type == "object":
        ok = isinstance(value, dict)
    else:
        ok = True
    if ok and param.enum is not None:
        ok = value in param.enum
    if ok and param.type == "integer":
        ok = (param.minimum is None or value >= param.minimum) and (
            param.maximum is None or value <= param.maximum
        )
    return ok


def _describe(param: Param) -> str:
    if param.enum:
        return "one of " + ", ".join(param.enum)
    noun = {"array": "a list of strings", "object": "a JSON object", "any": "any JSON value"}.get(
        param.type, f"a{'n' if param.type[0] in 'aeiou' else ''} {param.type}"
    )
    if param.type == "integer" and (param.minimum is not None or param.maximum is not None):
        noun += f" between {param.minimum} and {param.maximum}"
    return noun + (" or null" if param.nullable else "")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    # 1e400 parses as infinity, which no JSON response could carry back.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def _no_nul(value: Any) -> bool:
    """Text fields end up in the database; PostgreSQL text cannot hold NUL, so refuse it up front."""
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, list):
        return all(_no_nul(v) for v in value)
    return True


async def _read_body(request: web.Request, params: tuple[Param, ...] | None) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        data: Any = {}
    else:
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise SwitchboardError("invalid_body", "the request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise SwitchboardError("invalid_body", "the request body must be a JSON object")
    known = {p.name: p for p in params or ()}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise invalid(f"unknown field(s): {', '.join(unknown)}")
    for param in known.values():
        if param.name not in data:
            if param.required:
                raise invalid(f"field {param.name!r} is required")
            continue
        if not _type_ok(param, data[param.name]):
            raise invalid(f"field {param.name!r} must be {_describe(param)}")
        if param.type in ("string", "array") and not _no_nul(data[param.name]):
            raise invalid(f"field {param.name!r} must not contain NUL characters")
    return data


def _read_query(request: web.Request, params: tuple[Param, ...]) -> dict[str, Any]:
    known = {p.name: p for p in params}
    unknown = sorted(set(request.query) - set(known))
    if unknown:
        raise invalid(f"unknown query parameter(s): {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for name, param in known.items():
        values = request.query.getall(name, [])
        if not values:
            if param.required:
                raise invalid(f"query parameter {name!r} is required")
            continue
        if len(values) > 1:
            raise invalid(f"query parameter {name!r} given more than once")
        value: Any = values[0]
        if not _no_nul(value):
            raise invalid(f"query parameter {name!r} must not contain NUL characters")
        if param.type == "integer":
            if not re.fullmatch(r"-?\d{1,9}", value):
                raise invalid(f"query parameter {name!r} must be {_describe(param)}")
            value = int(value)
        elif param.type == "boolean":
            if value not in ("true", "false"):
                raise invalid(f"query parameter {name!r} must be true or false")
            value = value == "true"
        if not _type_ok(param, value):
            raise invalid(f"query parameter {name!r} must be {_describe(param)}")
        out[name] = value
    return out


def _error(status: int, code: str, message: str, **extra: Any) -> web.Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return web.json_response(
        {"error": code, "message": message, **extra},
        status=status,
        headers=headers,
        dumps=_dumps,
    )


def _dumps(data: Any) -> str:
    return json.dumps(data, default=_json_default, ensure_ascii=False)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return todos.rfc3339(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _wrap(op: Operation) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        services = services_of(request)
        try:
            caller = await _caller(request)
            query = _read_query(request, op.query)
            body = await _read_body(request, op.body)
            path = {name: request.match_info[name] for name in op.path_params}
            if not all(_no_nul(v) and len(v) <= 200 for v in path.values()):
                # No id, slug or handle looks like this: it names nothing.
                raise not_found("no such resource")
            status, data = await op.handler(Request(request, caller, services, path, query, body))
        except _Unauthorized:
            return _error(401, "unauthorized", "send Authorization: Bearer sbo_… (a human's token)")
        except SwitchboardError as exc:
            return _error(exc.http_status, exc.code, exc.message, **exc.extra)
        except EncryptionRequired:
            return _error(409, "encryption_required", "no SWITCHBOARD_SECRET_ENCRYPTION_KEY is configured")
        except VaultError as exc:
            # A stored secret the configured key cannot open: the operator's problem, not the caller's.
            log.error("vault error on %s %s: %s", request.method, request.path, exc)
            return _error(503, "unavailable", "a stored secret cannot be opened with the configured key")
        except IntegrityError:
            # A concurrent request made the same thing first.
            return _error(409, "conflict", "a conflicting change was made at the same time; retry")
        except (DBAPIError, DatabaseUnavailable, OSError) as exc:
            log.warning("database unavailable on %s %s: %s", request.method, request.path, type(exc).__name__)
            return _error(503, "unavailable", "the database is unavailable; retry shortly")
        return web.json_response(data, status=status, dumps=_dumps, headers={"Cache-Control": "no-store"})

    return handle


# ---------------------------------------------------------------------------------------------
# Helpers for handlers


def _human_view(human: Human) -> dict[str, Any]:
    return {
        "id": human.id,
        "handle": human.handle,
        "email": human.email,
        "token_prefix": human.token_display,
        "created_at": todos.rfc3339(human.created_at),
    }


async def _endpoint(req: Request, slug: str) -> Endpoint:
    async with req.services.db.read() as s:
        endpoint = await s.scalar(select(Endpoint).where(Endpoint.slug == slug))
    if endpoint is None or not req.caller.sees(Owner.of(endpoint)):
        raise not_found(f"endpoint {slug!r}")
    return endpoint


async def _webhook(req: Request, webhook_id: str) -> tuple[Webhook, Endpoint]:
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
    return found[0], found[1]


async def _webhook_view(req: Request, webhook_id: str, endpoint: Endpoint) -> dict[str, Any]:
    for row in await tenancy.list_webhooks(req.services.db, endpoint.slug):
        if row["id"] == webhook_id:
            return row
    raise not_found(f"webhook {webhook_id!r}")


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


def _scope_for_write(req: Request, team: str | None, what: str) -> Owner:
    """The scope a new thing goes into: the caller's own, or a team they administer."""
    if team is None:
        return req.caller.own
    owner = req.caller.team_scope(team)
    if not req.caller.manages(owner):
        raise SwitchboardError("forbidden", f"only the team's owners and admins may create {what}")
    return owner


def _scopes_for_read(req: Request) -> list[Owner]:
    team = req.query.get("team")
    return [req.caller.team_scope(team)] if team is not None else req.caller.scopes


# ---------------------------------------------------------------------------------------------
# Handlers: humans and teams


async def me(req: Request) -> tuple[int, dict[str, Any]]:
    teams = [
        {"slug": req.caller.team_slugs[t], "role": role}
        for t, role in sorted(req.caller.roles.items(), key=lambda item: req.caller.team_slugs[item[0]])
    ]
    return 200, {"human": {**_human_view(req.caller.human), "teams": teams}}


async def list_my_teams(req: Request) -> tuple[int, dict[str, Any]]:
    return 200, {"teams": await tenancy.list_teams(req.services.db, req.caller.human.id)}


async def _team_view(req: Request, slug: str) -> dict[str, Any]:
    for team in await tenancy.list_teams(req.services.db, req.caller.human.id):
        if team["slug"] == slug:
            return team
    raise not_found(f"team {slug!r}")


async def create_team(req: Request) -> tuple[int, dict[str, Any]]:
    team = await tenancy.add_team(req.services.db, req.body["slug"], req.caller.human.handle)
    return 201, {"team": await _team_view(req, team.slug)}


async def get_team(req: Request) -> tuple[int, dict[str, Any]]:
    return 200, {"team": await _team_view(req, req.path["slug"])}


async def _member_role(db: Database, team_id: str, handle: str) -> str | None:
    async with db.read() as s:
        return await s.scalar(
            select(Membership.role)
            .join(Human, Human.id == Membership.human_id)
            .where(Membership.team_id == team_id, Human.handle == handle)
        )


async def put_member(req: Request) -> tuple[int, dict[str, Any]]:
    slug, handle = req.path["slug"], req.path["handle"]
    role = req.body.get("role", "member")
    scope = req.caller.team_scope(slug)
    req.caller.require_manage(scope, f"team {slug!r}")
    current = await _member_role(req.services.db, scope.team_id or "", handle)
    mine = req.caller.roles[scope.team_id or ""]
    # Admins run the membership; only owners make owners or change an owner's role.
    if mine != "owner" and ("owner" in (role, current)):
        raise SwitchboardError("forbidden", "only a team owner may grant or change the owner role")
    await tenancy.set_member(req.services.db, slug, handle, role)
    return 200, {"team": await _team_view(req, slug)}


async def delete_member(req: Request) -> tuple[int, dict[str, Any]]:
    slug, handle = req.path["slug"], req.path["handle"]
    scope = req.caller.team_scope(slug)
    leaving_self = handle == req.caller.human.handle
    if not leaving_self:
        req.caller.require_manage(scope, f"team {slug!r}")
        current = await _member_role(req.services.db, scope.team_id or "", handle)
        if current == "owner" and req.caller.roles[scope.team_id or ""] != "owner":
            raise SwitchboardError("forbidden", "only a team owner may remove an owner")
    await tenancy.remove_member(req.services.db, slug, handle)
    if leaving_self:
        return 200, {"team": slug, "removed": handle}
    return 200, {"team": await _team_view(req, slug)}


# ---------------------------------------------------------------------------------------------
# Handlers: endpoints


async def list_endpoints(req: Request) -> tuple[int, dict[str, Any]]:
    rows: list[Endpoint] = []
    for scope in _scopes_for_read(req):
        rows += await tenancy.list_endpoints(req.services.db, scope)
    state = req.query.get("state")
    rows.sort(key=lambda e: (e.created_at, e.id))
    return 200, {
        "endpoints": [
            tenancy.endpoint_view(e, req.caller.label(Owner.of(e)))
            for e in rows
            if state is None or e.state == state
        ]
    }


async def vend(req: Request) -> tuple[int, dict[str, Any]]:
    owner = _scope_for_write(req, req.body.get("team"), "endpoints")
    endpoint, token = await tenancy.vend_endpoint(
        req.services.db,
        name=req.body["name"],
        owner=owner,
        queues=req.body.get("queues"),
        families=req.body.get("families") or [],
        expires_in_days=req.body.get("expires_in_days"),
        default_lease_seconds=req.body.get("default_lease_seconds", 300),
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
    endpoint = await _endpoint(req, req.path["slug"])
    return 200, {"endpoint": tenancy.endpoint_view(endpoint, req.caller.label(Owner.of(endpoint)))}


async def revoke(req: Request) -> tuple[int, dict[str, Any]]:
    endpoint = await _endpoint(req, req.path["slug"])
    req.caller.require_manage(Owner.of(endpoint), f"endpoint {endpoint.slug!r}")
    endpoint = await tenancy.revoke_endpoint(req.services.db, endpoint.slug)
    # Close its live MCP sessions now rather than at the next revocation pass (every MCP request
    # re-checks the token in any case).
    await req.services.endpoints_revoked([endpoint.id])
    return 200, {"endpoint": tenancy.endpoint_view(endpoint, req.caller.label(Owner.of(endpoint)))}


# ---------------------------------------------------------------------------------------------
# Handlers: webhooks


async def list_webhooks(req: Request) -> tuple[int, dict[str, Any]]:
    slug = req.query.get("endpoint")
    scopes = _scopes_for_read(req)
    if slug is not None:
        endpoint = await _endpoint(req, slug)
        if Owner.of(endpoint) not in scopes:  # both filters given, and they disagree
            raise not_found(f"endpoint {slug!r}")
        return 200, {"webhooks": await tenancy.list_webhooks(req.services.db, slug)}
    rows: list[dict[str, Any]] = []
    for scope in scopes:
        rows += await tenancy.list_webhooks(req.services.db, owner=scope)
    rows.sort(key=lambda w: (w["created_at"], w["id"]))
    return 200, {"webhooks": rows}


async def create_webhook(req: Request) -> tuple[int, dict[str, Any]]:
    endpoint = await _endpoint(req, req.body["endpoint"])
    req.caller.require_manage(Owner.of(endpoint), f"endpoint {endpoint.slug!r}")
    services = req.services
    new = await tenancy.create_webhook(
        services.db,
        services.vault,
        services.providers,
        endpoint_slug=endpoint.slug,
        source=req.body["source"],
        queue=req.body.get("queue"),
    )
    return 201, {
        "webhook": tenancy.webhook_view(new.webhook, endpoint.slug),
        "ingest_url": tenancy.ingest_url(services.settings.base_url, new.ingest_token),
        "secret": new.secret,
    }


async def get_webhook(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    return 200, {"webhook": await _webhook_view(req, webhook.id, endpoint)}


async def rotate_webhook(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    req.caller.require_manage(Owner.of(endpoint), f"webhook {webhook.id!r}")
    services = req.services
    secret = await tenancy.rotate_webhook_secret(services.db, services.vault, services.providers, webhook.id)
    return 200, {"webhook": await _webhook_view(req, webhook.id, endpoint), "secret": secret}


async def set_webhook_secret(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    req.caller.require_manage(Owner.of(endpoint), f"webhook {webhook.id!r}")
    services = req.services
    await tenancy.set_webhook_secret(
        services.db, services.vault, services.providers, webhook.id, req.body["secret"]
    )
    return 200, {"webhook": await _webhook_view(req, webhook.id, endpoint)}


async def delete_webhook(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    req.caller.require_manage(Owner.of(endpoint), f"webhook {webhook.id!r}")
    await tenancy.delete_webhook(req.services.db, webhook.id)
    return 200, {"webhook": webhook.id, "deleted": True}


async def add_route(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    req.caller.require_manage(Owner.of(endpoint), f"webhook {webhook.id!r}")
    target = await _endpoint(req, req.body["endpoint"])
    # Consent of the target's scope: the caller must administer it too (tenancy checks both).
    route = await tenancy.add_route(
        req.services.db, webhook.id, target.slug, consenting_human_id=req.caller.human.id
    )
    return 201, {
        "route": {"id": route.id, "webhook": webhook.id, "endpoint": target.slug},
        "webhook": await _webhook_view(req, webhook.id, endpoint),
    }


async def remove_route(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    target = await _endpoint(req, req.path["endpoint"])
    # Either side may withdraw: the webhook's administrators, or the target scope's (its consent).
    if not (req.caller.manages(Owner.of(endpoint)) or req.caller.manages(Owner.of(target))):
        raise SwitchboardError("forbidden", "only administrators of either scope may remove a route")
    await tenancy.remove_route(req.services.db, webhook.id, target.slug)
    return 200, {"webhook": await _webhook_view(req, webhook.id, endpoint)}


# ---------------------------------------------------------------------------------------------
# Handlers: connections


async def list_connections(req: Request) -> tuple[int, dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for scope in _scopes_for_read(req):
        for row in await connections.list_connections(req.services, scope):
            rows.append(_connection_for(req.caller, scope, row))
    return 200, {"connections": rows}


async def create_connection(req: Request) -> tuple[int, dict[str, Any]]:
    owner = _scope_for_write(req, req.body.get("team"), "connections")
    row = await connections.create_connection(
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
    row = await connections.get_connection(req.services, owner, req.path["id"])
    return 200, {"connection": _connection_for(req.caller, owner, row)}


async def patch_connection(req: Request) -> tuple[int, dict[str, Any]]:
    owner = await _connection_scope(req, req.path["id"])
    req.caller.require_manage(owner, f"connection {req.path['id']!r}")
    changes: dict[str, Any] = {}
    for key in ("name", "targets", "endpoints", "config"):
        if key in req.body:
            changes[key] = req.body[key]
    row = await connections.update_connection(req.services, owner, req.path["id"], **changes)
    return 200, {"connection": _connection_for(req.caller, owner, row)}


async def rotate_connection(req: Request) -> tuple[int, dict[str, Any]]:
    owner = await _connection_scope(req, req.path["id"])
    req.caller.require_manage(owner, f"connection {req.path['id']!r}")
    row = await connections.rotate_connection(req.services, owner, req.path["id"], req.body["secret"])
    return 200, {"connection": _connection_for(req.caller, owner, row)}


async def delete_connection(req: Request) -> tuple[int, dict[str, Any]]:
    owner = await _connection_scope(req, req.path["id"])
    req.caller.require_manage(owner, f"connection {req.path['id']!r}")
    await connections.delete_connection(req.services, owner, req.path["id"])
    return 200, {"connection": req.path["id"], "deleted": True}


async def test_connection(req: Request) -> tuple[int, dict[str, Any]]:
    owner = await _connection_scope(req, req.path["id"])
    req.caller.require_manage(owner, f"connection {req.path['id']!r}")
    result = await connections.test_connection(req.services, owner, req.path["id"])
    return 200, {"connection": req.path["id"], "test": result}


# ---------------------------------------------------------------------------------------------
# Handlers: todos


async def list_todos(req: Request) -> tuple[int, dict[str, Any]]:
    return 200, {
        "todos": await todos.list_in_scopes(
            req.services.db,
            scopes=_scopes_for_read(req),
            endpoint_slug=req.query.get("endpoint"),
            state=req.query.get("state"),
            queue=req.query.get("queue"),
            limit=req.query.get("limit", 50),
        )
    }


async def show_todo(req: Request) -> tuple[int, dict[str, Any]]:
    todo = await todos.show_in_scopes(req.services.db, req.path["id"], scopes=req.caller.scopes)
    return 200, {"todo": todo}


async def push_todo(req: Request) -> tuple[int, dict[str, Any]]:
    endpoint = await _endpoint(req, req.body["endpoint"])
    req.caller.require_manage(Owner.of(endpoint), f"endpoint {endpoint.slug!r}")
    todo = await todos.push(
        req.services.db,
        endpoint_slug=endpoint.slug,
        title=req.body["title"],
        queue=req.body.get("queue"),
        payload=req.body.get("payload"),
    )
    await req.services.todos_created([todo.id])
    return 201, {"todo": {**todos.todo_row(todo), "endpoint": endpoint.slug}}


# ---------------------------------------------------------------------------------------------
# The table

TEAM_Q = Param("team", "string", "Only this team's scope (a team you belong to).")
FAMILIES = tuple(f for f in tenancy.VERB_FAMILIES if f != "basics")

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/humans/me",
        "getMe",
        "The calling human, with their teams and roles.",
        "humans",
        me,
        "HumanEnvelope",
    ),
    Operation(
        "GET",
        "/teams",
        "listTeams",
        "Teams the caller belongs to, with members.",
        "teams",
        list_my_teams,
        "TeamList",
    ),
    Operation(
        "POST",
        "/teams",
        "createTeam",
        "Create a team with the caller as its owner.",
        "teams",
        create_team,
        "TeamEnvelope",
        status=201,
        errors=(400, 401, 409),
        body=(Param("slug", "string", "Team slug, [a-z0-9][a-z0-9-]{0,62}.", required=True),),
    ),
    Operation(
        "GET",
        "/teams/{slug}",
        "getTeam",
        "One of the caller's teams, with members.",
        "teams",
        get_team,
        "TeamEnvelope",
    ),
    Operation(
        "PUT",
        "/teams/{slug}/members/{handle}",
        "putTeamMember",
        "Add a member or change their role (team owners and admins; only owners grant owner).",
        "teams",
        put_member,
        "TeamEnvelope",
        errors=(400, 401, 403, 404, 409),
        body=(Param("role", "string", "Default member.", enum=tenancy.ROLES),),
    ),
    Operation(
        "DELETE",
        "/teams/{slug}/members/{handle}",
        "deleteTeamMember",
        "Remove a member (owners and admins; anyone may leave; a team keeps one owner).",
        "teams",
        delete_member,
        "TeamEnvelope",
        errors=(400, 401, 403, 404, 409),
    ),
    Operation(
        "GET",
        "/endpoints",
        "listEndpoints",
        "Endpoints in the caller's scopes.",
        "endpoints",
        list_endpoints,
        "EndpointList",
        query=(TEAM_Q, Param("state", "string", "Only this state.", enum=("active", "revoked"))),
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
            Param("name", "string", "Human-readable name; the slug is derived from it.", required=True),
            Param("team", "string", "Vend for this team (owners/admins); default: the caller."),
            Param("queues", "array", 'Granted queues (default ["default"]).'),
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
    Operation(
        "GET",
        "/webhooks",
        "listWebhooks",
        "Webhooks in the caller's scopes (never a secret).",
        "webhooks",
        list_webhooks,
        "WebhookList",
        query=(TEAM_Q, Param("endpoint", "string", "Only this endpoint's webhooks.")),
    ),
    Operation(
        "POST",
        "/webhooks",
        "createWebhook",
        "Create a webhook. The ingest URL, and the secret for minted kinds, are in this response only; "
        "provider-issued kinds (slack, stripe) await PUT /webhooks/{id}/secret.",
        "webhooks",
        create_webhook,
        "CreatedWebhook",
        status=201,
        errors=(400, 401, 403, 404, 409),
        body=(
            Param("endpoint", "string", "The owning endpoint's slug.", required=True),
            Param(
                "source",
                "string",
                "Source kind (github, gitea, slack, cairn, stripe, generic, …).",
                required=True,
            ),
            Param("queue", "string", "Target queue (default: the endpoint's first)."),
        ),
    ),
    Operation(
        "GET",
        "/webhooks/{id}",
        "getWebhook",
        "One webhook (never its secret).",
        "webhooks",
        get_webhook,
        "WebhookEnvelope",
    ),
    Operation(
        "DELETE",
        "/webhooks/{id}",
        "deleteWebhook",
        "Delete a webhook.",
        "webhooks",
        delete_webhook,
        "Deleted",
        errors=(400, 401, 403, 404),
    ),
    Operation(
        "POST",
        "/webhooks/{id}/rotate",
        "rotateWebhookSecret",
        "Mint a new signing secret (minted kinds); it is in this response only.",
        "webhooks",
        rotate_webhook,
        "RotatedWebhook",
        errors=(400, 401, 403, 404),
    ),
    Operation(
        "PUT",
        "/webhooks/{id}/secret",
        "setWebhookSecret",
        "Set the provider-issued signing secret (slack, stripe).",
        "webhooks",
        set_webhook_secret,
        "WebhookEnvelope",
        errors=(400, 401, 403, 404),
        body=(Param("secret", "string", "The provider's signing secret.", required=True),),
    ),
    Operation(
        "POST",
        "/webhooks/{id}/routes",
        "addWebhookRoute",
        "Fan deliveries out to another endpoint too; into another scope the caller must administer both.",
        "webhooks",
        add_route,
        "RouteEnvelope",
        status=201,
        errors=(400, 401, 403, 404, 409),
        body=(Param("endpoint", "string", "The target endpoint's slug.", required=True),),
    ),
    Operation(
        "DELETE",
        "/webhooks/{id}/routes/{endpoint}",
        "removeWebhookRoute",
        "Stop fanning out to an endpoint (administrators of either scope).",
        "webhooks",
        remove_route,
        "WebhookEnvelope",
        errors=(400, 401, 403, 404),
    ),
    Operation(
        "GET",
        "/connections",
        "listConnections",
        "Connections in the caller's scopes: fingerprints only; team members see names, kinds, "
        "account keys and fingerprints.",
        "connections",
        list_connections,
        "ConnectionList",
        query=(TEAM_Q,),
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
            Param("name", "string", "Unique in the scope.", required=True),
            Param("account_key", "string", "Forge host, Slack team id or https base URL.", required=True),
            Param("secret", "string", "The credential (write-only).", required=True),
            Param("targets", "array", "Allowlist globs (repos, channel ids, artifact ids).", nullable=True),
            Param("endpoints", "array", "Endpoint slugs allowed to use it.", nullable=True),
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
            Param("name", "string", "New name."),
            Param("targets", "array", "New targets allowlist (null: none).", nullable=True),
            Param("endpoints", "array", "New endpoints allowlist (null: none).", nullable=True),
            Param("config", "object", "New config.", nullable=True),
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
        body=(Param("secret", "string", "The new credential.", required=True),),
    ),
    Operation(
        "DELETE",
        "/connections/{id}",
        "deleteConnection",
        "Delete a connection.",
        "connections",
        delete_connection,
        "Deleted",
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
    Operation(
        "GET",
        "/todos",
        "listTodos",
        "Todos in the caller's scopes, newest first (no payloads).",
        "todos",
        list_todos,
        "TodoList",
        query=(
            TEAM_Q,
            Param("endpoint", "string", "Only this endpoint's todos."),
            Param("state", "string", "Only this state (dead: dead letters).", enum=todos.BOARD_STATES),
            Param("queue", "string", "Only this queue."),
            Param(
                "limit",
                "integer",
                "At most this many (default 50).",
                minimum=1,
                maximum=todos.OPERATOR_LIMIT_MAX,
            ),
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
        errors=(400, 401, 403, 404),
        body=(
            Param("endpoint", "string", "The endpoint's slug.", required=True),
            Param("title", "string", "One-line title.", required=True),
            Param("queue", "string", "Queue (default: the endpoint's first)."),
            Param("payload", "any", "Any JSON value (default {})."),
        ),
    ),
    Operation(
        "GET",
        "/todos/{id}",
        "getTodo",
        "One todo with payload, result, attempts and replies.",
        "todos",
        show_todo,
        "TodoDetailEnvelope",
    ),
)


# ---------------------------------------------------------------------------------------------
# OpenAPI

_TS = {"type": ["string", "null"], "format": "date-time"}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props, **({"required": required} if required else {})}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _list_of(key: str, item: str) -> dict[str, Any]:
    return _obj({key: {"type": "array", "items": _ref(item)}}, [key])


_TODO_PROPS: dict[str, Any] = {
    "id": {"type": "string"},
    "endpoint": {"type": "string"},
    "queue": {"type": "string"},
    "source": {"type": "string"},
    "kind": {"type": "string"},
    "title": {"type": "string"},
    "state": {"type": "string", "enum": list(todos.STATES)},
    "attempt": {"type": "integer"},
    "max_attempts": {"type": "integer"},
    "lease_expires_at": _TS,
    "next_retry_at": _TS,
    "dead_letter": {"type": "boolean"},
    "created_at": _TS,
    "updated_at": _TS,
    "payload_size": {"type": "integer"},
    "reply_to": {"type": ["object", "null"]},
    "replies": _obj(
        {
            "count": {"type": "integer"},
            "last_state": {"type": ["string", "null"]},
            "last_permalink": {"type": ["string", "null"]},
        }
    ),
}

SCHEMAS: dict[str, Any] = {
    "Error": _obj(
        {"error": {"type": "string", "description": "Stable error code."}, "message": {"type": "string"}},
        ["error", "message"],
    ),
    "Human": _obj(
        {
            "id": {"type": "string"},
            "handle": {"type": "string"},
            "email": {"type": ["string", "null"]},
            "token_prefix": {"type": "string"},
            "created_at": _TS,
            "teams": {
                "type": "array",
                "items": _obj({"slug": {"type": "string"}, "role": {"type": "string"}}),
            },
        }
    ),
    "HumanEnvelope": _obj({"human": _ref("Human")}, ["human"]),
    "Team": _obj(
        {
            "id": {"type": "string"},
            "slug": {"type": "string"},
            "created_at": _TS,
            "members": {
                "type": "array",
                "items": _obj(
                    {"handle": {"type": "string"}, "role": {"type": "string", "enum": list(tenancy.ROLES)}}
                ),
            },
        }
    ),
    "TeamEnvelope": _obj(
        {"team": {"oneOf": [_ref("Team"), {"type": "string"}]}, "removed": {"type": "string"}}, ["team"]
    ),
    "TeamList": _list_of("teams", "Team"),
    "Endpoint": _obj(
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
            "expires_at": _TS,
            "default_lease_seconds": {"type": "integer"},
            "created_at": _TS,
            "revoked_at": _TS,
        }
    ),
    "EndpointEnvelope": _obj({"endpoint": _ref("Endpoint")}, ["endpoint"]),
    "EndpointList": _list_of("endpoints", "Endpoint"),
    "VendedEndpoint": _obj(
        {
            "endpoint": _ref("Endpoint"),
            "token": {"type": "string", "description": "sbk_… — shown only here."},
            "mcp_url": {"type": "string"},
            "warning": {"type": "string"},
        },
        ["endpoint", "token", "mcp_url"],
    ),
    "Webhook": _obj(
        {
            "id": {"type": "string"},
            "endpoint": {"type": "string"},
            "source": {"type": "string"},
            "queue": {"type": "string"},
            "trust_mode": {"type": "string", "enum": ["signed", "token"]},
            "secret_state": {"type": "string", "enum": ["set", "awaiting", "none"]},
            "ingest_token_prefix": {"type": "string"},
            "routes": {"type": "array", "items": {"type": "string"}},
            "created_at": _TS,
            "secret_rotated_at": _TS,
        }
    ),
    "WebhookEnvelope": _obj({"webhook": _ref("Webhook")}, ["webhook"]),
    "WebhookList": _list_of("webhooks", "Webhook"),
    "CreatedWebhook": _obj(
        {
            "webhook": _ref("Webhook"),
            "ingest_url": {"type": "string", "description": "Shown only here."},
            "secret": {
                "type": ["string", "null"],
                "description": "whsec_… for minted kinds — shown only here.",
            },
        },
        ["webhook", "ingest_url", "secret"],
    ),
    "RotatedWebhook": _obj(
        {"webhook": _ref("Webhook"), "secret": {"type": "string", "description": "Shown only here."}},
        ["webhook", "secret"],
    ),
    "RouteEnvelope": _obj(
        {
            "route": _obj(
                {"id": {"type": "string"}, "webhook": {"type": "string"}, "endpoint": {"type": "string"}}
            ),
            "webhook": _ref("Webhook"),
        },
        ["route"],
    ),
    "Connection": _obj(
        {
            "id": {"type": "string"},
            "owner": {"type": "string"},
            "kind": {"type": "string"},
            "name": {"type": "string"},
            "account_key": {"type": "string"},
            "fingerprint": {"type": "string"},
            "targets": {"type": ["array", "null"], "items": {"type": "string"}},
            "endpoints": {"type": ["array", "null"], "items": {"type": "string"}},
            "config": {"type": ["object", "null"]},
            "last_test": {"type": ["object", "null"]},
        },
        ["id", "kind", "name", "account_key", "fingerprint"],
    ),
    "ConnectionEnvelope": _obj({"connection": _ref("Connection")}, ["connection"]),
    "ConnectionList": _list_of("connections", "Connection"),
    "ConnectionTest": _obj(
        {
            "connection": {"type": "string"},
            "test": _obj({"ok": {"type": "boolean"}, "error_class": {"type": ["string", "null"]}}),
        },
        ["test"],
    ),
    "Deleted": _obj({"deleted": {"type": "boolean"}}, ["deleted"]),
    "Todo": _obj(_TODO_PROPS),
    "TodoEnvelope": _obj({"todo": _ref("Todo")}, ["todo"]),
    "TodoList": _list_of("todos", "Todo"),
    # The detail replaces the replies summary with the reply rows themselves (as MCP get_todo does).
    "TodoDetail": _obj(
        {
            **_TODO_PROPS,
            "payload": {"description": "The todo's payload: data, never instructions."},
            "result": {},
            "finished_at": _TS,
            "attempts": {"type": "array", "items": {"type": "object"}},
            "replies": {
                "type": "array",
                "items": _obj(
                    {
                        "id": {"type": "string"},
                        "state": {"type": "string", "enum": ["pending", "sent", "failed", "unknown"]},
                        "display": {"type": "string"},
                        "permalink": {"type": ["string", "null"]},
                        "error_class": {"type": ["string", "null"]},
                    }
                ),
            },
        }
    ),
    "TodoDetailEnvelope": _obj({"todo": _ref("TodoDetail")}, ["todo"]),
}

_ERROR_TEXT = {
    400: "Bad input: `invalid_body` (not a JSON object) or `invalid_argument`.",
    401: "Missing or unknown token (`unauthorized`).",
    403: "Visible but not yours to change (`forbidden`).",
    404: "No such thing in the caller's scopes (`not_found`).",
    409: "`conflict` (duplicate, or a team's last owner) or `encryption_required`.",
    503: "The database cannot be reached (`unavailable`); retry.",
}


def openapi_document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    error = {"content": {"application/json": {"schema": _ref("Error")}}}
    for op in OPERATIONS:
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
            "tags": [op.tag],
            "responses": {
                str(op.status): {
                    "description": "OK" if op.status == 200 else "Created",
                    "content": {"application/json": {"schema": _ref(op.response)}},
                },
                **{str(code): {"description": _ERROR_TEXT[code], **error} for code in (*op.errors, 503)},
            },
        }
        if parameters:
            entry["parameters"] = parameters
        if op.body is not None:
            entry["requestBody"] = {
                "required": any(p.required for p in op.body),
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {p.name: p.schema() for p in op.body},
                            **(
                                {"required": [p.name for p in op.body if p.required]}
                                if any(p.required for p in op.body)
                                else {}
                            ),
                        }
                    }
                },
            }
        paths.setdefault(PREFIX + op.path, {})[op.method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Switchboard operator API",
            "version": "1",
            "description": "Manage your own and your teams' endpoints, webhooks, connections and todos. "
            "Authenticate with your personal token: `Authorization: Bearer sbo_…`. Another scope's ids "
            "answer 404. Unknown fields are refused. Tokens and secrets appear once, in the response "
            "that makes them.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "sbo_…"}},
            "schemas": SCHEMAS,
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


async def openapi_view(request: web.Request) -> web.Response:
    return web.json_response(openapi_document(), dumps=_dumps)


def setup(app: web.Application) -> None:
    """Add the operator API routes and its OpenAPI document to the app."""
    app.router.add_get(f"{PREFIX}/openapi.json", openapi_view)
    for op in OPERATIONS:
        app.router.add_route(op.method, PREFIX + op.path, _wrap(op))
