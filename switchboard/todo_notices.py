"""Todos available, told to the other processes of one PostgreSQL database (``NOTIFY``).

Every process ``LISTEN``s on ``CHANNEL`` (``mcp.doorbell``) and rings its own agent sessions for
the ids it hears. A notice is sent by the transaction that made the todos available, and delivered
only once it commits: by the doorbell after any write (``publish_steps``), or, on ingest's usual
path, by the group commit's own statement (``ingest_statements.pg_batch``), which saves the batch a
statement and its round trip (issue 12).

A payload holds comma-separated todo ids and stays under PostgreSQL's 8,000 bytes.
"""

from __future__ import annotations

from sqlalchemy import column, text

from switchboard.direct import Steps

CHANNEL = "switchboard_todos"
# A payload's bytes at most, give or take one id (NOTIFY refuses 8,000 and more; an id is at most
# 40 characters, the column's length).
PAYLOAD_LIMIT = 7000

# Every chunk in one statement, so one round trip (autocommit: delivered when it ends).
_NOTIFY = text("SELECT pg_notify(:channel, chunk) FROM unnest(CAST(:chunks AS text[])) AS chunk").columns(
    column("notified")
)


def chunks(todo_ids: list[str]) -> list[str]:
    """``todo_ids`` as payloads: comma-separated, each under ``PAYLOAD_LIMIT``."""
    out: list[str] = []
    current = ""
    for todo_id in todo_ids:
        if current and len(current) + len(todo_id) + 1 > PAYLOAD_LIMIT:
            out.append(current)
            current = ""
        current = f"{current},{todo_id}" if current else todo_id
    if current:
        out.append(current)
    return out


def publish_steps(todo_ids: list[str]) -> Steps[None]:
    """One statement that notifies every id (``Database.run_steps``, autocommit)."""
    yield _NOTIFY, {"channel": CHANNEL, "chunks": chunks(todo_ids)}
