"""Cursor pages: every list in the API and the CLI pages with ``before=<id>`` (older) and
``after=<id>`` (newer), and says where the next page in each direction starts.

Ids are time-ordered (``ids.new_id``: milliseconds first, Crockford base32, whose alphabet sorts as
its values do), so an id is a sound cursor: "older than this id" means the same thing tomorrow,
however many rows arrive or go in between, and a page walked in either direction has no gaps and no
repeats. A page answers ``next_before`` (pass it as ``before`` for the older rows; null when there
are none) and ``next_after`` (as ``after`` for the newer rows; null when there are none yet).

Each list keeps its own order: todos newest first (its first page is the newest), everything else
oldest first (its first page is the oldest). The cursors mean the same in both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from switchboard.errors import invalid

T = TypeVar("T")

# What ``new_id`` makes: a short type prefix and 26 characters of time and randomness.
ID_RE = re.compile(r"[a-z]{1,10}_[0-9a-z]{26}")
LIMIT_MAX = 1000
LIMIT_DEFAULT = 100


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of rows in the list's order, and the cursors to the pages either side of it."""

    rows: list[T] = field(default_factory=list)
    next_before: str | None = None
    next_after: str | None = None

    def cursors(self) -> dict[str, str | None]:
        return {"next_before": self.next_before, "next_after": self.next_after}

    def answer(self, key: str, rows: list[Any]) -> dict[str, Any]:
        """The JSON answer of a listing: ``{key: rows, "next_before", "next_after"}``."""
        return {key: rows, **self.cursors()}


def check_cursor(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        raise invalid(f"{name} must be an id from a listing (its next_before or next_after)")
    return value


def check_page(
    before: Any, after: Any, limit: Any, maximum: int = LIMIT_MAX
) -> tuple[str | None, str | None, int]:
    """The cursors and the limit of a listing, checked: at most one cursor, ``1 <= limit <= maximum``."""
    before, after = check_cursor(before, "before"), check_cursor(after, "after")
    if before is not None and after is not None:
        raise invalid("give before or after, not both")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise invalid(f"limit must be an integer between 1 and {maximum}")
    return before, after, limit


def stamp(row_id: str) -> str:
    """The time-ordered part of an id (its prefix names only the type)."""
    return row_id.partition("_")[2]


def page_of(
    rows: Sequence[T],
    id_of: Callable[[T], str],
    *,
    before: Any = None,
    after: Any = None,
    limit: Any = LIMIT_DEFAULT,
    newest_first: bool = False,
) -> Page[T]:
    """A page of a list held in memory (the short ones: endpoints, webhooks, teams, …), in time
    order of their ids; its first page (no cursor) is the oldest, or the newest with
    ``newest_first``. A cursor need not be one of the rows: any id is a point in time."""
    before, after, limit = check_page(before, after, limit)
    ordered = sorted(rows, key=lambda r: stamp(id_of(r)))
    if after is not None:
        newer = [r for r in ordered if stamp(id_of(r)) > stamp(after)]
        shown, more_newer, more_older = newer[:limit], len(newer) > limit, len(newer) < len(ordered)
    elif before is not None:
        older = [r for r in ordered if stamp(id_of(r)) < stamp(before)]
        shown, more_older, more_newer = older[-limit:], len(older) > limit, len(older) < len(ordered)
    elif newest_first:
        shown, more_older, more_newer = ordered[-limit:], len(ordered) > limit, False
    else:
        shown, more_newer, more_older = ordered[:limit], len(ordered) > limit, False
    return Page(
        list(reversed(shown)) if newest_first else shown,
        next_before=id_of(shown[0]) if shown and more_older else None,
        next_after=id_of(shown[-1]) if shown and more_newer else None,
    )
