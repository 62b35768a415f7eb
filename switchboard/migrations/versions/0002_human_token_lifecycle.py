"""human token lifecycle: revoked/rotated times on humans; session names, last seen, user agent and
the one-time reveal on web sessions

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

import switchboard.models

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("humans") as batch:
        batch.add_column(
            sa.Column("token_rotated_at", switchboard.models.UTCDateTime(timezone=True), nullable=True)
        )
        batch.add_column(
            sa.Column("revoked_at", switchboard.models.UTCDateTime(timezone=True), nullable=True)
        )

    # Sessions open at upgrade time keep working: each gets a name, and "last seen" starts at its login.
    with op.batch_alter_table("web_sessions") as batch:
        batch.add_column(sa.Column("ref", sa.String(length=40), nullable=True))
        batch.add_column(
            sa.Column("last_seen_at", switchboard.models.UTCDateTime(timezone=True), nullable=True)
        )
        batch.add_column(sa.Column("user_agent", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("reveal", sa.LargeBinary(), nullable=True))
    conn = op.get_bind()
    sessions = sa.table("web_sessions", sa.column("id_hash", sa.String), sa.column("ref", sa.String))
    for (id_hash,) in conn.execute(sa.select(sessions.c.id_hash)).all():
        # Not ids.new_id: a migration must not depend on code that may change; any unique name does.
        ref = "ws_" + secrets.token_hex(13)
        conn.execute(sessions.update().where(sessions.c.id_hash == id_hash).values(ref=ref))
    op.execute("UPDATE web_sessions SET last_seen_at = created_at")
    with op.batch_alter_table("web_sessions") as batch:
        batch.alter_column("ref", existing_type=sa.String(length=40), nullable=False)
        batch.alter_column(
            "last_seen_at", existing_type=switchboard.models.UTCDateTime(timezone=True), nullable=False
        )
        batch.create_unique_constraint(op.f("uq_web_sessions_ref"), ["ref"])
        batch.create_index(op.f("ix_web_sessions_human_id"), ["human_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("web_sessions") as batch:
        batch.drop_index(op.f("ix_web_sessions_human_id"))
        batch.drop_constraint(op.f("uq_web_sessions_ref"), type_="unique")
        batch.drop_column("reveal")
        batch.drop_column("user_agent")
        batch.drop_column("last_seen_at")
        batch.drop_column("ref")
    with op.batch_alter_table("humans") as batch:
        batch.drop_column("revoked_at")
        batch.drop_column("token_rotated_at")
