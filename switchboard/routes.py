"""Routes seen from both ends: listing them, and removing one from either side.

A route fans a webhook's deliveries out to another endpoint; across owner scopes it was made with
both scopes' consent (``tenancy.add_route``). Either side may withdraw that consent: the
administrators of the webhook's scope, or those of the target endpoint's scope. The target side
names the route by its id (it may not be able to see the webhook at all) and learns nothing about
the other side from doing so: not the webhook's id, endpoint, owner or source, in an answer or in
an error. Routes into a scope are listed for that scope the same way (``route_view`` with
``show_source=False``).

Removing takes a human (the API and the web UI) or none (the CLI: the instance operator, trusted
with every scope). For a human, a route they can see neither end of is ``not_found`` with the same
message whether or not it exists; one they can see but administer neither end of is ``forbidden``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from switchboard.config_changes import changing
from switchboard.db import Database
from switchboard.errors import SwitchboardError, not_found
from switchboard.models import Endpoint, Route, Webhook
from switchboard.owners import Owner, can_manage, can_see

_Source = aliased(Endpoint, name="source")
_Target = aliased(Endpoint, name="target")


@dataclass(frozen=True)
class RouteRow:
    route: Route
    webhook: Webhook
    source: Endpoint  # the webhook's own endpoint
    target: Endpoint


def _query(*conditions: ColumnElement[bool]) -> Any:
    return (
        select(Route, Webhook, _Source, _Target)
        .join(Webhook, Webhook.id == Route.webhook_id)
        .join(_Source, _Source.id == Webhook.endpoint_id)
        .join(_Target, _Target.id == Route.endpoint_id)
        .where(*conditions)
        .order_by(Route.created_at, Route.id)
    )


async def _rows(s: AsyncSession, *conditions: ColumnElement[bool]) -> list[RouteRow]:
    return [RouteRow(*row) for row in (await s.execute(_query(*conditions))).all()]


def _in_scopes(endpoint: Any, owners: list[Owner]) -> ColumnElement[bool]:
    human_ids = [o.human_id for o in owners if o.human_id]
    team_ids = [o.team_id for o in owners if o.team_id]
    return or_(endpoint.owner_human_id.in_(human_ids), endpoint.owner_team_id.in_(team_ids))


async def list_routes(
    db: Database,
    *,
    into: list[Owner] | None = None,
    webhook_id: str | None = None,
    endpoint_slug: str | None = None,
) -> list[RouteRow]:
    """Routes, oldest first: into endpoints of the ``into`` scopes, from one webhook, into one
    endpoint (any combination; none lists every route, for the operator)."""
    conditions: list[ColumnElement[bool]] = []
    if into is not None:
        conditions.append(_in_scopes(_Target, into))
    if webhook_id is not None:
        conditions.append(Route.webhook_id == webhook_id)
    if endpoint_slug is not None:
        conditions.append(_Target.slug == endpoint_slug)
    async with db.read() as s:
        return await _rows(s, *conditions)


async def route_by_id(db: Database, route_id: str) -> RouteRow | None:
    """One route by its id, with both ends (the caller decides who may see it)."""
    async with db.read() as s:
        rows = await _rows(s, Route.id == route_id)
    return rows[0] if rows else None


def route_view(row: RouteRow, *, show_source: bool) -> dict[str, Any]:
    """A route as the surfaces show it. Without ``show_source`` (the viewer cannot see the webhook's
    scope) nothing of the webhook's side is in it: only what the target side already has — the
    route, its own endpoint, and the queue its todos arrive in."""
    view: dict[str, Any] = {
        "id": row.route.id,
        "endpoint": row.target.slug,
        "queue": row.webhook.queue,
        "created_at": row.route.created_at,
        "webhook": row.webhook.id if show_source else None,
    }
    if show_source:
        view["source"] = row.webhook.source
        view["webhook_endpoint"] = row.source.slug
    return view


async def _authorize(s: AsyncSession, row: RouteRow | None, human_id: str, *, by_id: bool) -> RouteRow | None:
    """The row if this human may remove it; None if, to them, it does not exist; ``forbidden`` if
    they can see it but administer neither end."""
    if row is None:
        return None
    source, target = Owner.of(row.source), Owner.of(row.target)
    manages = await can_manage(s, human_id, source) or await can_manage(s, human_id, target)
    # By id a route is visible from either end; by webhook id only to those who can see the webhook,
    # or who administer the target (they may withdraw, and their own endpoint names the route).
    visible = manages or await can_see(s, human_id, source) or (by_id and await can_see(s, human_id, target))
    if not visible:
        return None
    if not manages:
        raise SwitchboardError("forbidden", "only administrators of either end may remove a route")
    return row


async def remove_route(
    db: Database, webhook_id: str, endpoint_slug: str, *, human_id: str | None = None
) -> RouteRow:
    """Remove the route from ``webhook_id`` to the endpoint ``endpoint_slug``."""
    async with changing(db) as s:
        if human_id is None and await s.get(Webhook, webhook_id) is None:
            raise not_found(f"webhook {webhook_id!r}")
        rows = await _rows(s, and_(Route.webhook_id == webhook_id, _Target.slug == endpoint_slug))
        row = rows[0] if rows else None
        if human_id is not None:
            row = await _authorize(s, row, human_id, by_id=False)
        if row is None:
            raise not_found(f"route to {endpoint_slug!r} on webhook {webhook_id!r}")
        await s.delete(row.route)
    return row


async def remove_route_by_id(db: Database, route_id: str, *, human_id: str | None = None) -> RouteRow:
    """Remove a route by its id: how the target side names it."""
    async with changing(db) as s:
        rows = await _rows(s, Route.id == route_id)
        row = rows[0] if rows else None
        if human_id is not None:
            row = await _authorize(s, row, human_id, by_id=True)
        if row is None:
            raise not_found(f"route {route_id!r}")
        await s.delete(row.route)
    return row
