"""``switchboard human``: people, each with a personal `sbo_` token (printed once, stored hashed), and
the token's lifecycle: rotate, revoke, remove."""

from __future__ import annotations

import click

from switchboard import humans, tenancy
from switchboard.cli.group import main
from switchboard.cli.output import emit, json_option, table, when
from switchboard.cli.pages import page_options, with_hint
from switchboard.cli.runner import do
from switchboard.models import Human
from switchboard.paging import page_of
from switchboard.services import Services


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

    human, token = do(go)
    emit(
        as_json,
        {"human": tenancy.human_view(human), "token": token},
        f"human {human.handle} created ({human.id})\ntoken (shown once, store it now): {token}",
    )


@human_group.command("list")
@page_options()
@json_option
def human_list(before: str | None, after: str | None, limit: int, as_json: bool) -> None:
    """List humans, oldest first (tokens only as their display prefix)."""

    async def go(services: Services) -> list[Human]:
        return await tenancy.list_humans(services.db)

    page = page_of(
        [tenancy.human_view(h) for h in do(go)], lambda h: h["id"], before=before, after=after, limit=limit
    )
    rows = page.rows
    emit(
        as_json,
        page.answer("humans", rows),
        lambda: with_hint(
            table(
                [
                    [
                        h["handle"],
                        h["email"] or "-",
                        h["token_prefix"],
                        h["token_state"],
                        when(h["created_at"]),
                    ]
                    for h in rows
                ],
                "no humans",
            ),
            page,
        ),
    )


@human_group.command("rotate")
@click.argument("handle")
@json_option
def human_rotate(handle: str, as_json: bool) -> None:
    """Issue HANDLE a new `sbo_` token (shown once); the old one stops working at once.

    Also ends all their web sessions. Works on a revoked human too: that is how one gets a token back.
    """

    async def go(services: Services) -> humans.Rotated:
        return await humans.rotate_token(services.db, handle=handle)

    rotated = do(go)
    emit(
        as_json,
        {
            "human": tenancy.human_view(rotated.human),
            "token": rotated.token,
            "sessions_ended": rotated.sessions_ended,
        },
        f"human {rotated.human.handle}: new token issued; the old one no longer works\n"
        f"web sessions ended: {rotated.sessions_ended}\n"
        f"token (shown once, store it now): {rotated.token}",
    )


@human_group.command("revoke")
@click.argument("handle")
@json_option
def human_revoke(handle: str, as_json: bool) -> None:
    """Refuse HANDLE's token from now on and end their web sessions.

    The human stays, with their teams and everything they own; `human rotate` issues a new token.
    """

    async def go(services: Services) -> humans.Revoked:
        return await humans.revoke_token(services.db, handle=handle)

    revoked = do(go)
    emit(
        as_json,
        {
            "human": tenancy.human_view(revoked.human),
            "revoked": True,
            "already_revoked": revoked.already,
            "sessions_ended": revoked.sessions_ended,
        },
        f"human {revoked.human.handle}: token "
        + ("was already revoked" if revoked.already else "revoked; it is refused from now on")
        + f"\nweb sessions ended: {revoked.sessions_ended}",
    )


@human_group.command("remove")
@click.argument("handle")
@json_option
def human_remove(handle: str, as_json: bool) -> None:
    """Remove HANDLE with their team memberships and web sessions.

    Refused while they own a live endpoint, a webhook or a connection, or are a team's last owner
    (the error says what to do first). Their revoked endpoints, and those endpoints' todos, go too.
    """

    async def go(services: Services) -> humans.Removed:
        return await humans.remove_human(services.db, handle)

    removed = do(go)
    emit(
        as_json,
        {
            "human": removed.handle,
            "removed": True,
            "memberships": removed.memberships,
            "sessions": removed.sessions,
            "revoked_endpoints": removed.endpoints,
            "todos": removed.todos,
        },
        f"human {removed.handle} removed: {removed.memberships} team membership(s), "
        f"{removed.sessions} web session(s), {removed.endpoints} revoked endpoint(s) with "
        f"{removed.todos} todo(s)",
    )
