"""initial schema

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import switchboard.models

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "humans",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("handle", sa.String(length=63), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=True),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("token_display", sa.String(length=32), nullable=False),
        sa.Column("created_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_humans")),
        sa.UniqueConstraint("handle", name=op.f("uq_humans_handle")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_humans_token_hash")),
    )
    op.create_table(
        "reply_buckets",
        sa.Column("endpoint_id", sa.String(length=40), nullable=False),
        sa.Column("tokens", sa.Double(), nullable=False),
        sa.Column("updated_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("endpoint_id", name=op.f("pk_reply_buckets")),
    )
    op.create_table(
        "teams",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("slug", sa.String(length=63), nullable=False),
        sa.Column("created_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_teams")),
        sa.UniqueConstraint("slug", name=op.f("uq_teams_slug")),
    )
    op.create_table(
        "connections",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("owner_human_id", sa.String(length=40), nullable=True),
        sa.Column("owner_team_id", sa.String(length=40), nullable=True),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("account_key", sa.String(length=300), nullable=False),
        sa.Column("account_key_lower", sa.String(length=300), nullable=False),
        sa.Column("secret_ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("secret_key_id", sa.String(length=40), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("targets", sa.JSON(), nullable=True),
        sa.Column("endpoints", sa.JSON(), nullable=True),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("last_test", sa.JSON(), nullable=True),
        sa.Column("blocked_until", switchboard.models.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(owner_human_id IS NULL) <> (owner_team_id IS NULL)", name=op.f("ck_connections_one_owner")
        ),
        sa.ForeignKeyConstraint(
            ["owner_human_id"], ["humans.id"], name=op.f("fk_connections_owner_human_id_humans")
        ),
        sa.ForeignKeyConstraint(
            ["owner_team_id"], ["teams.id"], name=op.f("fk_connections_owner_team_id_teams")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_connections")),
    )
    op.create_table(
        "endpoints",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("slug", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("owner_human_id", sa.String(length=40), nullable=True),
        sa.Column("owner_team_id", sa.String(length=40), nullable=True),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("token_display", sa.String(length=32), nullable=False),
        sa.Column("queues", sa.JSON(), nullable=False),
        sa.Column("verbs", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("expires_at", switchboard.models.UTCDateTime(timezone=True), nullable=True),
        sa.Column("default_lease_seconds", sa.Integer(), nullable=False),
        sa.Column("created_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", switchboard.models.UTCDateTime(timezone=True), nullable=True),
        sa.CheckConstraint("state IN ('active', 'revoked')", name=op.f("ck_endpoints_state")),
        sa.CheckConstraint(
            "(owner_human_id IS NULL) <> (owner_team_id IS NULL)", name=op.f("ck_endpoints_one_owner")
        ),
        sa.ForeignKeyConstraint(
            ["owner_human_id"], ["humans.id"], name=op.f("fk_endpoints_owner_human_id_humans")
        ),
        sa.ForeignKeyConstraint(
            ["owner_team_id"], ["teams.id"], name=op.f("fk_endpoints_owner_team_id_teams")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_endpoints")),
        sa.UniqueConstraint("slug", name=op.f("uq_endpoints_slug")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_endpoints_token_hash")),
    )
    with op.batch_alter_table("endpoints", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_endpoints_owner_human_id"), ["owner_human_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_endpoints_owner_team_id"), ["owner_team_id"], unique=False)

    op.create_table(
        "memberships",
        sa.Column("team_id", sa.String(length=40), nullable=False),
        sa.Column("human_id", sa.String(length=40), nullable=False),
        sa.Column("role", sa.String(length=10), nullable=False),
        sa.Column("created_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint("role IN ('owner', 'admin', 'member')", name=op.f("ck_memberships_role")),
        sa.ForeignKeyConstraint(
            ["human_id"], ["humans.id"], name=op.f("fk_memberships_human_id_humans"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["team_id"], ["teams.id"], name=op.f("fk_memberships_team_id_teams"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("team_id", "human_id", name=op.f("pk_memberships")),
    )
    op.create_table(
        "web_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("human_id", sa.String(length=40), nullable=False),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        sa.Column("created_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["human_id"], ["humans.id"], name=op.f("fk_web_sessions_human_id_humans"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_web_sessions")),
    )
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("endpoint_id", sa.String(length=40), nullable=False),
        sa.Column("source", sa.String(length=40), nullable=False),
        sa.Column("queue", sa.String(length=63), nullable=False),
        sa.Column("ingest_token_hash", sa.String(length=64), nullable=False),
        sa.Column("ingest_token_display", sa.String(length=32), nullable=False),
        sa.Column("trust_mode", sa.String(length=10), nullable=False),
        sa.Column("secret_state", sa.String(length=10), nullable=False),
        sa.Column("secret_ciphertext", sa.LargeBinary(), nullable=True),
        sa.Column("secret_key_id", sa.String(length=40), nullable=True),
        sa.Column("created_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("secret_rotated_at", switchboard.models.UTCDateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "secret_state IN ('set', 'awaiting', 'none')", name=op.f("ck_webhooks_secret_state")
        ),
        sa.CheckConstraint("trust_mode IN ('signed', 'token')", name=op.f("ck_webhooks_trust_mode")),
        sa.ForeignKeyConstraint(
            ["endpoint_id"], ["endpoints.id"], name=op.f("fk_webhooks_endpoint_id_endpoints")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
        sa.UniqueConstraint("ingest_token_hash", name=op.f("uq_webhooks_ingest_token_hash")),
    )
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_webhooks_endpoint_id"), ["endpoint_id"], unique=False)

    op.create_table(
        "events",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("webhook_id", sa.String(length=40), nullable=True),
        sa.Column("source", sa.String(length=40), nullable=False),
        sa.Column("event_type", sa.String(length=100), nullable=False),
        sa.Column("delivery_key", sa.String(length=200), nullable=False),
        sa.Column("secondary_key", sa.String(length=200), nullable=True),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("verified", sa.Boolean(), nullable=False),
        sa.Column("verify_detail", sa.String(length=200), nullable=False),
        sa.Column("trust_mode", sa.String(length=10), nullable=False),
        sa.Column("disposition", sa.String(length=12), nullable=False),
        sa.Column("received_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "disposition IN ('routed', 'self_reply', 'duplicate', 'ignored')",
            name=op.f("ck_events_disposition"),
        ),
        sa.ForeignKeyConstraint(
            ["webhook_id"], ["webhooks.id"], name=op.f("fk_events_webhook_id_webhooks"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
        sa.UniqueConstraint("webhook_id", "delivery_key", name=op.f("uq_events_webhook_id")),
        sa.UniqueConstraint("webhook_id", "secondary_key", name="uq_events_webhook_secondary"),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_events_received_at"), ["received_at"], unique=False)

    op.create_table(
        "routes",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("webhook_id", sa.String(length=40), nullable=False),
        sa.Column("endpoint_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["endpoint_id"], ["endpoints.id"], name=op.f("fk_routes_endpoint_id_endpoints")
        ),
        sa.ForeignKeyConstraint(
            ["webhook_id"], ["webhooks.id"], name=op.f("fk_routes_webhook_id_webhooks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_routes")),
        sa.UniqueConstraint("webhook_id", "endpoint_id", name=op.f("uq_routes_webhook_id")),
    )
    with op.batch_alter_table("routes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_routes_webhook_id"), ["webhook_id"], unique=False)

    op.create_table(
        "todos",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("endpoint_id", sa.String(length=40), nullable=False),
        sa.Column("event_id", sa.String(length=40), nullable=True),
        sa.Column("queue", sa.String(length=63), nullable=False),
        sa.Column("source", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=100), nullable=False),
        sa.Column("title", sa.String(length=300), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("lease_expires_at", switchboard.models.UTCDateTime(timezone=True), nullable=True),
        sa.Column("lease_token_hash", sa.String(length=64), nullable=True),
        sa.Column("next_retry_at", switchboard.models.UTCDateTime(timezone=True), nullable=True),
        sa.Column("dead_letter", sa.Boolean(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("payload_size", sa.Integer(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("reply_to", sa.JSON(), nullable=True),
        sa.Column("finished_at", switchboard.models.UTCDateTime(timezone=True), nullable=True),
        sa.Column("finished_by", sa.String(length=40), nullable=True),
        sa.Column("ring_count", sa.Integer(), nullable=False),
        sa.Column("next_ring_at", switchboard.models.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint("state IN ('pending', 'claimed', 'done', 'failed')", name=op.f("ck_todos_state")),
        sa.ForeignKeyConstraint(
            ["endpoint_id"], ["endpoints.id"], name=op.f("fk_todos_endpoint_id_endpoints")
        ),
        sa.ForeignKeyConstraint(["event_id"], ["events.id"], name=op.f("fk_todos_event_id_events")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_todos")),
    )
    with op.batch_alter_table("todos", schema=None) as batch_op:
        batch_op.create_index(
            "ix_todos_claimable",
            ["endpoint_id", "queue", "created_at"],
            unique=False,
            sqlite_where=sa.text("state = 'pending'"),
            postgresql_where=sa.text("state = 'pending'"),
        )
        batch_op.create_index("ix_todos_endpoint_created", ["endpoint_id", "created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_todos_event_id"), ["event_id"], unique=False)
        batch_op.create_index(
            "ix_todos_lease",
            ["lease_expires_at"],
            unique=False,
            sqlite_where=sa.text("state = 'claimed'"),
            postgresql_where=sa.text("state = 'claimed'"),
        )
        batch_op.create_index(
            "ix_todos_retry",
            ["next_retry_at"],
            unique=False,
            sqlite_where=sa.text("state = 'failed'"),
            postgresql_where=sa.text("state = 'failed'"),
        )
        batch_op.create_index(
            "ix_todos_ring",
            ["next_ring_at"],
            unique=False,
            sqlite_where=sa.text("state = 'pending'"),
            postgresql_where=sa.text("state = 'pending'"),
        )

    op.create_table(
        "attempts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("todo_id", sa.String(length=40), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("endpoint_id", sa.String(length=40), nullable=False),
        sa.Column("claimed_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("lease_expires_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("heartbeats", sa.Integer(), nullable=False),
        sa.Column("last_heartbeat_at", switchboard.models.UTCDateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("ended_at", switchboard.models.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["todo_id"], ["todos.id"], name=op.f("fk_attempts_todo_id_todos"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
        sa.UniqueConstraint("todo_id", "number", name=op.f("uq_attempts_todo_id")),
    )
    op.create_table(
        "replies",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("todo_id", sa.String(length=40), nullable=False),
        sa.Column("endpoint_id", sa.String(length=40), nullable=False),
        sa.Column("idempotency_key", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("connection_id", sa.String(length=40), nullable=True),
        sa.Column("connection_name", sa.String(length=100), nullable=False),
        sa.Column("connection_fingerprint", sa.String(length=64), nullable=False),
        sa.Column("owner_scope", sa.String(length=40), nullable=False),
        sa.Column("address_kind", sa.String(length=40), nullable=False),
        sa.Column("display", sa.String(length=300), nullable=False),
        sa.Column("thread_key", sa.String(length=300), nullable=False),
        sa.Column("text_hash", sa.String(length=64), nullable=False),
        sa.Column("provider_object_id", sa.String(length=200), nullable=True),
        sa.Column("permalink", sa.Text(), nullable=True),
        sa.Column("error_class", sa.String(length=20), nullable=True),
        sa.Column("error_code", sa.String(length=100), nullable=True),
        sa.Column("created_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", switchboard.models.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "state IN ('pending', 'sent', 'failed', 'unknown')", name=op.f("ck_replies_state")
        ),
        sa.ForeignKeyConstraint(
            ["todo_id"], ["todos.id"], name=op.f("fk_replies_todo_id_todos"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replies")),
        sa.UniqueConstraint("todo_id", "idempotency_key", name=op.f("uq_replies_todo_id")),
    )
    with op.batch_alter_table("replies", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_replies_endpoint_id"), ["endpoint_id"], unique=False)
        batch_op.create_index("ix_replies_object", ["provider_object_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_replies_owner_scope"), ["owner_scope"], unique=False)
        batch_op.create_index(
            "ix_replies_pending",
            ["created_at"],
            unique=False,
            sqlite_where=sa.text("state = 'pending'"),
            postgresql_where=sa.text("state = 'pending'"),
        )
        batch_op.create_index(batch_op.f("ix_replies_todo_id"), ["todo_id"], unique=False)

    # Expression indexes (autogenerate cannot see these): one connection per (scope, kind, account)
    # and one name per scope, whichever of human or team owns it.
    op.create_index(
        "uq_connections_scope_account",
        "connections",
        [sa.text("coalesce(owner_human_id, owner_team_id)"), "kind", "account_key_lower"],
        unique=True,
    )
    op.create_index(
        "uq_connections_scope_name",
        "connections",
        [sa.text("coalesce(owner_human_id, owner_team_id)"), "name"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("uq_connections_scope_name", table_name="connections")
    op.drop_index("uq_connections_scope_account", table_name="connections")
    with op.batch_alter_table("replies", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_replies_todo_id"))
        batch_op.drop_index(
            "ix_replies_pending",
            sqlite_where=sa.text("state = 'pending'"),
            postgresql_where=sa.text("state = 'pending'"),
        )
        batch_op.drop_index(batch_op.f("ix_replies_owner_scope"))
        batch_op.drop_index("ix_replies_object")
        batch_op.drop_index(batch_op.f("ix_replies_endpoint_id"))

    op.drop_table("replies")
    op.drop_table("attempts")
    with op.batch_alter_table("todos", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_todos_ring",
            sqlite_where=sa.text("state = 'pending'"),
            postgresql_where=sa.text("state = 'pending'"),
        )
        batch_op.drop_index(
            "ix_todos_retry",
            sqlite_where=sa.text("state = 'failed'"),
            postgresql_where=sa.text("state = 'failed'"),
        )
        batch_op.drop_index(
            "ix_todos_lease",
            sqlite_where=sa.text("state = 'claimed'"),
            postgresql_where=sa.text("state = 'claimed'"),
        )
        batch_op.drop_index(batch_op.f("ix_todos_event_id"))
        batch_op.drop_index("ix_todos_endpoint_created")
        batch_op.drop_index(
            "ix_todos_claimable",
            sqlite_where=sa.text("state = 'pending'"),
            postgresql_where=sa.text("state = 'pending'"),
        )

    op.drop_table("todos")
    with op.batch_alter_table("routes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_routes_webhook_id"))

    op.drop_table("routes")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_events_received_at"))

    op.drop_table("events")
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhooks_endpoint_id"))

    op.drop_table("webhooks")
    op.drop_table("web_sessions")
    op.drop_table("memberships")
    with op.batch_alter_table("endpoints", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_endpoints_owner_team_id"))
        batch_op.drop_index(batch_op.f("ix_endpoints_owner_human_id"))

    op.drop_table("endpoints")
    op.drop_table("connections")
    op.drop_table("teams")
    op.drop_table("reply_buckets")
    op.drop_table("humans")
