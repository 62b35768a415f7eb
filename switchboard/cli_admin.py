"""Admin commands on the configured database: humans, teams, endpoints, webhooks, connections, todos.

The CLI is the instance operator's tool: it acts on any owner scope (``owner=None`` for the
connection functions, no consenting human for routes). Tokens and secrets are printed once, at the
moment they are made, and never again; secrets going in are read from stdin or a hidden prompt,
never from an argument (arguments end up in shell history and ``ps``).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from sqlalchemy import select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from switchboard import outbound, tenancy, todos
from switchboard.cli import emit, fail, json_option, main, run, settings_or_exit
from switchboard.db import Database
from switchboard.errors import SwitchboardError, invalid
from switchboard.models import Human, Team
from switchboard.plugins import load as load_providers
from switchboard.services import Services
from switchboard.settings import Settings
from switchboard.tenancy import Owner
from switchboard.vault import Vault

T = TypeVar("T")

CONNECTION_VERBS_WARNING = (
    "this endpoint holds the connection verbs: they hand the agent the owner's outbound "
    "credentials (it can create, rotate and delete connections; it never sees a secret)"
)
MAX_SECRET_CHARS = 16 * 1024


# ---------------------------------------------------------------------------------------------
# Plumbing


def _check_database_exists(settings: Settings) -> None:
    """Refuse to run against a SQLite file that is not there (opening it would create an empty one)."""
    url = make_url(settings.database_url)
    if url.get_backend_name() != "sqlite":
        return
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return
    if not Path(database).is_file():
        raise SwitchboardError(
            "unavailable", f"no database file at {database} (run `switchboard db upgrade` to create it)"
        )


class _NoSchema(Exception):
    """The database exists but has not been migrated."""


def _reason(exc: DBAPIError) -> str:
    """A short, secret-free reason (driver messages name databases and users, never passwords)."""
    orig = exc.orig
    name = type(getattr(orig, "__cause__", None) or orig).__name__ if orig is not None else "error"
    detail = str(orig).split(": ", 1)[-1].splitlines()[0][:200] if orig is not None else ""
    return f"{name}: {detail}" if detail else name


async def _check_migrated(db: Database) -> None:
    try:
        async with db.engine.connect() as conn:
            try:
                await conn.execute(text("SELECT version_num FROM alembic_version"))
            except DBAPIError:
                raise _NoSchema from None
    except _NoSchema:
        raise SwitchboardError(
            "unavailable", "the database has no Switchboard schema (run `switchboard db upgrade`)"
        ) from None
    except DBAPIError as exc:
        raise SwitchboardError("unavailable", f"cannot connect to the database ({_reason(exc)})") from None


@asynccontextmanager
async def _open(settings: Settings, *, warn_plaintext: bool) -> AsyncIterator[Services]:
    """Services on the configured database. ``warn_plaintext``: the command stores a webhook signing
    secret, so say (once, on stderr) when it will be stored in plaintext for want of a key."""
    _check_database_exists(settings)
    services = Services(
        settings=settings,
        db=Database(settings.database_url),
        vault=Vault(settings.encryption_key),
        providers=load_providers(),
    )
    try:
        await _check_migrated(services.db)
        if warn_plaintext and not services.vault.has_key:
            click.echo(
                "warning: no SWITCHBOARD_SECRET_ENCRYPTION_KEY: webhook signing secrets are stored in "
                "plaintext (run `switchboard keygen` and configure one)",
                err=True,
            )
        yield services
    finally:
        # `connection test` dials through the guarded client; close it before the loop ends.
        await outbound.close_client(services)
        await services.db.dispose()


def _do(fn: Callable[[Services], Awaitable[T]], *, warn_plaintext: bool = False) -> T:
    """Run one command's work against the configured database; failures become one-line errors."""
    settings = settings_or_exit()

    async def go() -> T:
        async with _open(settings, warn_plaintext=warn_plaintext) as services:
            try:
                return await fn(services)
            except (SwitchboardError, DBAPIError, OSError):
                raise  # `run` turns these into their one-line errors
            except Exception as exc:
                # A bug, not the operator's mistake: still one line (the type only, since a message
                # could quote a secret), with the traceback in the log at DEBUG.
                logging.getLogger("switchboard.cli").debug("unexpected error", exc_info=True)
                raise SwitchboardError(
                    "internal", f"unexpected {type(exc).__name__}; rerun with SWITCHBOARD_LOG_LEVEL=DEBUG"
                ) from None

    if settings.log_level == "DEBUG":
        # Our own loggers only: the driver's would print SQL.
        own = logging.getLogger("switchboard")
        own.addHandler(logging.StreamHandler())
        own.setLevel(logging.DEBUG)
    return run(go())


