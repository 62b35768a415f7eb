"""exact reply destinations: the instance a webhook serves; the provider kind on replies (echo key)

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
# The head when this was written; the revision ids are names, not an order.
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing webhooks start unbound: each binds to the instance of its next verified delivery
    # with a reply address (or the owner pins one).
    with op.batch_alter_table("webhooks") as batch:
        batch.add_column(sa.Column("instance", sa.String(length=300), nullable=True))
    # Existing replies keep a null provider; echo matching still keys them by their thread, whose
    # display names the provider for every bundled kind.
    with op.batch_alter_table("replies") as batch:
        batch.add_column(sa.Column("provider", sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("replies") as batch:
        batch.drop_column("provider")
    with op.batch_alter_table("webhooks") as batch:
        batch.drop_column("instance")
