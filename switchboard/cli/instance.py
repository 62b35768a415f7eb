"""Commands about the instance itself: ``serve``, ``db upgrade``, ``db reseal``, ``plugins`` and
``keygen``."""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

import click
from aiohttp import web
from sqlalchemy.engine import make_url

from switchboard import migrate, reseal
from switchboard.cli.group import main
from switchboard.cli.output import emit, fail, json_option, settings_or_exit
from switchboard.cli.runner import do
from switchboard.logs import RedactingAccessLogger, configure_logging
from switchboard.plugins import load as load_providers
from switchboard.services import build_services
from switchboard.settings import ConfigError
from switchboard.vault import generate_key


def private_sqlite_file(database_url: str) -> str | None:
    """Create a SQLite database file that does not exist yet readable by its owner only (0600)
    before SQLite creates it with the process umask (0644 as a rule): it holds every payload and the
    secrets' envelopes. SQLite gives the -wal and -shm files it makes later the mode of the
    database file. Returns a warning when an existing file is readable by other users (its mode is
    the operator's to change); None otherwise. PostgreSQL, in-memory and URI databases are left be.
    """
    url = make_url(database_url)
    path = url.database
    if url.get_backend_name() != "sqlite" or not path or path == ":memory:" or url.query.get("uri"):
        return None
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        mode = os.stat(path).st_mode & 0o777
        if mode & 0o077:
            return (
                f"warning: the SQLite database {path} is readable by other users (mode {mode:o}); "
                f"`chmod 600 {path}*` makes it private"
            )
    except OSError:
        pass  # a missing folder or no permission: SQLite's own error says it when it opens the file
    return None


def _missing_sqlite_folder(database_url: str) -> str | None:
    """The folder a SQLite database file would be in, when it does not exist (None otherwise).
    Said before the migration runs: SQLite's own "unable to open database file" names neither, and
    aiosqlite's failed connect leaves a thread that may report to an event loop already closed."""
    url = make_url(database_url)
    path = url.database
    if url.get_backend_name() != "sqlite" or not path or path == ":memory:" or url.query.get("uri"):
        return None
    folder = os.path.dirname(os.path.abspath(path))
    return None if os.path.isdir(folder) else folder


def _upgrade(database_url: str, *, logged: bool = False) -> None:
    folder = _missing_sqlite_folder(database_url)
    if folder is not None:
        fail(f"unavailable: cannot create the SQLite database: the folder {folder} does not exist")
    warning = private_sqlite_file(database_url)
    if warning is not None and logged:
        logging.getLogger("switchboard").warning("%s", warning.removeprefix("warning: "))
    elif warning is not None:
        click.echo(warning, err=True)
    try:
        migrate.upgrade(database_url)
    except Exception as exc:
        # The driver's own error, its first line: SQLAlchemy's wrapper adds the statement and a
        # "Background on this error" link on lines of their own.
        cause = getattr(exc, "orig", None) or exc
        reason = (str(cause).strip().splitlines() or [""])[0][:200]
        fail(f"unavailable: cannot migrate the database ({type(cause).__name__}: {reason})")


@main.command()
@json_option
def serve(as_json: bool) -> None:
    """Upgrade the database, then serve everything on HOST:PORT until SIGTERM or SIGINT."""
    # Imported here, not at the top: the application pulls in every surface (the MCP SDK, the API,
    # the web UI), which doubles the start-up time of every other command and of `--help`.
    from switchboard.app import make_app

    settings = settings_or_exit()
    configure_logging(settings.log_level_number, as_json)
    # The providers' own settings are checked like the core's, before anything is touched.
    providers = load_providers(settings)
    try:
        providers.check_settings(settings)
    except ConfigError as exc:
        fail(str(exc), 2)
    _upgrade(settings.database_url, logged=True)
    services = build_services(settings, providers)
    if settings.metrics_token is None:
        # Its series name every tenant's webhooks: say so where an operator looks first.
        logging.getLogger("switchboard").info(
            "/metrics answers anyone who reaches this port; "
            "set SWITCHBOARD_METRICS_TOKEN to require a bearer token"
        )
    app = make_app(services)
    app.on_startup.append(_settle_garbage_collector)
    try:
        web.run_app(
            app,
            host=settings.host,
            port=settings.port,
            # aiohttp "prints" once its sockets listen: only then is it true to say so (a port
            # already taken ends in the one line below instead).
            print=lambda _banner: logging.getLogger("switchboard").info(
                "serving on http://%s:%s (database: %s)", settings.host, settings.port, services.db.dialect
            ),
            access_log_class=RedactingAccessLogger,
            handle_signals=True,
            shutdown_timeout=10,
        )
    except OSError as exc:
        # Binding failed (port taken, address not on this host, name not resolvable): the
        # operator's setting, so one line naming it rather than a traceback.
        reason = exc.strerror or type(exc).__name__
        fail(f"unavailable: cannot listen on {settings.host}:{settings.port} ({reason})")