def _read_secret(prompt: str) -> str:
    """A secret from stdin (piped) or a hidden prompt (a terminal); never from an argument."""
    stdin = sys.stdin
    if stdin is None:
        fail("invalid_argument: no secret given (stdin is closed)")
    if stdin.isatty():
        value = click.prompt(prompt, hide_input=True, default="", show_default=False)
    else:
        value = stdin.read(MAX_SECRET_CHARS + 1)
    value = value.strip()
    if not value:
        fail("invalid_argument: no secret given (pipe it on stdin, or type it at the prompt)")
    if len(value) > MAX_SECRET_CHARS:
        fail(f"invalid_argument: the secret is longer than {MAX_SECRET_CHARS} characters")
    return value


def _one_owner(owner: str | None, team: str | None, *, required: bool) -> None:
    if owner is not None and team is not None:
        fail("invalid_argument: give --owner or --team, not both")
    if required and owner is None and team is None:
        fail("invalid_argument: give --owner HANDLE or --team SLUG")


async def _scope(services: Services, owner: str | None, team: str | None) -> Owner | None:
    if owner is None and team is None:
        return None
    return await tenancy.resolve_owner(services.db, human=owner, team=team)


async def _owner_labels(db: Database, owners: list[Owner]) -> dict[str, str]:
    """``human:handle`` / ``team:slug`` for each scope id, in two queries."""
    human_ids = {o.human_id for o in owners if o.human_id}
    team_ids = {o.team_id for o in owners if o.team_id}
    labels: dict[str, str] = {}
    async with db.read() as s:
        if human_ids:
            for hid, handle in await s.execute(select(Human.id, Human.handle).where(Human.id.in_(human_ids))):
                labels[hid] = f"human:{handle}"
        if team_ids:
            for tid, slug in await s.execute(select(Team.id, Team.slug).where(Team.id.in_(team_ids))):
                labels[tid] = f"team:{slug}"
    return labels


