"""The ``switchboard`` command: the instance operator's tool, working directly on the database.

Every command takes ``--json``. Errors print one line to stderr (``error: code: message``) and exit
non-zero; nothing is half-written because each change is one transaction in ``tenancy`` & co.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import unicodedata
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from sqlalchemy.exc import DBAPIError

from switchboard.errors import SwitchboardError
from switchboard.settings import ConfigError, Settings, load_settings

T = TypeVar("T")

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        # RFC 3339 UTC, the same shape as the API and MCP (milliseconds, "Z").
        return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"cannot serialise {type(value).__name__}")


def printable(text: str, *, keep_newlines: bool = True) -> str:
    """Text safe for a terminal: sender-controlled strings (todo titles, provider details) may hold
    escape sequences or bidi overrides, so control and format characters are shown escaped."""
    out = []
    for ch in text:
        if ch == "\n" and keep_newlines:
            out.append(ch)
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) > 0xFF else f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def emit(as_json: bool, data: dict[str, Any], text: str | Callable[[], str]) -> None:
    """Print ``data`` as one JSON object (which escapes control characters itself), or ``text`` for
    people, neutralised for the terminal."""
    if as_json:
        click.echo(json.dumps(data, default=_default, sort_keys=False))
    else:
        click.echo(printable(text() if callable(text) else text))


def fail(message: str, code: int = 1) -> None:
    """One line on stderr, whatever the message holds."""
    click.echo(f"error: {printable(message, keep_newlines=False)}", err=True)
    sys.exit(code)


def settings_or_exit() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        fail(str(exc), 2)
        raise AssertionError from exc  # unreachable; keeps type checkers calm


def run(coro: Awaitable[T]) -> T:
    """Run one command's coroutine; turn every known failure into a one-line error."""
    try:
        return asyncio.run(coro)  # type: ignore[arg-type]
    except SwitchboardError as exc:
        fail(f"{exc.code}: {exc.message}")
    except ConfigError as exc:
        fail(str(exc), 2)
    except OSError as exc:
        fail(f"unavailable: cannot reach the database ({exc.strerror or type(exc).__name__})")
    except DBAPIError as exc:
        fail(f"unavailable: database error ({type(exc.orig).__name__ if exc.orig else 'unknown'})")
    raise AssertionError("unreachable")


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Group(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Usage errors too are one line on stderr (click's own are three), exit code 2."""
        kwargs.pop("standalone_mode", None)
        argv = kwargs.get("args", args[0] if args else None)
        for arg in sys.argv[1:] if argv is None else argv:
            # Bytes that are not UTF-8 arrive as lone surrogates and would fail deep in a driver.
            if isinstance(arg, str) and not _encodes(arg):
                click.echo("error: usage: a command-line argument is not valid UTF-8", err=True)
                sys.exit(2)
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            # A bare group (`switchboard human`) asks for its help: show it as click would.
            click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message(), err=True)
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            click.echo(f"error: usage: {exc.format_message()}{where}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except SwitchboardError as exc:
            fail(f"{exc.code}: {exc.message}")


@click.group(cls=Group)
@click.version_option(package_name="switchboard")
def main() -> None:
    """Switchboard: verified webhooks become todos that agents drain over MCP and answer back."""


# ---------------------------------------------------------------------------------------------
# Running


@main.command()
@json_option
def serve(as_json: bool) -> None:
    """Upgrade the database, then serve everything on HOST:PORT until SIGTERM or SIGINT."""
    from aiohttp import web

    from switchboard import db
    from switchboard.app import build_services, make_app
    from switchboard.logs import RedactingAccessLogger, configure_logging

    settings = settings_or_exit()
    configure_logging(settings.log_level_number, as_json)
    try:
        db.upgrade(settings.database_url)
    except Exception as exc:
        fail(f"unavailable: cannot migrate the database ({type(exc).__name__}: {str(exc)[:200]})")
    services = build_services(settings)
    logging.getLogger("switchboard").info(
        "serving on http://%s:%s (database: %s)", settings.host, settings.port, services.db.dialect
    )
    try:
        web.run_app(
            make_app(services),
            host=settings.host,
            port=settings.port,
            print=None,
            access_log_class=RedactingAccessLogger,
            handle_signals=True,
            shutdown_timeout=10,
        )
    except OSError as exc:
        # Binding failed (port taken, address not on this host, name not resolvable): the
        # operator's setting, so one line naming it rather than a traceback.
        reason = exc.strerror or type(exc).__name__
        fail(f"unavailable: cannot listen on {settings.host}:{settings.port} ({reason})")


@main.group("db")
def db_group() -> None:
    """Database maintenance."""


@db_group.command("upgrade")
@json_option
def db_upgrade(as_json: bool) -> None:
    """Apply every pending migration."""
    from switchboard import db

    settings = settings_or_exit()
    try:
        db.upgrade(settings.database_url)
    except Exception as exc:
        fail(f"unavailable: cannot migrate the database ({type(exc).__name__}: {str(exc)[:200]})")
    emit(as_json, {"upgraded": True, "revision": "head"}, "database is at the latest revision")


@main.command()
@json_option
def plugins(as_json: bool) -> None:
    """List the provider plugins, their versions, kinds and hooks."""
    from switchboard.plugins import load

    rows = load().describe()

    def text() -> str:
        return "\n".join(
            f"{r['name']} ({r['package']} {r['version']}): sources={','.join(r['source_kinds']) or '-'} "
            f"connections={','.join(r['connection_kinds']) or '-'} hooks={','.join(r['hooks'])}"
            for r in rows
        )

    emit(as_json, {"plugins": rows}, text)


@main.command()
@json_option
def keygen(as_json: bool) -> None:
    """Print a fresh SWITCHBOARD_SECRET_ENCRYPTION_KEY."""
    from switchboard.vault import generate_key

    key = generate_key()
    emit(as_json, {"key": key}, key)


from switchboard import cli_admin  # noqa: E402  (registers the admin command groups on `main`)

__all__ = ["cli_admin", "main"]
