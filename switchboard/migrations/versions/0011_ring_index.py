"""``ix_todos_ring`` on PostgreSQL covers only todos with ``next_ring_at`` set

Claims keep their plan on PostgreSQL (``todos.statements``), and a plan may be made before the
todos table has any statistics (a new database before autovacuum's first pass, or one just restored
or upgraded). Such a plan for the claim's pick walked the whole of this index, the smallest whose
condition (``state = 'pending'``) the claim's own condition proves, and sorted what it found; kept
while the backlog grew to 300,000, a claim took 320 ms (bench/HISTORY.md, 2026-12-05). A claim
cannot prove ``next_ring_at IS NOT NULL``; the doorbell's queries (``next_ring_at <= now``) can.
SQLite plans every statement again and keeps the index as it was.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
# The head when this was written; the revision ids are names, not an order.
down_revision = "0010"
branch_labels = None
depends_on = None


def _ring_index(where: str) -> None:
    op.drop_index("ix_todos_ring", table_name="todos")
    op.create_index("ix_todos_ring", "todos", ["next_ring_at"], postgresql_where=sa.text(where))


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _ring_index("state = 'pending' AND next_ring_at IS NOT NULL")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _ring_index("state = 'pending'")