def _table(rows: list[list[str]], empty: str) -> str:
    if not rows:
        return empty
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _when(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return todos.rfc3339(value) or "-"


# ---------------------------------------------------------------------------------------------
# Humans


@main.group("human")
def human_group() -> None:
    """People: each gets a personal `sbo_` token for the operator API and the web UI."""


@human_group.command("add")
@click.argument("handle")
@click.option("--email", metavar="E", help="Contact address (optional).")
@json_option
def human_add(handle: str, email: str | None, as_json: bool) -> None:
    """Create a human and print their `sbo_` token (shown once)."""

    async def go(services: Services) -> tuple[Human, str]:
        return await tenancy.add_human(services.db, handle, email)

    human, token = _do(go)
    emit(
        as_json,
        {"human": _human_view(human), "token": token},
        f"human {human.handle} created ({human.id})\ntoken (shown once, store it now): {token}",
    )


def _human_view(human: Human) -> dict[str, Any]:
    return {
        "id": human.id,
        "handle": human.handle,
        "email": human.email,
        "token_prefix": human.token_display,
        "created_at": human.created_at,
    }


@human_group.command("list")
@json_option
def human_list(as_json: bool) -> None:
    """List humans (tokens only as their display prefix)."""

    async def go(services: Services) -> list[Human]:
        return await tenancy.list_humans(services.db)

    humans = [_human_view(h) for h in _do(go)]
    emit(
        as_json,
        {"humans": humans},
        lambda: _table(
            [[h["handle"], h["email"] or "-", h["token_prefix"], _when(h["created_at"])] for h in humans],
            "no humans",
        ),
    )


# ---------------------------------------------------------------------------------------------
# Teams


@main.group("team")
def team_group() -> None:
    """Teams: a slug and members with roles owner, admin, member."""


@team_group.command("add")
@click.argument("slug")
@click.option(
    "--owner", "owner_handle", metavar="HANDLE", required=True, help="Handle of the team's first owner."
)
@json_option
def team_add(slug: str, owner_handle: str, as_json: bool) -> None:
    """Create a team with HANDLE as its owner."""

    async def go(services: Services) -> dict[str, Any]:
        team = await tenancy.add_team(services.db, slug, owner_handle)
        return {
            "id": team.id,
            "slug": team.slug,
            "created_at": team.created_at,
            "members": [{"handle": owner_handle, "role": "owner"}],
        }

    team = _do(go)
    emit(as_json, {"team": team}, f"team {team['slug']} created ({team['id']}), owner {owner_handle}")


@team_group.command("list")
@json_option
def team_list(as_json: bool) -> None:
    """List teams and their members."""

    async def go(services: Services) -> list[dict[str, Any]]:
        return await tenancy.list_teams(services.db)

    teams = _do(go)
    emit(
        as_json,
        {"teams": teams},
        lambda: _table(
            [
                [t["slug"], ", ".join(f"{m['handle']} ({m['role']})" for m in t["members"]) or "-"]
                for t in teams
            ],
            "no teams",
        ),
    )


@team_group.group("member")
def team_member_group() -> None:
    """Add, re-role or remove team members."""


@team_member_group.command("add")
@click.argument("slug")
@click.argument("handle")
@click.option("--role", type=click.Choice(tenancy.ROLES), default="member", show_default=True)
@json_option
def team_member_add(slug: str, handle: str, role: str, as_json: bool) -> None:
    """Add HANDLE to team SLUG (or change their role)."""

    async def go(services: Services) -> None:
        await tenancy.set_member(services.db, slug, handle, role)

    _do(go)
    emit(as_json, {"team": slug, "handle": handle, "role": role}, f"{handle} is {role} of team {slug}")


@team_member_group.command("remove")
@click.argument("slug")
@click.argument("handle")
@json_option
def team_member_remove(slug: str, handle: str, as_json: bool) -> None:
    """Remove HANDLE from team SLUG (a team always keeps at least one owner)."""

    async def go(services: Services) -> None:
        await tenancy.remove_member(services.db, slug, handle)

    _do(go)
    emit(as_json, {"team": slug, "handle": handle, "removed": True}, f"{handle} removed from team {slug}")


# ---------------------------------------------------------------------------------------------
# Endpoints


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
    _one_owner(owner_handle, team_slug, required=True)
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
        )
        label = f"human:{owner_handle}" if owner_handle else f"team:{team_slug}"
        return tenancy.endpoint_view(endpoint, label), token, services.settings.base_url

    view, token, base_url = _do(go)
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
@json_option
def endpoint_list(owner_handle: str | None, team_slug: str | None, as_json: bool) -> None:
    """List endpoints (tokens only as their display prefix)."""
    _one_owner(owner_handle, team_slug, required=False)

    async def go(services: Services) -> list[dict[str, Any]]:
        scope = await _scope(services, owner_handle, team_slug)
        endpoints = await tenancy.list_endpoints(services.db, scope)
        labels = await _owner_labels(services.db, [Owner.of(e) for e in endpoints])
        return [tenancy.endpoint_view(e, labels.get(Owner.of(e).id, "?")) for e in endpoints]

    rows = _do(go)
    emit(
        as_json,
        {"endpoints": rows},
        lambda: _table(
            [
                [
                    e["slug"],
                    e["owner"],
                    e["state"],
                    ",".join(e["queues"]),
                    ",".join(e["families"]),
                    e["token_prefix"],
                    f"expires {_when(e['expires_at'])}" if e["expires_at"] else "",
                ]
                for e in rows
            ],
            "no endpoints",
        ),
    )


