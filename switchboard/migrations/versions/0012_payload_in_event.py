"""A todo's payload may be kept only on its event: ``todos.payload`` null means the payload is the
event's raw body, byte for byte

A signed delivery's todo stored its payload as a second copy of the body, written again as compact
JSON: on PostgreSQL the copy's compression, TOAST rows and WAL were about a tenth of ingest's
throughput at 32 senders (bench/HISTORY.md, "The session of 2026-12-05, evening"). When the kind
declares that its payload is the body as read (``SourceKind.payload_is_body``) and the body was read
as it is, the todo now keeps no copy; every reader takes the event's body instead
(``todos.payload_column``). Events are never deleted while a todo points at them.

Todos stored before this keep their own payload. SQLite rebuilds the table (batch mode) without
the column's NOT NULL.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
# The head when this was written; the revision ids are names, not an order.
down_revision = "0011"
branch_labels = None
depends_on = None

CHECK = "payload IS NOT NULL OR event_id IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("todos") as batch:
        batch.alter_column("payload", existing_type=sa.LargeBinary(), nullable=True)
        batch.create_check_constraint(op.f("ck_todos_payload"), CHECK)


def downgrade() -> None:
    # The todos that kept no copy get their event's body back first.
    op.execute(
        "UPDATE todos SET payload = (SELECT events.body FROM events WHERE events.id = todos.event_id)"
        " WHERE payload IS NULL"
    )
    with op.batch_alter_table("todos") as batch:
        batch.drop_constraint(op.f("ck_todos_payload"), type_="check")
        batch.alter_column("payload", existing_type=sa.LargeBinary(), nullable=False)