# Collections of the youngest generation, by how many new container objects it takes to start one
# (Python's default: 700). A delivery's parsed payload alone is a few hundred; under load the
# default started one every few deliveries, and the collector took 5% of a serving process's CPU
# (issue 12). Nearly all of a request's objects are freed by reference counting before a
# collection at this threshold would see them.
YOUNG_COLLECTION_THRESHOLD = 10_000


async def _settle_garbage_collector(app: web.Application) -> None:
    """Once the app has started: what start-up built (modules, the app, the pools, the plugins)
    lives as long as the process, so it moves out of the collector's sight (``gc.freeze``) instead of
    being walked by every full collection; and the youngest generation is collected less often."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, middle, oldest)


@main.group("db")
def db_group() -> None:
    """Database maintenance."""


@db_group.command("upgrade")
@json_option
def db_upgrade(as_json: bool) -> None:
    """Apply every pending migration."""
    _upgrade(settings_or_exit().database_url)
    emit(as_json, {"upgraded": True, "revision": "head"}, "database is at the latest revision")


@db_group.command("reseal")
@json_option
def db_reseal(as_json: bool) -> None:
    """Seal every secret stored in plaintext (from before an encryption key was configured)."""
    done = do(reseal.reseal)
    text = f"sealed {done.count} plaintext-stored secret(s)"
    if done.wal_truncated is False:
        text += "; the SQLite write-ahead log is in use by another process, so the old plaintext may "
        text += "remain in it: stop the server and run `switchboard db reseal` again"
    emit(as_json, {"resealed": done.count, "wal_truncated": done.wal_truncated}, text)


@main.command()
@json_option
def plugins(as_json: bool) -> None:
    """List the provider plugins: version, status (and the error of one that did not load), kinds
    with their descriptions, and each kind's settings (a secret one's value is never shown)."""
    settings = settings_or_exit()
    rows = load_providers(settings).describe(settings)
    emit(as_json, {"plugins": rows}, lambda: "\n".join(_plugin_lines(row) for row in rows))


def _plugin_lines(row: dict[str, Any]) -> str:
    head = f"{row['name']} ({row['package']} {row['version']}): {row['status']}"
    if row["error"]:
        return f"{head}: {row['error']}"
    lines = [
        f"{head} sources={','.join(row['source_kinds']) or '-'} "
        f"connections={','.join(row['connection_kinds']) or '-'}"
    ]
    for kind in row["kinds"]:
        lines.append(f"  {kind['role']} {kind['name']}: {kind['description'] or '-'}")
        for setting in kind.get("settings", ()):
            if setting["error"]:
                shown = f"invalid: {setting['error']}"
            elif setting["secret"]:
                shown = "(secret, set)" if setting["from"] == "environment" else "(secret, unset)"
            else:
                shown = f"{setting['value'] or '-'} ({setting['from']})"
            lines.append(f"    {setting['name']} = {shown}")
        if kind["secret_rules"]:
            lines.append(f"    secret rules: {', '.join(kind['secret_rules'])}")
    return "\n".join(lines)


@main.command()
@json_option
def keygen(as_json: bool) -> None:
    """Print a fresh SWITCHBOARD_SECRET_ENCRYPTION_KEY."""
    key = generate_key()
    emit(as_json, {"key": key}, key)
