"""Reply addresses from what a delivery says: the strict checks of its fields, the base of the
instance that sent it, and the helpers GitHub-shaped forges share (docs/sources/*.md, "Reply
address").

Pure functions of the payload's values, no I/O. Provider authors import these through
``switchboard.sdk``; the core's guarded client checks host names with ``valid_host``.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from switchboard.provider import Address, EchoClues, find_marker

# ---------------------------------------------------------------------------------------------
# Strict address field checks (docs/sources/*.md, "Reply address"). A field that fails is a reason
# for *no* address, never for a cleaned-up one, so these answer yes/no (or the exact value) and
# never repair their input.

_REPO_RE = re.compile(r"[A-Za-z0-9._-]{1,100}/[A-Za-z0-9._-]{1,100}")
_HOST_RE = re.compile(
    r"(?=.{1,253}(?::|\Z))[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
    r"(?::[1-9][0-9]{0,4})?"
)
_SLACK_ID_RE = re.compile(r"[A-Z0-9]{1,40}")
_SLACK_TS_RE = re.compile(r"[0-9]{1,12}\.[0-9]{1,12}")


def valid_repo(value: object) -> str | None:
    """``owner/name`` with the forge charset and no ``..``; None if anything else."""
    if isinstance(value, str) and _REPO_RE.fullmatch(value) and ".." not in value:
        owner, name = value.split("/")
        # "." alone is a path segment, not a name.
        if owner not in (".",) and name not in (".",):
            return value
    return None


def valid_number(value: object) -> int | None:
    """A positive issue/PR number (a JSON integer, not a bool or a string)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31:
        return value
    return None


def valid_host(value: object) -> str | None:
    """A lower-case DNS host name with an optional port (no user info, no path, no IP tricks)."""
    if isinstance(value, str) and _HOST_RE.fullmatch(value):
        _, _, port = value.partition(":")
        if not port or int(port) <= 65535:
            return value
    return None


def valid_slack_id(value: object) -> str | None:
    return value if isinstance(value, str) and _SLACK_ID_RE.fullmatch(value) else None


def valid_slack_ts(value: object) -> str | None:
    return value if isinstance(value, str) and _SLACK_TS_RE.fullmatch(value) else None


def origin_of(url: object, schemes: tuple[str, ...] = ("https", "http")) -> tuple[str, str] | None:
    """``(scheme, host[:port])`` of an absolute URL whose parts pass the strict checks, else None.

    The URL is not repaired: upper-case hosts, user info, backslashes, spaces, control characters or
    an odd scheme all answer None.
    """
    if not isinstance(url, str) or len(url) > 2048:
        return None
    return _origin(url, tuple(schemes))


# A sender names the same few repositories (and so URLs) over and over: ``origin_of`` and
# ``instance_base`` are pure, so each URL is checked once (a forge delivery checks its repository's
# twice; together a few percent of ingest's CPU, issue 12). Bounded, as the URLs are the sender's.
_URLS_KEPT = 1024


@functools.lru_cache(maxsize=_URLS_KEPT)
def _origin(url: str, schemes: tuple[str, ...]) -> tuple[str, str] | None:
    if not url.isascii() or not url.isprintable():
        return None
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in schemes or any(c in rest for c in " \\@"):
        return None
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    host = valid_host(netloc)
    return (scheme, host) if host else None


# ---------------------------------------------------------------------------------------------
# Instance bases. A self-hosted forge or Cairn may run under a path (``https://host/gitea-a``), and
# several under one host name, so an address names its instance by the whole base, not the host:
# the URL of one of its objects minus that object's own path. The base is compared with a
# connection's account key (an https base URL, normalised by ``outbound.normalize_https_base``)
# without the scheme: a forge whose configured root URL is http:// is the same instance, and the
# dial always goes to the connection's own https:// URL.

_PATH_SEGMENT_RE = re.compile(r"[A-Za-z0-9._~-]{1,100}")
_DEFAULT_PORTS = {"https": ":443", "http": ":80"}
BASE_LIMIT = 300


