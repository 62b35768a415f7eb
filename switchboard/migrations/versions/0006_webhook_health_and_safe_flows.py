"""safe flows and health: a webhook's name, description, pause and the previous signing secret
with the end of its overlap; the one-time notice on web sessions

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import switchboard.models

revision = "0006"
# The head when this was written; the revision ids are names, not an order.
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhooks") as batch:
        batch.add_column(sa.Column("name", sa.String(length=100), nullable=True))
        batch.add_column(sa.Column("description", sa.String(length=500), nullable=True))
        batch.add_column(sa.Column("paused_at", switchboard.models.UTCDateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("previous_secret_ciphertext", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("previous_secret_key_id", sa.String(length=40), nullable=True))
        batch.add_column(
            sa.Column(
                "previous_secret_expires_at", switchboard.models.UTCDateTime(timezone=True), nullable=True
            )
        )
    with op.batch_alter_table("web_sessions") as batch:
        batch.add_column(sa.Column("flash", sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("web_sessions") as batch:
        batch.drop_column("flash")
    with op.batch_alter_table("webhooks") as batch:
        for column in (
            "previous_secret_expires_at",
            "previous_secret_key_id",
            "previous_secret_ciphertext",
            "paused_at",
            "description",
            "name",
        ):
            batch.drop_column(column)