@endpoint_group.command("revoke")
@click.argument("slug")
@json_option
def endpoint_revoke(slug: str, as_json: bool) -> None:
    """Revoke an endpoint: its token dies at once and its open todos are dead-lettered."""

    async def go(services: Services) -> dict[str, Any]:
        return tenancy.endpoint_view(await tenancy.revoke_endpoint(services.db, slug))

    view = _do(go)
    emit(as_json, {"endpoint": view}, f"endpoint {view['slug']} revoked")


# ---------------------------------------------------------------------------------------------
# Webhooks


@main.group("webhook")
def webhook_group() -> None:
    """Ingest URLs: one per source, owned by an endpoint, with a signing secret."""


@webhook_group.command("create")
@click.option(
    "--endpoint", "endpoint_slug", metavar="SLUG", required=True, help="The owning endpoint's slug."
)
@click.option(
    "--source",
    required=True,
    metavar="KIND",
    help="Source kind (github, gitea, slack, cairn, stripe, generic, …).",
)
@click.option("--queue", metavar="Q", help="Target queue on the endpoint (default: its first queue).")
@json_option
def webhook_create(endpoint_slug: str, source: str, queue: str | None, as_json: bool) -> None:
    """Create a webhook; print its ingest URL and, for minted kinds, its secret (shown once)."""

    async def go(services: Services) -> tuple[tenancy.NewWebhook, str]:
        new = await tenancy.create_webhook(
            services.db,
            services.vault,
            services.providers,
            endpoint_slug=endpoint_slug,
            source=source,
            queue=queue,
        )
        return new, services.settings.base_url

    new, base_url = _do(go, warn_plaintext=True)
    view = tenancy.webhook_view(new.webhook, endpoint_slug)
    url = tenancy.ingest_url(base_url, new.ingest_token)
    data = {"webhook": view, "ingest_url": url, "secret": new.secret}

    def text_out() -> str:
        lines = [
            f"webhook {view['id']} ({view['source']} → {endpoint_slug}/{view['queue']}) created",
            f"ingest URL (shown once, store it now): {url}",
        ]
        if new.secret is not None:
            lines.append(f"signing secret (shown once, store it now): {new.secret}")
        elif view["secret_state"] == "awaiting":
            lines.append(
                f"awaiting the provider's signing secret: ingest answers 503 until you run "
                f"`switchboard webhook set-secret {view['id']}` (secret on stdin)"
            )
        else:
            lines.append("no signing secret: trust comes from the unguessable URL alone")
        return "\n".join(lines)

    emit(as_json, data, text_out)


@webhook_group.command("list")
@click.option("--endpoint", "endpoint_slug", metavar="SLUG", help="Only this endpoint's webhooks.")
@json_option
def webhook_list(endpoint_slug: str | None, as_json: bool) -> None:
    """List webhooks (never a secret; the ingest token only as its prefix)."""

    async def go(services: Services) -> list[dict[str, Any]]:
        if endpoint_slug is not None:
            await tenancy.get_endpoint(services.db, endpoint_slug)
        return await tenancy.list_webhooks(services.db, endpoint_slug)

    rows = _do(go)
    emit(
        as_json,
        {"webhooks": rows},
        lambda: _table(
            [
                [
                    w["id"],
                    w["source"],
                    f"{w['endpoint']}/{w['queue']}",
                    w["trust_mode"],
                    f"secret:{w['secret_state']}",
                    w["ingest_token_prefix"],
                    f"routes:{','.join(w['routes'])}" if w["routes"] else "",
                ]
                for w in rows
            ],
            "no webhooks",
        ),
    )


@webhook_group.command("rotate")
@click.argument("webhook_id")
@json_option
def webhook_rotate(webhook_id: str, as_json: bool) -> None:
    """Mint a new signing secret (github, gitea, cairn); print it once. The old one stops working."""

    async def go(services: Services) -> str:
        return await tenancy.rotate_webhook_secret(
            services.db, services.vault, services.providers, webhook_id
        )

    secret = _do(go, warn_plaintext=True)
    emit(
        as_json,
        {"webhook": webhook_id, "secret": secret},
        f"webhook {webhook_id}: new signing secret (shown once, store it now): {secret}",
    )