def instance_base(url: object, suffix: str, schemes: tuple[str, ...] = ("https",)) -> str | None:
    """The normalised base of the instance that serves ``url``: the part before ``suffix`` (the
    object's own path, e.g. ``/acme/api`` or ``/artifacts/art_1``), as ``scheme://host[:port][/path]``
    with the scheme's default port dropped.

    None unless ``url`` passes ``origin_of`` and is exactly the base followed by ``suffix`` (compared
    without regard to case, as forges spell names in either), with no query, fragment or
    percent-escape, and every base path segment a plain name (no ``.``, ``..`` or empty segment).
    """
    if not isinstance(url, str) or not isinstance(suffix, str) or len(url) > 2048:
        return None
    return _instance_base(url, suffix, tuple(schemes))


@functools.lru_cache(maxsize=_URLS_KEPT)
def _instance_base(url: str, suffix: str, schemes: tuple[str, ...]) -> str | None:
    origin = origin_of(url, schemes=schemes)
    if origin is None or not suffix.startswith("/"):
        return None
    scheme, host = origin
    rest = url[len(scheme) + 3 + len(host) :]
    if not rest.lower().endswith(suffix.lower()) or any(c in rest for c in "?#%"):
        return None
    prefix = rest[: len(rest) - len(suffix)]
    segments = prefix.split("/")[1:] if prefix else []
    if prefix and not prefix.startswith("/"):
        return None
    if not all(_PATH_SEGMENT_RE.fullmatch(seg) and seg not in (".", "..") for seg in segments):
        return None
    base = f"{scheme}://{host.removesuffix(_DEFAULT_PORTS.get(scheme, ''))}{prefix}"
    return base if len(base) <= BASE_LIMIT else None


def instance_key(base: str) -> str:
    """A base URL (or account key) without its scheme: ``git.example.com/gitea-a``."""
    return base.partition("://")[2]


def https_base(base: object) -> str | None:
    """The account key a connection to this instance has (its https base URL), or None."""
    if not isinstance(base, str) or "://" not in base:
        return None
    return f"https://{instance_key(base)}"


def same_instance(base: object, account_key: str) -> bool:
    """Is the address's base the instance of a connection with this normalised https base URL?"""
    return isinstance(base, str) and "://" in base and instance_key(base) == instance_key(account_key)


# ---------------------------------------------------------------------------------------------
# Forge helpers shared by GitHub-shaped providers (GitHub, Gitea/Forgejo, and any third-party forge
# whose payloads carry ``repository`` and an issue or pull request, and ``comment`` objects).


def forge_comment_address(
    provider: str,
    repository: object,
    subject: object,
    schemes: tuple[str, ...] = ("https",),
    *,
    path_mounted: bool = True,
) -> Address | None:
    """A ``forge_comment`` address from a repository object and its issue / pull request, or None
    if any field fails its strict check.

    ``host`` is the host of ``repository.html_url``; ``base`` is its instance base, the part before
    ``/{owner}/{repo}`` (see ``instance_base``). ``path_mounted=False`` is for a forge whose
    instance is always a whole host (GitHub and GHES): its addresses keep ``host`` alone, as they
    always did, and an ``html_url`` with a path before the repository means no address.
    """
    if not isinstance(repository, dict) or not isinstance(subject, dict):
        return None
    origin = origin_of(repository.get("html_url"), schemes=schemes)
    repo = valid_repo(repository.get("full_name"))
    number = valid_number(subject.get("number"))
    if origin is None or repo is None or number is None:
        return None
    base = instance_base(repository.get("html_url"), f"/{repo}", schemes=schemes)
    if base is None:
        return None
    host = origin[1]
    where = instance_key(base)
    fields: dict[str, Any] = {"host": host, "repo": repo, "number": number}
    if path_mounted:
        fields = {"host": host, "base": base, "repo": repo, "number": number}
    elif where != host.removesuffix(_DEFAULT_PORTS.get(origin[0], "")):
        return None
    return Address(
        kind="forge_comment", provider=provider, display=f"{provider} {where}/{repo}#{number}", fields=fields
    )


def comment_echo_clues(payload: object) -> EchoClues:
    """Echo clues of a forge delivery: its ``comment`` id and any reply marker in its body."""
    comment = payload.get("comment") if isinstance(payload, dict) else None
    if not isinstance(comment, dict):
        return EchoClues()
    comment_id = comment.get("id")
    # Comment ids outgrew 32 bits long ago: any positive JSON integer.
    is_id = isinstance(comment_id, int) and not isinstance(comment_id, bool) and comment_id > 0
    return EchoClues(object_ids=(str(comment_id),) if is_id else (), marker=find_marker(comment.get("body")))
