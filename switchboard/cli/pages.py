"""The cursor options every ``list`` command takes, and how a page says where the next one is.

``--before ID`` pages to older rows, ``--after ID`` to newer ones (``switchboard.paging``); ``--json``
output carries ``next_before`` and ``next_after``, and text output ends with the option to pass
for each page that exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from switchboard.paging import LIMIT_DEFAULT, LIMIT_MAX, Page

F = TypeVar("F", bound=Callable[..., Any])


def page_options(default: int = LIMIT_DEFAULT, maximum: int = LIMIT_MAX) -> Callable[[F], F]:
    """``--before ID``, ``--after ID`` and ``--limit N`` (passed as ``before``, ``after``, ``limit``)."""

    def decorate(fn: F) -> F:
        fn = click.option(
            "--limit",
            type=click.IntRange(1, maximum),
            default=default,
            show_default=True,
            help="Rows per page.",
        )(fn)
        fn = click.option("--after", metavar="ID", help="The page of newer rows (a page's next_after).")(fn)
        return click.option("--before", metavar="ID", help="The page of older rows (a page's next_before).")(
            fn
        )

    return decorate


def with_hint(text: str, page: Page[Any]) -> str:
    """A listing's text, then one line per further page: the option that shows it."""
    lines = [text]
    if page.next_before:
        lines.append(f"older: --before {page.next_before}")
    if page.next_after:
        lines.append(f"newer: --after {page.next_after}")
    return "\n".join(lines)
