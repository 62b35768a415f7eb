"""What admin commands read from the operator beyond plain options: secrets and owner scopes.

Secrets going in are read from stdin or a hidden prompt, never from an argument (arguments end up
in shell history and ``ps``).
"""

from __future__ import annotations

import sys

import click
from sqlalchemy import select

from switchboard import tenancy
from switchboard.cli.output import fail
from switchboard.db import Database
from switchboard.models import Human, Team
from switchboard.sanitize import lone_surrogate
from switchboard.services import Services
from switchboard.tenancy import Owner

MAX_SECRET_CHARS = 16 * 1024


def read_secret(prompt: str) -> str:
    """A secret from stdin (piped) or a hidden prompt (a terminal); never from an argument."""
    stdin = sys.stdin
    if stdin is None:
        fail("invalid_argument: no secret given (stdin is closed)")
    try:
        if stdin.isatty():
            value = click.prompt(prompt, hide_input=True, default="", show_default=False)
        else:
            value = stdin.read(MAX_SECRET_CHARS + 1)
    except UnicodeDecodeError:
        # A strict stdin (a UTF-8 locale) refuses the bytes; the message never quotes them.
        fail("invalid_argument: the secret is not valid UTF-8 text")
    value = value.strip()
    if lone_surrogate(value):
        # A lenient stdin (the C locale's surrogate escapes) lets them through as lone surrogates.
        fail("invalid_argument: the secret is not valid UTF-8 text")
    if not value:
        fail("invalid_argument: no secret given (pipe it on stdin, or type it at the prompt)")
    if len(value) > MAX_SECRET_CHARS:
        fail(f"invalid_argument: the secret is longer than {MAX_SECRET_CHARS} characters")
    return value


def one_owner(owner: str | None, team: str | None, *, required: bool) -> None:
    """``--owner`` and ``--team`` exclude each other; ``required``: one of them must be given."""
    if owner is not None and team is not None:
        fail("invalid_argument: give --owner or --team, not both")
    if required and owner is None and team is None:
        fail("invalid_argument: give --owner HANDLE or --team SLUG")


async def owner_scope(services: Services, owner: str | None, team: str | None) -> Owner | None:
    """The owner scope a listing is narrowed to, or None for every scope."""
    if owner is None and team is None:
        return None
    return await tenancy.resolve_owner(services.db, human=owner, team=team)


async def owner_labels(db: Database, owners: list[Owner]) -> dict[str, str]:
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
