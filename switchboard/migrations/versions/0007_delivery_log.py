"""the delivery log: refusals and duplicates as small rows (delivery_records), redeliveries marked
on their event (events.redelivery_of), and the index the per-webhook log pages by

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import switchboard.models

revision = "0007"
# The head when this was written; the revision ids are names, not an order.
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("redelivery_of", sa.String(length=40), nullable=True))
    op.create_index("ix_events_webhook_log", "events", ["webhook_id", "id"])
    op.create_table(
        "delivery_records",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("webhook_id", sa.String(length=40), nullable=False),
        sa.Column("received_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("disposition", sa.String(length=12), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(length=40), nullable=False),
        sa.Column("detail", sa.String(length=200), nullable=False),
        sa.Column("delivery_key", sa.String(length=200), nullable=True),
        sa.Column("original_event_id", sa.String(length=40), nullable=True),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("client", sa.String(length=100), nullable=True),
        sa.CheckConstraint(
            "disposition IN ('refused', 'duplicate')", name=op.f("ck_delivery_records_disposition")
        ),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhooks.id"],
            name=op.f("fk_delivery_records_webhook_id_webhooks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_delivery_records")),
    )
    op.create_index("ix_delivery_records_webhook_log", "delivery_records", ["webhook_id", "id"])
    op.create_index(op.f("ix_delivery_records_received_at"), "delivery_records", ["received_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_delivery_records_received_at"), table_name="delivery_records")
    op.drop_index("ix_delivery_records_webhook_log", table_name="delivery_records")
    op.drop_table("delivery_records")
    op.drop_index("ix_events_webhook_log", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("redelivery_of")
