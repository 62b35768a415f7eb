"""Endpoints: an agent's identity, what an owner scope vends. An endpoint holds an ``sbk_`` token
(shown once, kept as its hash), the queues it drains, the verbs it may call (by family), a default
lease and an optional expiry. Vending is bounded per owner; revoking kills the token and
dead-letters the endpoint's open todos.

Every write is one transaction through ``config_changes.changing``, so ingest's per-process cache of
webhooks and their targets hears of it. ``tenancy`` re-exports every name here (``tenancy.X`` keeps
working for every caller).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard import bearers
from switchboard.config_changes import changing
from switchboard.db import Database, utcnow
from switchboard.errors import SwitchboardError, conflict, invalid, not_found
from switchboard.ids import new_id, new_token, token_display, token_hash
from switchboard.models import Attempt, Endpoint, Human, Team, Todo
from switchboard.owners import Owner, check_handle

QUEUE_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
RESERVED_QUEUES = frozenset({"quarantine"})

VERB_FAMILIES: dict[str, tuple[str, ...]] = {
    "basics": ("list_todos", "get_todo", "claim", "claim_next", "heartbeat", "complete", "fail", "release"),
    "reply": ("reply",),
    # Hands the agent the owner's outbound credentials (it still never sees a secret).
    "connections": ("list_connections", "create_connection", "rotate_connection", "delete_connection"),
}
ALL_VERBS = tuple(v for verbs in VERB_FAMILIES.values() for v in verbs)
MAX_LEASE_SECONDS = 24 * 3600
# The default of SWITCHBOARD_MAX_ENDPOINTS_PER_OWNER (the surfaces pass the configured value).
MAX_ENDPOINTS_PER_OWNER = 100


def check_queue(value: str) -> str:
    if not isinstance(value, str) or not QUEUE_RE.fullmatch(value):
        raise invalid(f"queue {value!r} must match [a-z0-9][a-z0-9._-]{{0,62}}")
    if value in RESERVED_QUEUES:
        raise invalid(f"queue {value!r} is reserved")
    return value


def verbs_for(families: list[str]) -> list[str]:
    """The verbs of the named families (``basics`` always included)."""
    verbs: list[str] = []
    for family in ["basics", *families]:
        if family not in VERB_FAMILIES:
            raise invalid(f"unknown verb family {family!r} (known: {', '.join(VERB_FAMILIES)})")
        verbs += [v for v in VERB_FAMILIES[family] if v not in verbs]
    return verbs


def families_of(verbs: list[str]) -> list[str]:
    return [f for f, members in VERB_FAMILIES.items() if set(members) <= set(verbs)]


def scope_filter(scopes: list[Owner]) -> ColumnElement[bool]:
    """SQL filter on ``Endpoint``: owned by one of ``scopes`` (what a human may see)."""
    human_ids = [o.human_id for o in scopes if o.human_id]
    team_ids = [o.team_id for o in scopes if o.team_id]
    return or_(Endpoint.owner_human_id.in_(human_ids), Endpoint.owner_team_id.in_(team_ids))


async def vend_endpoint(
    db: Database,
    *,
    name: str,
    owner: Owner,
    queues: list[str] | None = None,
    families: list[str] | None = None,
    expires_in_days: int | None = None,
    default_lease_seconds: int = 300,
    max_per_owner: int = MAX_ENDPOINTS_PER_OWNER,
) -> tuple[Endpoint, str]:
    """Create an endpoint; returns it and its ``sbk_`` token, which is never shown again.

    An owner scope holds at most ``max_per_owner`` live endpoints (revoked and expired ones do not
    count): each endpoint may hold MCP sessions, so an unbounded count is an unbounded share of
    the server. Over the quota is a ``conflict``, checked under a lock on the owner's row so that
    concurrent vends cannot both take the last place.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise invalid("name must be 1 to 200 characters")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:63]
    check_handle(slug, "endpoint slug (from the name)")
    queues = list(dict.fromkeys(queues or ["default"]))
    for q in queues:
        check_queue(q)
    verbs = verbs_for(families or [])
    if expires_in_days is not None and not 1 <= expires_in_days <= 3650:
        raise invalid("expires-in-days must be between 1 and 3650")
    if not 1 <= default_lease_seconds <= MAX_LEASE_SECONDS:
        raise invalid(f"default lease must be between 1 and {MAX_LEASE_SECONDS} seconds")
    token = new_token("sbk")
    now = utcnow()
    endpoint = Endpoint(
        id=new_id("ep"),
        slug=slug,
        name=name.strip(),
        token_hash=token_hash(token),
        token_display=token_display(token),
        queues=queues,
        verbs=verbs,
        state="active",
        expires_at=now + timedelta(days=expires_in_days) if expires_in_days else None,
        default_lease_seconds=default_lease_seconds,
        created_at=now,
        **owner.columns(),
    )
    try:
        async with changing(db) as s:
            await _check_endpoint_quota(s, owner, max_per_owner, now)
            s.add(endpoint)
    except IntegrityError:
        raise conflict(f"endpoint {slug!r} already exists") from None
    return endpoint, token


