"""``switchboard endpoint``: vend (the `sbk_` token and MCP URL, printed once), list and revoke."""

from __future__ import annotations

from typing import Any

import click

from switchboard import tenancy
from switchboard.cli.group import main
from switchboard.cli.inputs import one_owner, owner_labels, owner_scope
from switchboard.cli.output import emit, json_option, table, when
from switchboard.cli.pages import page_options, with_hint
from switchboard.cli.runner import do
from switchboard.paging import page_of
from switchboard.services import Services
from switchboard.tenancy import CONNECTION_VERBS_WARNING, Owner


@main.group("endpoint")
def endpoint_group() -> None:
    """Agent endpoints: an identity, an `sbk_` token, granted queues and verbs."""


@endpoint_group.command("vend")
@click.option(
    "--name", required=True, metavar="NAME", help="A human-readable name; the slug is derived from it."
)
@click.option("--owner", "owner_handle", metavar="HANDLE", help="Owning human's handle.")
@click.option("--team", "team_slug", metavar="SLUG", help="Owning team's slug.")
@click.option(
    "--queue", "queues", metavar="Q", multiple=True, help="A granted queue (repeatable; default: default)."
)
@click.option("--reply", "grant_reply", is_flag=True, help="Grant the `reply` verb (posts publicly).")
@click.option(
    "--connection-verbs",
    is_flag=True,
    help="Grant the connection verbs. WARNING: hands the agent the owner's outbound credentials.",
)
@click.option(
    "--family",
    "families",
    metavar="FAMILY",
    multiple=True,
    help="Grant a verb family by name (repeatable; same as --reply / --connection-verbs).",
)
@click.option("--expires-in-days", type=int, metavar="N", help="Expire the token after N days (1-3650).")
@json_option
def endpoint_vend(
    name: str,
    owner_handle: str | None,
    team_slug: str | None,
    queues: tuple[str, ...],
    grant_reply: bool,
    connection_verbs: bool,
    families: tuple[str, ...],
    expires_in_days: int | None,
    as_json: bool,
) -> None:
    """Vend an endpoint; print its `sbk_` token and MCP URL (shown once)."""
    one_owner(owner_handle, team_slug, required=True)
    wanted = list(families)
    if grant_reply:
        wanted.append("reply")
    if connection_verbs:
        wanted.append("connections")
    wanted = list(dict.fromkeys(wanted))

    async def go(services: Services) -> tuple[dict[str, Any], str, str]:
        owner = await tenancy.resolve_owner(services.db, human=owner_handle, team=team_slug)
        endpoint, token = await tenancy.vend_endpoint(
            services.db,
            name=name,
            owner=owner,
            queues=list(queues) or None,
            families=wanted,
            expires_in_days=expires_in_days,
            max_per_owner=services.settings.max_endpoints_per_owner,
        )
        label = f"human:{owner_handle}" if owner_handle else f"team:{team_slug}"
        return tenancy.endpoint_view(endpoint, label), token, services.settings.base_url

    view, token, base_url = do(go)
    mcp_url = f"{base_url.rstrip('/')}/mcp"
    flagged = "connections" in view["families"]
    data: dict[str, Any] = {"endpoint": view, "token": token, "mcp_url": mcp_url}
    if flagged:
        data["warning"] = CONNECTION_VERBS_WARNING

    def text_out() -> str:
        lines = [
            f"endpoint {view['slug']} vended for {view['owner']} ({view['id']})",
            f"queues: {', '.join(view['queues'])}",
            f"verb families: {', '.join(view['families'])}",
            f"MCP URL: {mcp_url}",
            f"token (shown once, store it now): {token}",
        ]
        if flagged:
            lines.append(f"WARNING: {CONNECTION_VERBS_WARNING}")
        return "\n".join(lines)

    emit(as_json, data, text_out)


@endpoint_group.command("list")
@click.option("--owner", "owner_handle", metavar="HANDLE", help="Only this human's endpoints.")
@click.option("--team", "team_slug", metavar="SLUG", help="Only this team's endpoints.")
@page_options()
@json_option
def endpoint_list(
    owner_handle: str | None,
    team_slug: str | None,
    before: str | None,
    after: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List endpoints, oldest first (tokens only as their display prefix)."""
    one_owner(owner_handle, team_slug, required=False)

    async def go(services: Services) -> list[dict[str, Any]]:
        scope = await owner_scope(services, owner_handle, team_slug)
        endpoints = await tenancy.list_endpoints(services.db, scope)
        labels = await owner_labels(services.db, [Owner.of(e) for e in endpoints])
        return [tenancy.endpoint_view(e, labels.get(Owner.of(e).id, "?")) for e in endpoints]

    page = page_of(do(go), lambda e: e["id"], before=before, after=after, limit=limit)
    rows = page.rows
    emit(
        as_json,
        page.answer("endpoints", rows),
        lambda: with_hint(
            table(
                [
                    [
                        e["slug"],
                        e["owner"],
                        e["state"],
                        ",".join(e["queues"]),
                        ",".join(e["families"]),
                        e["token_prefix"],
                        f"expires {when(e['expires_at'])}" if e["expires_at"] else "",
                    ]
                    for e in rows
                ],
                "no endpoints",
            ),
            page,
        ),
    )


@endpoint_group.command("revoke")
@click.argument("slug")
@json_option
def endpoint_revoke(slug: str, as_json: bool) -> None:
    """Revoke an endpoint: its token dies at once and its open todos are dead-lettered."""

    async def go(services: Services) -> dict[str, Any]:
        return tenancy.endpoint_view(await tenancy.revoke_endpoint(services.db, slug))

    view = do(go)
    emit(as_json, {"endpoint": view}, f"endpoint {view['slug']} revoked")
