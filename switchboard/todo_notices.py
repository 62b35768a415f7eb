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
# A payload's bytes at most (NOTIFY refuses 8,000 and more).
PAYLOAD_LIMIT = 7000
# Ids a notice holds when a statement groups them by count: todo ids are 29 characters
# (``td_`` and 26), so 200 and their commas make 6,000 bytes.
IDS_PER_NOTICE = 200

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
