"""intake: trusted actors and routing rules per webhook, the quarantine (held todos), ``once``
keys, and the routing trace on events and todos (docs/routing.md)

Webhooks that exist when this ships are trusted as before: every one whose kind is not ``generic``
gets ``{"allow_all": true}``, so nothing in service changes (kinds whose deliveries name no actors
ignore it). Generic webhooks keep null: their bodies are not signed, so trust cannot apply.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import switchboard.models

revision = "0008"
# The head when this was written; the revision ids are names, not an order.
down_revision = "0007"
branch_labels = None
depends_on = None

OLD_TODO_STATES = "state IN ('pending', 'claimed', 'done', 'failed', 'cancelled')"
NEW_TODO_STATES = "state IN ('pending', 'claimed', 'done', 'failed', 'cancelled', 'held')"
OLD_DISPOSITIONS = "disposition IN ('routed', 'self_reply', 'duplicate', 'ignored')"
NEW_DISPOSITIONS = (
    "disposition IN ('routed', 'self_reply', 'duplicate', 'ignored', 'quarantined', 'dropped', 'faulted')"
)
ONCE_WHERE = "once_key IS NOT NULL AND state IN ('pending', 'claimed')"


def _checks(todo_states: str, dispositions: str) -> None:
    # SQLite rebuilds the table (batch mode) with the new CHECK; PostgreSQL swaps the constraint.
    with op.batch_alter_table("todos") as batch:
        batch.drop_constraint(op.f("ck_todos_state"), type_="check")
        batch.create_check_constraint(op.f("ck_todos_state"), todo_states)
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint(op.f("ck_events_disposition"), type_="check")
        batch.create_check_constraint(op.f("ck_events_disposition"), dispositions)


def upgrade() -> None:
    with op.batch_alter_table("webhooks") as batch:
        batch.add_column(sa.Column("trust", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("routing", sa.JSON(), nullable=True))
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("routing", sa.JSON(), nullable=True))
    with op.batch_alter_table("todos") as batch:
        batch.add_column(sa.Column("hold_reason", sa.String(length=20), nullable=True))
        batch.add_column(sa.Column("hold_detail", sa.JSON(), nullable=True))
        batch.add_column(
            sa.Column("hold_expires_at", switchboard.models.UTCDateTime(timezone=True), nullable=True)
        )
        batch.add_column(sa.Column("routing", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("once_key", sa.String(length=300), nullable=True))
    _checks(NEW_TODO_STATES, NEW_DISPOSITIONS)
    op.create_index(
        "uq_todos_once",
        "todos",
        ["endpoint_id", "queue", "once_key"],
        unique=True,
        sqlite_where=sa.text(ONCE_WHERE),
        postgresql_where=sa.text(ONCE_WHERE),
    )
    op.create_index(
        "ix_todos_held",
        "todos",
        ["hold_expires_at"],
        sqlite_where=sa.text("state = 'held'"),
        postgresql_where=sa.text("state = 'held'"),
    )
    webhooks = sa.table("webhooks", sa.column("source", sa.String()), sa.column("trust", sa.JSON()))
    op.execute(webhooks.update().where(webhooks.c.source != "generic").values(trust={"allow_all": True}))


def downgrade() -> None:
    op.drop_index("ix_todos_held", table_name="todos")
    op.drop_index("uq_todos_once", table_name="todos")
    # Held todos have no state before this revision: they end as cancelled; the new dispositions
    # become the nearest old one (nothing was minted for them).
    op.execute("UPDATE todos SET state = 'cancelled' WHERE state = 'held'")
    op.execute(
        "UPDATE events SET disposition = 'ignored' WHERE disposition IN ('quarantined', 'dropped', 'faulted')"
    )
    _checks(OLD_TODO_STATES, OLD_DISPOSITIONS)
    with op.batch_alter_table("todos") as batch:
        for column in ("once_key", "routing", "hold_expires_at", "hold_detail", "hold_reason"):
            batch.drop_column(column)
    with op.batch_alter_table("events") as batch:
        batch.drop_column("routing")
    with op.batch_alter_table("webhooks") as batch:
        batch.drop_column("routing")
        batch.drop_column("trust")
