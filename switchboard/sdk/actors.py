"""Reading who a verified delivery names, for a kind's ``actors`` (docs/plugins.md, "Trusted
actors").

Every function here answers for any input and never raises. An actor value is taken only when it is
a string that, stripped, is 1 to 100 printable characters (``switchboard.trust.actor_value``):
anything else (a number, an object, a 10 kB string, a NUL, a lone surrogate) is *no* actor, never a
cut-down one, because a shortened or cleaned-up name is someone else's name.
"""

from __future__ import annotations

from typing import Any

from switchboard.provider import Actors
from switchboard.trust import actor_value, clean_authors


def actor_at(value: object, *path: str) -> str | None:
    """The actor value at ``path`` in nested JSON objects (``actor_at(payload, "sender", "login")``),
    or None when any step is missing or not an object."""
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return actor_value(value)


def actors_of(sender: object, authors: object = ()) -> Actors:
    """``Actors`` from raw values: each checked with ``actor_value``, unusable ones left out, authors
    de-duplicated in order and capped at 10."""
    return Actors(sender=actor_value(sender), authors=tuple(clean_authors(authors)))


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def forge_actors(payload: object) -> Actors:
    """The actors of a GitHub-shaped delivery (GitHub, Gitea/Forgejo, and any forge whose payloads
    carry ``sender`` and ``comment``/``review``/``pull_request``/``issue`` objects with a ``user``).

    ``sender``: ``sender.login``. ``authors``: the login of the first of ``comment``, ``review``,
    ``pull_request`` and ``issue`` that names a user, then the thread's author (the pull request's,
    else the issue's user) when that is someone else.
    """
    body = _dict(payload)
    first = next(
        (
            login
            for key in ("comment", "review", "pull_request", "issue")
            if (login := actor_at(body, key, "user", "login")) is not None
        ),
        None,
    )
    thread = body.get("pull_request") if isinstance(body.get("pull_request"), dict) else body.get("issue")
    return actors_of(actor_at(body, "sender", "login"), [first, actor_at(thread, "user", "login")])