@webhook_group.command("set-secret")
@click.argument("webhook_id")
@json_option
def webhook_set_secret(webhook_id: str, as_json: bool) -> None:
    """Set the provider-issued signing secret (slack, stripe), read from stdin or a hidden prompt."""
    secret = _read_secret("Provider signing secret")

    async def go(services: Services) -> dict[str, Any]:
        webhook = await tenancy.set_webhook_secret(
            services.db, services.vault, services.providers, webhook_id, secret
        )
        return {"id": webhook.id, "secret_state": webhook.secret_state}

    view = _do(go, warn_plaintext=True)
    emit(as_json, {"webhook": view}, f"webhook {webhook_id}: signing secret set; ingest is open")


@webhook_group.command("delete")
@click.argument("webhook_id")
@json_option
def webhook_delete(webhook_id: str, as_json: bool) -> None:
    """Delete a webhook: its ingest URL stops answering (received events and todos are kept)."""

    async def go(services: Services) -> None:
        await tenancy.delete_webhook(services.db, webhook_id)

    _do(go)
    emit(as_json, {"webhook": webhook_id, "deleted": True}, f"webhook {webhook_id} deleted")


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

    route_id = _do(go)
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

    _do(go)
    emit(
        as_json,
        {"route": {"webhook": webhook_id, "endpoint": endpoint_slug}, "removed": True},
        f"webhook {webhook_id} no longer delivers to {endpoint_slug}",
    )


# ---------------------------------------------------------------------------------------------
# Connections


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
    "--account-key", required=True, metavar="A", help="Forge host, Slack team id, or https base URL."
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
    from switchboard import connections

    _one_owner(owner_handle, team_slug, required=True)
    secret = _read_secret("Connection secret")

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

    row = _do(go)
    emit(
        as_json,
        {"connection": row},
        f"connection {row.get('name')} ({row.get('id')}) added; fingerprint {row.get('fingerprint')}",
    )


@connection_group.command("list")
@click.option("--owner", "owner_handle", metavar="HANDLE", help="Only this human's connections.")
@click.option("--team", "team_slug", metavar="SLUG", help="Only this team's connections.")
@json_option
def connection_list(owner_handle: str | None, team_slug: str | None, as_json: bool) -> None:
    """List connections (fingerprints only, never a secret)."""
    from switchboard import connections

    _one_owner(owner_handle, team_slug, required=False)

    async def go(services: Services) -> list[dict[str, Any]]:
        scope = await _scope(services, owner_handle, team_slug)
        return await connections.list_connections(services, scope)

    rows = _do(go)
    emit(
        as_json,
        {"connections": rows},
        lambda: _table([_connection_line(c) for c in rows], "no connections"),
    )


@connection_group.command("rotate")
@click.argument("connection_id")
@json_option
def connection_rotate(connection_id: str, as_json: bool) -> None:
    """Replace a connection's secret (read from stdin or a hidden prompt)."""
    from switchboard import connections

    secret = _read_secret("New connection secret")

    async def go(services: Services) -> dict[str, Any]:
        return await connections.rotate_connection(services, None, connection_id, secret)

    row = _do(go)
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
    from switchboard import connections

    async def go(services: Services) -> dict[str, Any]:
        return await connections.test_connection(services, None, connection_id)

    result = _do(go)

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
    from switchboard import connections

    async def go(services: Services) -> None:
        await connections.delete_connection(services, None, connection_id)

    _do(go)
    emit(as_json, {"connection": connection_id, "deleted": True}, f"connection {connection_id} deleted")


# ---------------------------------------------------------------------------------------------
# Todos


@main.group("todo")
def todo_group() -> None:
    """Push, list and inspect todos."""


