"""The checks a reply passes before any dial, in the order docs/replying.md lists them ("Refusals
and their fixes"): the call's own arguments, the todo's state and its claim's fence, and the one
connection of the todo's owner that serves the reply's address. Each raises the refusal the agent
sees (a ``SwitchboardError`` with a stable code); none reads or writes the database. ``reply``
runs them on the rows its one read found.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from switchboard import reply_statements as statements
from switchboard.errors import SwitchboardError, conflict, invalid, not_found
from switchboard.ids import token_hash
from switchboard.models import Endpoint
from switchboard.plugins import UnknownKind
from switchboard.provider import Address, ConnectionKind
from switchboard.reply_statements import Candidate, Context
from switchboard.services import Services

TEXT_LIMIT_BYTES = 16 * 1024
KEY_RE = re.compile(r"[\x20-\x7e]{1,128}")


def refuse(code: str, message: str, **extra: Any) -> SwitchboardError:
    return SwitchboardError(code, message, **extra)


def reply_key(todo_id: str, text: str) -> str:
    """The key of a call that brought none: the same text on the same todo is the same reply."""
    return hashlib.sha256(f"{todo_id}\0{text}".encode()).hexdigest()


_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp"})


def _visible(char: str) -> bool:
    """Not whitespace, a separator, a control or a format character (ZWSP, BOM, bidi marks)."""
    return not char.isspace() and unicodedata.category(char) not in _INVISIBLE


def check_arguments(todo_id: object, text: object, idempotency_key: object, lease_token: object) -> str:
    if not isinstance(todo_id, str) or not todo_id or len(todo_id) > 40:
        raise not_found("todo")
    if not isinstance(text, str) or not any(_visible(c) for c in text):
        # Zero-width spaces, BOMs and control characters alone would post an empty-looking comment.
        raise invalid("text must not be empty")
    if len(text.encode("utf-8", errors="surrogatepass")) > TEXT_LIMIT_BYTES:
        raise invalid(f"text must be at most {TEXT_LIMIT_BYTES} bytes (16 KiB)")
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not KEY_RE.fullmatch(idempotency_key)
    ):
        raise invalid("idempotency_key must be 1 to 128 printable ASCII characters")
    if lease_token is not None and (not isinstance(lease_token, str) or not 1 <= len(lease_token) <= 200):
        raise invalid("lease_token must be a non-empty string")
    return idempotency_key if idempotency_key is not None else reply_key(todo_id, text)


def check_state(
    todo_id: str,
    todo: Context,
    endpoint: Endpoint,
    now: datetime,
    grace_seconds: int,
    lease_token: str | None,
) -> None:
    if todo.state == "held":
        # Quarantined work is invisible to agents (docs/routing.md): it does not exist for them.
        raise not_found(f"todo {todo_id!r}")
    if todo.state == "pending":
        raise refuse("not_claimed", "claim the todo before replying to it")
    if todo.state == "claimed":
        if todo.lease_expires_at is not None and todo.lease_expires_at <= now:
            raise refuse("not_claimed", "the todo's lease has expired; claim it again to reply")
        check_fence(todo_id, todo.lease_token_hash, lease_token)
        return
    # Finished: the grace window belongs to the endpoint that finished the todo, and to the claim
    # that finished it. A fenced claim's token hash is kept when it completes or fails: a worker
    # whose lease ran out, and whose todo another claim then finished, is refused as it was while
    # that claim was open (before, a finished todo checked no token).
    if todo.finished_by != endpoint.id or todo.finished_at is None:
        raise refuse("reply_window_closed", "the todo was not finished by this endpoint")
    if now - todo.finished_at > timedelta(seconds=grace_seconds):
        raise refuse(
            "reply_window_closed",
            f"replies are accepted for {grace_seconds} seconds after the todo is completed or failed",
        )
    check_fence(todo_id, todo.lease_token_hash, lease_token)


def check_fence(todo_id: str, lease_token_hash: str | None, lease_token: str | None) -> None:
    """A fenced claim's worker must present its lease_token, exactly as ``complete`` requires: a
    superseded worker (its lease expired and another claim took the todo) is refused ``conflict``
    rather than posting in the new holder's name."""
    if lease_token_hash is not None:
        if lease_token is None:
            raise conflict(f"todo {todo_id} is claimed with fencing: pass its lease_token")
        if token_hash(lease_token) != lease_token_hash:
            raise conflict(f"lease_token does not match the current claim of todo {todo_id}")
    elif lease_token is not None:
        raise conflict(f"lease_token does not match the current claim of todo {todo_id}")


def choose_connection(
    services: Services, ctx: Context, endpoint: Endpoint, address: Address
) -> tuple[Candidate, ConnectionKind]:
    """The todo's owner scope's one connection serving this address (docs/replying.md, "Which
    credential is used"). ``ctx.candidates`` are every connection of that scope: the todo is the
    calling endpoint's own, so its owner is the endpoint's."""
    missing = refuse(
        "no_connection",
        f"the todo's owner has no {address.provider} connection for {address.display}; "
        "the owner can add one (switchboard connection add, the API or the web UI)",
    )
    try:
        kind = services.providers.connection(address.provider)
    except UnknownKind:
        raise missing from None
    matching = []
    for row in ctx.candidates:
        if row.kind != kind.name:
            continue
        try:
            matches = kind.account_matches(row.account_key, address)
        except (KeyError, TypeError, ValueError):
            matches = False
        if matches:
            matching.append(row)
    if not matching:
        raise missing
    if len(matching) > 1:
        # Never a pick: the first-created connection would post to whichever instance it serves.
        # Exact addresses match one account key at most; this is an address stored before
        # addresses carried their instance base, or a provider whose rule matches loosely.
        names = ", ".join(repr(row.name) for row in matching)
        raise refuse(
            "no_connection",
            f"the address {address.display} is ambiguous: connections {names} all match it, "
            "so no reply is sent (the todo predates exact instance addresses, or the provider's "
            "account rule is loose)",
        )
    chosen = matching[0]
    if chosen.targets:
        try:
            target = kind.target_of(address)
        except (KeyError, TypeError, ValueError):
            target = ""
        if not any(fnmatchcase(target, glob) for glob in chosen.targets):
            raise refuse(
                "target_not_allowed",
                f"connection {chosen.name!r} does not allow replies to {target or address.display}",
            )
    if chosen.endpoints and endpoint.id not in chosen.endpoints:
        raise refuse("target_not_allowed", f"connection {chosen.name!r} is not open to this endpoint")
    return chosen, kind


def rate_limited_bucket(tokens: float) -> SwitchboardError:
    wait = statements.wait_for_token(tokens)
    return refuse("rate_limited", f"this endpoint is replying too fast; retry in {wait} s", retry_after=wait)


def cap_reached(cap: int) -> SwitchboardError:
    return refuse(
        "rate_limited", f"this todo has had its {cap} replies; no more are accepted", retry_after=None
    )
