"""What every command shares: ``--json``, printing for people or for programs, and the one-line error.

Every command takes ``--json``. Errors print one line to stderr (``error: code: message``) and exit
non-zero; nothing is half-written because each change is one transaction in ``tenancy`` & co.
"""

from __future__ import annotations

import asyncio
import json
import sys
import unicodedata
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any, NoReturn, TypeVar

import click
from sqlalchemy.exc import DBAPIError

from switchboard import todos
from switchboard.db import is_unavailable
from switchboard.errors import SwitchboardError
from switchboard.settings import ConfigError, Settings, load_settings

T = TypeVar("T")

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        # RFC 3339 UTC, the same shape as the API and MCP (milliseconds, "Z").
        return todos.rfc3339(value)
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


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr, whatever the message holds."""
    click.echo(f"error: {printable(message, keep_newlines=False)}", err=True)
    sys.exit(code)


def settings_or_exit() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        fail(str(exc), 2)


def database_trouble(exc: BaseException) -> str | None:
    """The one line for a failure that is the database's state rather than a bug here, or None.

    That is an outage (``db.is_unavailable``: unreachable, pool exhausted, dropped mid-statement) or
    any other error the database answered with (a half-migrated schema, say). The line names the
    exception's class (or the system's reason), never the driver's text, which may quote a
    statement's parameters."""
    if not (is_unavailable(exc) or isinstance(exc, DBAPIError)):
        return None
    if isinstance(exc, OSError):
        return f"unavailable: cannot reach the database ({exc.strerror or type(exc).__name__})"
    if isinstance(exc, DBAPIError):
        return f"unavailable: database error ({type(exc.orig).__name__ if exc.orig else 'unknown'})"
    return f"unavailable: database error ({type(exc).__name__})"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one command's coroutine; turn every known failure into a one-line error."""
    try:
        return asyncio.run(coro)
    except SwitchboardError as exc:
        fail(f"{exc.code}: {exc.message}")
    except ConfigError as exc:
        fail(str(exc), 2)
    except Exception as exc:
        trouble = database_trouble(exc)
        if trouble is None:
            raise
        fail(trouble)


def table(rows: list[list[str]], empty: str) -> str:
    """Left-aligned columns for people (``empty`` when there is nothing to show)."""
    if not rows:
        return empty
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def when(value: datetime | str | None) -> str:
    """A timestamp for a table cell (views already hold RFC 3339 strings; models hold datetimes)."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return todos.rfc3339(value) or "-"