def _parse_payload(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise invalid(f"--payload is not valid JSON ({exc.msg} at position {exc.pos})") from None
    except ValueError:
        # e.g. an integer literal longer than Python converts (4300 digits).
        raise invalid("--payload is not valid JSON (a number is too long)") from None
    except RecursionError:
        raise invalid("--payload is not valid JSON (nested too deeply)") from None


@todo_group.command("push")
@click.option(
    "--endpoint", "endpoint_slug", metavar="SLUG", required=True, help="The endpoint whose queue gets it."
)
@click.option("--title", required=True, metavar="T", help="One-line title.")
@click.option("--queue", metavar="Q", help="Queue (default: the endpoint's first).")
@click.option("--payload", metavar="JSON", help="A JSON value for the todo's payload.")
@json_option
def todo_push(endpoint_slug: str, title: str, queue: str | None, payload: str | None, as_json: bool) -> None:
    """Put a todo on an endpoint's queue by hand."""
    try:
        value = _parse_payload(payload)
    except SwitchboardError as exc:
        fail(f"{exc.code}: {exc.message}")

    async def go(services: Services) -> dict[str, Any]:
        todo = await todos.push(
            services.db, endpoint_slug=endpoint_slug, title=title, queue=queue, payload=value
        )
        await services.todos_created([todo.id])
        return {**todos.todo_row(todo), "endpoint": endpoint_slug}

    row = _do(go)
    emit(as_json, {"todo": row}, f"todo {row['id']} pushed to {endpoint_slug}/{row['queue']}")


@todo_group.command("list")
@click.option("--endpoint", "endpoint_slug", metavar="SLUG", help="Only this endpoint's todos.")
@click.option("--state", type=click.Choice(("pending", "claimed", "done", "failed")), help="Only this state.")
@click.option("--queue", metavar="Q", help="Only this queue.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@json_option
def todo_list(
    endpoint_slug: str | None, state: str | None, queue: str | None, limit: int, as_json: bool
) -> None:
    """List todos, newest first (no payloads)."""

    async def go(services: Services) -> list[dict[str, Any]]:
        return await todos.list_in_scopes(
            services.db, scopes=None, endpoint_slug=endpoint_slug, state=state, queue=queue, limit=limit
        )

    rows = _do(go)
    emit(
        as_json,
        {"todos": rows},
        lambda: _table(
            [
                [
                    t["id"],
                    f"{t['endpoint']}/{t['queue']}",
                    t["state"] + (" (dead)" if t["dead_letter"] else ""),
                    t["source"],
                    t["title"][:70],
                ]
                for t in rows
            ],
            "no todos",
        ),
    )


@todo_group.command("show")
@click.argument("todo_id")
@json_option
def todo_show(todo_id: str, as_json: bool) -> None:
    """Show one todo with its payload, attempts and replies."""

    async def go(services: Services) -> dict[str, Any]:
        return await todos.show_in_scopes(services.db, todo_id, scopes=None)

    row = _do(go)

    def text_out() -> str:
        lines = [
            f"{row['id']}  {row['state']}{' (dead letter)' if row['dead_letter'] else ''}",
            f"title:    {row['title']}",
            f"endpoint: {row['endpoint']}  queue: {row['queue']}",
            f"source:   {row['source']}  kind: {row['kind']}",
            f"attempt:  {row['attempt']}/{row['max_attempts']}  created {row['created_at']}",
        ]
        if row["reply_to"]:
            lines.append(f"reply to: {row['reply_to'].get('display', row['reply_to'].get('kind'))}")
        for a in row["attempts"]:
            lines.append(
                f"attempt {a['number']}: {a['endpoint']} claimed {a['claimed_at']} → {a['outcome'] or 'open'}"
                + (f" ({a['summary']})" if a.get("summary") else "")
            )
        for r in row["replies"]:
            lines.append(
                f"reply {r.get('id') or r.get('reply_id')}: {r.get('state')} {r.get('display', '')} "
                f"{r.get('permalink') or ''}".rstrip()
            )
        lines.append("payload:")
        lines.append(json.dumps(row["payload"], indent=2, ensure_ascii=False))
        return "\n".join(lines)

    emit(as_json, {"todo": row}, text_out)
