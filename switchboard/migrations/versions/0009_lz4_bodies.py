"""PostgreSQL: the large columns (a delivery's raw body and headers, a todo's payload and result)
compressed with lz4 instead of PostgreSQL's default pglz

Every signed delivery stores its body twice (the raw bytes on the event, the payload on its todos),
and a GitHub pull request's body is about 28 KB. pglz spent about 0.37 ms of the database's CPU
per delivery compressing the two (inserts of 3,200 body and payload pairs from the test fixtures,
16 a transaction: lz4 0.07 ms, stored 9.2 KiB a pair against pglz's 10.7). That was most of the
ingest writer's transaction on PostgreSQL (bench/HISTORY.md, "Changes of 2026-12-03").

Only values written from now on are compressed with lz4; values already stored stay as they are,
and PostgreSQL reads both. A server built without lz4 (or older than 14, which has no per-column
compression) keeps pglz: nothing changes there. SQLite stores values as they are.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
# The head when this was written; the revision ids are names, not an order.
down_revision = "0008"
branch_labels = None
depends_on = None

COLUMNS = (("events", "body"), ("events", "headers"), ("todos", "payload"), ("todos", "result"))


def _lz4_available() -> bool:
    # ``default_toast_compression`` exists from PostgreSQL 14 and lists lz4 when the server was
    # built with it.
    values = op.get_bind().scalar(
        sa.text("SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'")
    )
    return values is not None and "lz4" in values


def _compress_with(method: str) -> None:
    if op.get_bind().dialect.name != "postgresql" or not _lz4_available():
        return
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION {method}")


def upgrade() -> None:
    _compress_with("lz4")


def downgrade() -> None:
    _compress_with("pglz")
