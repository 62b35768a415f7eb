"""The rows a bearer token names: the read that authenticates a request.

Every ``/mcp`` request that the endpoint cache does not serve (the handshake, ``tools/list``, the
reads, ``reply``) and every ``/api/v1`` request reads one row by its token's hash before anything
else. These reads run on the driver directly (``Database.read_steps``) and come back as the ORM
objects a session would have loaded (``direct.loaded``): through a session the one-row read cost
the event loop 1.1-1.5 ms of CPU on SQLite and 0.5-0.6 ms on PostgreSQL, more than the rest of a
refused tool call (bench/HISTORY.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import bindparam, select

from switchboard.db import Database
from switchboard.direct import Steps, loaded, mapped_columns
from switchboard.models import Endpoint, Human

_ENDPOINT_BY_TOKEN = select(*mapped_columns(Endpoint)).where(
    Endpoint.__table__.c.token_hash == bindparam("token_hash")
)
# A revoked human's hash is already one no token matches; the second condition says so twice.
_HUMAN_BY_TOKEN = select(*mapped_columns(Human)).where(
    Human.__table__.c.token_hash == bindparam("token_hash"), Human.__table__.c.revoked_at.is_(None)
)


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme in any case), or None
    when the header is missing, names another scheme or carries no token."""
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    token = token.strip()
    # Every token Switchboard mints is ASCII. Other bytes arrive decoded with surrogate escapes,
    # which no token hash can encode: such a header carries no token of ours.
    return token if scheme.lower() == "bearer" and token and token.isascii() else None


def _endpoint(hashed: str) -> Steps[Endpoint | None]:
    rows = yield _ENDPOINT_BY_TOKEN, {"token_hash": hashed}
    return loaded(Endpoint, rows[0]) if rows else None


def _human(hashed: str) -> Steps[Human | None]:
    rows = yield _HUMAN_BY_TOKEN, {"token_hash": hashed}
    return loaded(Human, rows[0]) if rows else None


async def endpoint_by_hash(db: Database, hashed: str) -> Endpoint | None:
    """The endpoint whose token hashes to ``hashed``, live or not (the caller judges)."""
    return await db.read_steps(_endpoint(hashed))


async def human_by_hash(db: Database, hashed: str) -> Human | None:
    """The human whose operator token hashes to ``hashed``; None when unknown or revoked."""
    return await db.read_steps(_human(hashed))
