"""``switchboard human``: people, each with a personal `sbo_` token (printed once, stored hashed)."""

from __future__ import annotations

import click

from switchboard import tenancy
from switchboard.cli.group import main
from switchboard.cli.output import emit, json_option, table, when
from switchboard.cli.runner import do
from switchboard.models import Human
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
@json_option
def human_list(as_json: bool) -> None:
    """List humans (tokens only as their display prefix)."""

    async def go(services: Services) -> list[Human]:
        return await tenancy.list_humans(services.db)

    humans = [tenancy.human_view(h) for h in do(go)]
    emit(
        as_json,
        {"humans": humans},
        lambda: table(
            [[h["handle"], h["email"] or "-", h["token_prefix"], when(h["created_at"])] for h in humans],
            "no humans",
        ),
    )
