"""``switchboard connection``: an owner's outbound credentials, written from stdin, never shown."""

from __future__ import annotations

from typing import Any

import click

from switchboard import connections, tenancy
from switchboard.cli.group import main
from switchboard.cli.inputs import one_owner, owner_scope, read_secret
from switchboard.cli.output import emit, json_option, table
from switchboard.cli.pages import page_options, with_hint
from switchboard.cli.runner import do
from switchboard.paging import page_of
from switchboard.services import Services


def _connection_line(c: dict[str, Any]) -> list[str]:
    last = c.get("last_test") or {}
    return [
        str(c.get("id", "")),
        str(c.get("owner", "")),
        str(c.get("kind", "")),
        str(c.get("name", "")),
        str(c.get("account_key", "")),
        str(c.get("fingerprint", "")),
        ("test:ok" if last.get("ok") else f"test:{last.get('error_class') or 'failed'}") if last else "",
    ]


@main.group("connection")
def connection_group() -> None:
    """An owner's outbound credentials (write-only; shown as a fingerprint)."""


@connection_group.command("add")
@click.option("--owner", "owner_handle", metavar="HANDLE", help="Owning human's handle.")
@click.option("--team", "team_slug", metavar="SLUG", help="Owning team's slug.")
@click.option("--kind", required=True, metavar="K", help="Connection kind (github, gitea, slack, cairn, …).")
@click.option("--name", required=True, metavar="N", help="A name, unique in the owner scope.")
@click.option(
    "--account-key",
    required=True,
    metavar="A",
    help="Forge host, Slack team id, or https base URL (with its path, for an instance under one).",
)
@click.option("--target", "targets", metavar="GLOB", multiple=True, help="Allowlist glob (repeatable).")
@click.option(
    "--endpoint",
    "endpoints",
    metavar="SLUG",
    multiple=True,
    help="Endpoint slug allowed to use it (repeatable).",
)
@json_option
def connection_add(
    owner_handle: str | None,
    team_slug: str | None,
    kind: str,
    name: str,
    account_key: str,
    targets: tuple[str, ...],
    endpoints: tuple[str, ...],
    as_json: bool,
) -> None:
    """Add a connection; the secret is read from stdin or a hidden prompt, never an argument."""
    one_owner(owner_handle, team_slug, required=True)
    secret = read_secret("Connection secret")

    async def go(services: Services) -> dict[str, Any]:
        owner = await tenancy.resolve_owner(services.db, human=owner_handle, team=team_slug)
        return await connections.create_connection(
            services,
            owner,
            kind=kind,
            name=name,
            account_key=account_key,
            secret=secret,
            targets=list(targets) or None,
            endpoints=list(endpoints) or None,
        )

    row = do(go)
    emit(
        as_json,
        {"connection": row},
        f"connection {row.get('name')} ({row.get('id')}) added; fingerprint {row.get('fingerprint')}",
    )


@connection_group.command("list")
@click.option("--owner", "owner_handle", metavar="HANDLE", help="Only this human's connections.")
@click.option("--team", "team_slug", metavar="SLUG", help="Only this team's connections.")
@page_options()
@json_option
def connection_list(
    owner_handle: str | None,
    team_slug: str | None,
    before: str | None,
    after: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List connections, oldest first (fingerprints only, never a secret)."""
    one_owner(owner_handle, team_slug, required=False)

    async def go(services: Services) -> list[dict[str, Any]]:
        scope = await owner_scope(services, owner_handle, team_slug)
        return await connections.list_connections(services, scope)

    page = page_of(do(go), lambda c: c["id"], before=before, after=after, limit=limit)
    emit(
        as_json,
        page.answer("connections", page.rows),
        lambda: with_hint(table([_connection_line(c) for c in page.rows], "no connections"), page),
    )


@connection_group.command("rotate")
@click.argument("connection_id")
@json_option
def connection_rotate(connection_id: str, as_json: bool) -> None:
    """Replace a connection's secret (read from stdin or a hidden prompt)."""
    secret = read_secret("New connection secret")

    async def go(services: Services) -> dict[str, Any]:
        return await connections.rotate_connection(services, None, connection_id, secret)

    row = do(go)
    emit(
        as_json,
        {"connection": row},
        f"connection {row.get('name')} ({connection_id}) rotated; fingerprint {row.get('fingerprint')}",
    )


@connection_group.command("test")
@click.argument("connection_id")
@json_option
def connection_test(connection_id: str, as_json: bool) -> None:
    """Make one harmless authenticated read with the connection and report ok or an error class."""

    async def go(services: Services) -> dict[str, Any]:
        return await connections.test_connection(services, None, connection_id)

    result = do(go)

    def text_out() -> str:
        if result.get("ok"):
            return f"connection {connection_id}: ok"
        detail = f" ({result['detail']})" if result.get("detail") else ""
        return f"connection {connection_id}: failed: {result.get('error_class') or 'error'}{detail}"

    emit(as_json, {"connection": connection_id, "test": result}, text_out)
    if not result.get("ok"):
        raise SystemExit(1)


@connection_group.command("delete")
@click.argument("connection_id")
@json_option
def connection_delete(connection_id: str, as_json: bool) -> None:
    """Delete a connection (its encrypted secret goes with it)."""

    async def go(services: Services) -> None:
        await connections.delete_connection(services, None, connection_id)

    do(go)
    emit(as_json, {"connection": connection_id, "deleted": True}, f"connection {connection_id} deleted")
