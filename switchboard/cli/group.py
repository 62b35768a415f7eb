"""The ``switchboard`` click group: every command module registers its commands on ``main``.

It lives apart from the commands so that they can import it without importing each other: the
package's ``__init__`` imports every command module once, which is what registers them.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from typing import Any

import click

from switchboard.cli.output import fail, printable
from switchboard.errors import SwitchboardError
from switchboard.sanitize import lone_surrogate


class Group(click.Group):
    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Usage errors too are one line on stderr (click's own are three), exit code 2. Click's
        standalone mode is always off whatever the caller asks: its error printing is replaced here."""
        for stream in (sys.stdout, sys.stderr):
            # A terminal whose locale is not UTF-8 (ISO-8859-1, say) cannot encode every character
            # text output holds (the `…` of a token prefix, `→`, a sender's title): Python's strict
            # encoding ended a listing in a traceback. Such a character is shown escaped instead.
            if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
                stream.reconfigure(errors="backslashreplace")
        for arg in sys.argv[1:] if args is None else args:
            # Bytes that are not UTF-8 arrive as lone surrogates and would fail deep in a driver.
            if isinstance(arg, str) and lone_surrogate(arg):
                click.echo("error: usage: a command-line argument is not valid UTF-8", err=True)
                sys.exit(2)
            # No name, slug, id or text we accept holds a NUL (the API refuses it too): PostgreSQL
            # cannot store one, and SQLite would. Only a program, not a shell, can pass one.
            if isinstance(arg, str) and "\x00" in arg:
                click.echo("error: usage: a command-line argument contains a NUL character", err=True)
                sys.exit(2)
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            # A bare group (`switchboard human`) asks for its help: show it as click would.
            click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message(), err=True)
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            # Click quotes some arguments as given ("Got unexpected extra argument (…)"): a newline
            # or an escape sequence in one would break the one line or reach the terminal.
            click.echo(
                f"error: usage: {printable(exc.format_message(), keep_newlines=False)}{where}", err=True
            )
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {printable(exc.format_message(), keep_newlines=False)}", err=True)
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
