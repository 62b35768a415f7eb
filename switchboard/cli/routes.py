"""``switchboard webhook route``: fan a webhook's deliveries out to more endpoints."""

from __future__ import annotations

import click

from switchboard import tenancy
from switchboard.cli.output import emit, json_option
from switchboard.cli.runner import do
from switchboard.cli.webhooks import webhook_group
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
@click.argument("webhook_id")
@click.option(
    "--endpoint", "endpoint_slug", metavar="SLUG", required=True, help="The target endpoint to remove."
)
@json_option
def webhook_route_remove(webhook_id: str, endpoint_slug: str, as_json: bool) -> None:
    """Stop routing WEBHOOK_ID's deliveries to an endpoint."""

    async def go(services: Services) -> None:
        await tenancy.remove_route(services.db, webhook_id, endpoint_slug)

    do(go)
    emit(
        as_json,
        {"route": {"webhook": webhook_id, "endpoint": endpoint_slug}, "removed": True},
        f"webhook {webhook_id} no longer delivers to {endpoint_slug}",
    )
