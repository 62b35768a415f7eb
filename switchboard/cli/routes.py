"""``switchboard webhook route``: fan a webhook's deliveries out to more endpoints; list routes with their
ids and remove one by its id (the operator sees and may change both ends of every route)."""

from __future__ import annotations

from typing import Any

import click

from switchboard import routes, tenancy
from switchboard.cli.output import emit, json_option, table, when
from switchboard.cli.pages import page_options, with_hint
from switchboard.cli.runner import do
from switchboard.cli.webhooks import webhook_group
from switchboard.paging import page_of
from switchboard.services import Services


@webhook_group.group("route")
def webhook_route_group() -> None:
    """Fan a webhook's deliveries out to more endpoints (one todo per target)."""


@webhook_route_group.command("add")
@click.argument("webhook_id")
@click.option(
    "--endpoint", "endpoint_slug", metavar="SLUG", required=True, help="The endpoint to add as a target."
)
@json_option
def webhook_route_add(webhook_id: str, endpoint_slug: str, as_json: bool) -> None:
    """Route WEBHOOK_ID's deliveries to another endpoint too (the operator may cross scopes)."""

    async def go(services: Services) -> str:
        return (await tenancy.add_route(services.db, webhook_id, endpoint_slug)).id

    route_id = do(go)
    emit(
        as_json,
        {"route": {"id": route_id, "webhook": webhook_id, "endpoint": endpoint_slug}},
        f"webhook {webhook_id} now also delivers to {endpoint_slug}",
    )


@webhook_route_group.command("remove")
@click.argument("webhook_id", required=False)
@click.option("--endpoint", "endpoint_slug", metavar="SLUG", help="The target endpoint to remove.")
@click.option(
    "--route", "route_id", metavar="ROUTE_ID", help="Name the route by its id instead (`webhook route list`)."
)
@json_option
def webhook_route_remove(
    webhook_id: str | None, endpoint_slug: str | None, route_id: str | None, as_json: bool
) -> None:
    """Stop routing WEBHOOK_ID's deliveries to an endpoint: `WEBHOOK_ID --endpoint SLUG`, or
    `--route ROUTE_ID` alone."""
    if route_id is not None and (webhook_id is not None or endpoint_slug is not None):
        raise click.UsageError("give either --route ROUTE_ID or WEBHOOK_ID --endpoint SLUG, not both")
    if route_id is None and (webhook_id is None or endpoint_slug is None):
        raise click.UsageError("name the route: WEBHOOK_ID --endpoint SLUG, or --route ROUTE_ID")

    async def go(services: Services) -> routes.RouteRow:
        if route_id is not None:
            return await routes.remove_route_by_id(services.db, route_id)
        return await routes.remove_route(services.db, webhook_id or "", endpoint_slug or "")

    row = do(go)
    emit(
        as_json,
        {
            "route": {"id": row.route.id, "webhook": row.webhook.id, "endpoint": row.target.slug},
            "removed": True,
        },
        f"webhook {row.webhook.id} no longer delivers to {row.target.slug}",
    )


@webhook_route_group.command("list")
@click.option("--webhook", "webhook_id", metavar="ID", help="Only this webhook's routes.")
@click.option("--endpoint", "endpoint_slug", metavar="SLUG", help="Only routes into this endpoint.")
@page_options()
@json_option
def webhook_route_list(
    webhook_id: str | None,
    endpoint_slug: str | None,
    before: str | None,
    after: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List routes with their ids, oldest first (every scope: the operator sees both ends)."""

    async def go(services: Services) -> list[dict[str, Any]]:
        # A filter names a thing: one that does not exist (a typo) is not_found, as in `webhook
        # list --endpoint` and `quarantine list --webhook`, not an empty list that reads as "none".
        if webhook_id is not None:
            await tenancy.get_webhook(services.db, webhook_id)
        if endpoint_slug is not None:
            await tenancy.get_endpoint(services.db, endpoint_slug)
        rows = await routes.list_routes(services.db, webhook_id=webhook_id, endpoint_slug=endpoint_slug)
        return [routes.route_view(row, show_source=True) for row in rows]

    page = page_of(do(go), lambda v: v["id"], before=before, after=after, limit=limit)
    views = page.rows
    emit(
        as_json,
        page.answer("routes", views),
        lambda: with_hint(
            table(
                [
                    [
                        v["id"],
                        v["webhook"],
                        f"{v['webhook_endpoint']} -> {v['endpoint']}",
                        v["queue"],
                        when(v["created_at"]),
                    ]
                    for v in views
                ],
                "no routes",
            ),
            page,
        ),
    )
