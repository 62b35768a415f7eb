"""One admin command's work against the configured database: ``do(fn)`` opens the services, checks
the database is there and migrated, runs ``fn`` and closes everything before the event loop ends.

The CLI is the instance operator's tool: it acts on any owner scope (``owner=None`` for the
connection functions, no consenting human for routes).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import click
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from switchboard import migrate, outbound
from switchboard.cli.output import database_trouble, run, settings_or_exit
from switchboard.db import Database
from switchboard.errors import SwitchboardError
from switchboard.services import Services, build_services
from switchboard.settings import Settings

T = TypeVar("T")

log = logging.getLogger("switchboard.cli")


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
                version = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
            except DBAPIError:
                # Not `is_unavailable`: SQLite answers a missing table with an OperationalError,
                # which that would call an outage.
                raise _NoSchema from None
            if version is None:
                # The table without a row: migrated down to base (`alembic downgrade base`).
                raise _NoSchema
    except _NoSchema:
        raise SwitchboardError(
            "unavailable", "the database has no Switchboard schema (run `switchboard db upgrade`)"
        ) from None
    except DBAPIError as exc:
        raise SwitchboardError("unavailable", f"cannot connect to the database ({_reason(exc)})") from None
    except (TypeError, ValueError, OverflowError) as exc:
        # A URL query argument the driver does not take (libpq's `?sslmode=`; asyncpg's is `?ssl=`),
        # or a value it refuses: `?command_timeout=abc` (ValueError), a port past 65535
        # (OverflowError from the socket). The messages name the option or the port, not the URL.
        raise SwitchboardError(
            "unavailable", f"cannot connect to the database (SWITCHBOARD_DATABASE_URL: {exc})"
        ) from None
    head = migrate.head()
    if version != head:
        # Every command would fail on a table or column it lacks (or has left behind) otherwise.
        cure = "run `switchboard db upgrade`" if str(version) < head else "this Switchboard is older than it"
        raise SwitchboardError(
            "unavailable",
            f"the database schema is at revision {version}; this Switchboard's is {head} ({cure})",
        )


def _build_services(settings: Settings) -> Services:
    """``build_services`` without its start-up warning about a missing encryption key: the server
    logs that once, but the CLI has no log handler, so it would reach the terminal on every
    command. The CLI says it itself, and only where a secret is stored (``warn_plaintext``)."""
    own = logging.getLogger("switchboard")
    was_disabled, own.disabled = own.disabled, True
    try:
        return build_services(settings)
    finally:
        own.disabled = was_disabled


@asynccontextmanager
async def _open(settings: Settings, *, warn_plaintext: bool) -> AsyncIterator[Services]:
    """Services on the configured database. ``warn_plaintext``: the command stores a webhook signing
    secret, so say (once, on stderr) when it will be stored in plaintext for want of a key."""
    _check_database_exists(settings)
    try:
        services = _build_services(settings)
    except (TypeError, ValueError) as exc:
        # Creating the engine converts the URL's query options (`?timeout=abc`,
        # `?prepared_statement_cache_size=abc`): a value that is not a number raised out of here, a
        # traceback. The message names the value, not the URL.
        raise SwitchboardError(
            "unavailable", f"cannot open the database (SWITCHBOARD_DATABASE_URL: {exc})"
        ) from None
    try:
        await _check_migrated(services.db)
        yield services
        # Said once the command has stored its secret: a refused command prints its one `error:`
        # line alone on stderr (a script reads it), and it stored nothing to warn about.
        if warn_plaintext and not services.vault.has_key:
            click.echo(
                "warning: no SWITCHBOARD_SECRET_ENCRYPTION_KEY: webhook signing secrets are stored in "
                "plaintext (run `switchboard keygen` and configure one)",
                err=True,
            )
    finally:
        # `connection test` dials through the guarded client; close it before the loop ends.
        await outbound.close_client(services)
        # `webhook rules set|test` run rules in the sandbox's worker processes.
        await services.sandbox.close()
        await services.db.dispose()


def do(fn: Callable[[Services], Awaitable[T]], *, warn_plaintext: bool = False) -> T:
    """Run one command's work against the configured database; failures become one-line errors."""
    settings = settings_or_exit()

    async def go() -> T:
        async with _open(settings, warn_plaintext=warn_plaintext) as services:
            try:
                return await fn(services)
            except SwitchboardError:
                raise  # `run` turns it into its one-line error
            except Exception as exc:
                if database_trouble(exc) is not None:
                    raise  # the database's state, not a bug: `run` says so in one line
                # A bug, not the operator's mistake: still one line (the type only, since a message
                # could quote a secret), with the traceback in the log at DEBUG.
                log.debug("unexpected error", exc_info=True)
                raise SwitchboardError(
                    "internal", f"unexpected {type(exc).__name__}; rerun with SWITCHBOARD_LOG_LEVEL=DEBUG"
                ) from None

    own = logging.getLogger("switchboard")
    if settings.log_level == "DEBUG":
        # Our own loggers only: the driver's would print SQL.
        own.addHandler(logging.StreamHandler())
        own.setLevel(logging.DEBUG)
        return run(go())
    # Otherwise stderr is the command's own (one `error:` line on a refusal): with no handler
    # anywhere, a warning the core logs meanwhile (the rule sandbox killing a worker) went to
    # Python's last-resort handler, an unprefixed line above the error or under the answer (the
    # answer says the fault itself; SWITCHBOARD_LOG_LEVEL=DEBUG shows the log). Removed afterwards:
    # a handler on our logger would take a server in the same process off its lean logging path.
    quiet = logging.NullHandler()
    own.addHandler(quiet)
    try:
        return run(go())
    finally:
        own.removeHandler(quiet)
