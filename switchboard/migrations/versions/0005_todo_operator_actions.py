"""operator actions on todos: the cancelled state, why a todo was dead-lettered, and the todo's
history of operator actions (todo_events)

Revision ID: 0005
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import switchboard.models

revision = "0005"
# The head when this was written; the revision ids are names, not an order.
down_revision = "0003"
branch_labels = None
depends_on = None

OLD_STATES = "state IN ('pending', 'claimed', 'done', 'failed')"
NEW_STATES = "state IN ('pending', 'claimed', 'done', 'failed', 'cancelled')"


def _states(check: str) -> None:
    # SQLite rebuilds the table (batch mode) with the new CHECK; PostgreSQL swaps the constraint.
    with op.batch_alter_table("todos") as batch:
        batch.drop_constraint(op.f("ck_todos_state"), type_="check")
        batch.create_check_constraint(op.f("ck_todos_state"), check)


def upgrade() -> None:
    with op.batch_alter_table("todos") as batch:
        batch.add_column(sa.Column("dead_reason", sa.String(length=40), nullable=True))
    _states(NEW_STATES)
    # Dead letters from before the reason was kept: the attempt that dead-lettered says why, when
    # there was one; the rest were dead-lettered by revoking their endpoint.
    op.execute(
        "UPDATE todos SET dead_reason = CASE WHEN EXISTS (SELECT 1 FROM attempts a WHERE "
        "a.todo_id = todos.id AND a.outcome = 'dead_lettered' AND a.error = 'lease expired') "
        "THEN 'lease_expired' WHEN EXISTS (SELECT 1 FROM attempts a WHERE a.todo_id = todos.id "
        "AND a.outcome = 'dead_lettered') THEN 'attempts_exhausted' ELSE 'endpoint_revoked' END "
        "WHERE dead_letter"
    )
    op.create_table(
        "todo_events",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("todo_id", sa.String(length=40), nullable=False),
        sa.Column("action", sa.String(length=20), nullable=False),
        sa.Column("actor", sa.String(length=100), nullable=False),
        sa.Column("human_id", sa.String(length=40), nullable=True),
        sa.Column("from_state", sa.String(length=20), nullable=False),
        sa.Column("to_state", sa.String(length=20), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["todo_id"], ["todos.id"], name=op.f("fk_todo_events_todo_id_todos"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_todo_events")),
    )
    with op.batch_alter_table("todo_events") as batch:
        batch.create_index(batch.f("ix_todo_events_todo_id"), ["todo_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("todo_events") as batch:
        batch.drop_index(batch.f("ix_todo_events_todo_id"))
    op.drop_table("todo_events")
    # Cancelled todos have no state before this revision: they become dead letters.
    op.execute("UPDATE todos SET state = 'failed', dead_letter = true WHERE state = 'cancelled'")
    _states(OLD_STATES)
    with op.batch_alter_table("todos") as batch:
        batch.drop_column("dead_reason")