async def _check_endpoint_quota(s: AsyncSession, owner: Owner, limit: int, now: datetime) -> None:
    # The owner's row, locked (PostgreSQL; SQLite's write transaction already excludes writers).
    table: type[Human] | type[Team] = Human if owner.human_id else Team
    if await s.scalar(select(table.id).where(table.id == owner.id).with_for_update()) is None:
        raise not_found("owner")
    column = Endpoint.owner_human_id if owner.human_id else Endpoint.owner_team_id
    live = await s.scalar(
        select(func.count(Endpoint.id)).where(
            column == owner.id,
            Endpoint.state == "active",
            or_(Endpoint.expires_at.is_(None), Endpoint.expires_at > now),
        )
    )
    if (live or 0) >= limit:
        raise SwitchboardError(
            "conflict",
            f"this owner holds {live} live endpoints and may hold at most {limit} "
            "(SWITCHBOARD_MAX_ENDPOINTS_PER_OWNER); revoke one first",
            quota="endpoints_per_owner",
            limit=limit,
        )


def endpoint_is_live(endpoint: Endpoint, now: datetime | None = None) -> bool:
    now = now or utcnow()
    return endpoint.state == "active" and (endpoint.expires_at is None or endpoint.expires_at > now)


async def endpoint_by_token(db: Database, token: str) -> Endpoint | None:
    """The live endpoint a bearer token names; None for unknown, revoked or expired."""
    if not token.startswith("sbk_"):
        return None
    endpoint = await bearers.endpoint_by_hash(db, token_hash(token))
    return endpoint if endpoint is not None and endpoint_is_live(endpoint) else None


async def get_endpoint(db: Database, slug: str) -> Endpoint:
    async with db.read() as s:
        endpoint = await s.scalar(select(Endpoint).where(Endpoint.slug == slug))
    if endpoint is None:
        raise not_found(f"endpoint {slug!r}")
    return endpoint


async def list_endpoints(db: Database, owner: Owner | None = None) -> list[Endpoint]:
    async with db.read() as s:
        query = select(Endpoint).order_by(Endpoint.created_at)
        if owner is not None:
            query = (
                query.where(Endpoint.owner_human_id == owner.human_id)
                if owner.human_id
                else query.where(Endpoint.owner_team_id == owner.team_id)
            )
        return list((await s.scalars(query)).all())


async def revoke_endpoint(db: Database, slug: str) -> Endpoint:
    """Kill the token and dead-letter the endpoint's open todos (the server closes its sessions)."""
    now = utcnow()
    async with changing(db) as s:
        endpoint = await s.scalar(select(Endpoint).where(Endpoint.slug == slug))
        if endpoint is None:
            raise not_found(f"endpoint {slug!r}")
        if endpoint.state == "revoked":
            return endpoint
        endpoint.state, endpoint.revoked_at = "revoked", now
        await s.execute(
            update(Todo)
            .where(
                Todo.endpoint_id == endpoint.id,
                Todo.state.in_(("pending", "claimed", "failed")),
                Todo.dead_letter.is_(False),
            )
            .values(
                state="failed",
                dead_letter=True,
                dead_reason="endpoint_revoked",
                next_retry_at=None,
                lease_expires_at=None,
                lease_token_hash=None,
                next_ring_at=None,
                updated_at=now,
            )
        )
        # A claimed todo's attempt ends with it: left open, it showed as still running forever.
        # After the dead-lettering, not before: on PostgreSQL that statement waits for a claim in
        # flight and then takes it in, and only a statement begun after it sees that claim's
        # attempt (one begun before, with an older snapshot, left it open).
        await s.execute(
            update(Attempt)
            .where(
                Attempt.todo_id.in_(
                    select(Todo.id).where(
                        Todo.endpoint_id == endpoint.id, Todo.dead_reason == "endpoint_revoked"
                    )
                ),
                Attempt.ended_at.is_(None),
            )
            .values(outcome="revoked", ended_at=now)
        )
    return endpoint


def endpoint_view(endpoint: Endpoint, owner: str | None = None) -> dict[str, Any]:
    """An endpoint as every surface shows it: the token only as its display prefix."""
    return {
        "id": endpoint.id,
        "slug": endpoint.slug,
        "name": endpoint.name,
        **({"owner": owner} if owner else {}),
        "token_prefix": endpoint.token_display,
        "queues": endpoint.queues,
        "verbs": endpoint.verbs,
        "families": families_of(endpoint.verbs),
        "state": endpoint.state,
        "expires_at": endpoint.expires_at,
        "default_lease_seconds": endpoint.default_lease_seconds,
        "created_at": endpoint.created_at,
        "revoked_at": endpoint.revoked_at,
    }


# Shown when an endpoint is vended with the ``connections`` verb family.
CONNECTION_VERBS_WARNING = (
    "this endpoint holds the connection verbs: they hand the agent the owner's outbound "
    "credentials (it can create, rotate and delete connections; it never sees a secret)"
)
