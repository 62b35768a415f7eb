"""``webhooks.config_version``: a number that every change to a webhook, its routes or the
endpoints it delivers to moves on, kept by triggers in the database itself

Ingest's group-commit writer checks, in each batch's transaction, that every delivery was decided on
its webhook's configuration as it is now (``ingest_config``). It read the webhook, its owner endpoint
and its routes' endpoints again for that, in two joined statements that share-locked every one of
those rows (PostgreSQL). With this number it reads, and share-locks, one narrow row per webhook: a
change to a route or an endpoint updates the webhooks it concerns, so it waits for, or is seen by,
that same lock (issue 12: 6-10% more deliveries/s on PostgreSQL, measured side by side).

Triggers, not the application, move it on: a change made with raw SQL, by an older process during an
upgrade, or by a tool that bypasses Switchboard's own functions is caught as before, when the writer
compared every column. Any ``UPDATE`` counts, even one that sets a row to what it was (a needless
re-decision, never a wrong answer). On PostgreSQL the triggers on routes and endpoints fire once per
statement and lock the webhooks it concerns in id order, the order the writer share-locks them in,
so a change and a batch wait for each other instead of deadlocking.

SQLite rebuilds a table for some changes (``batch_alter_table``) and a rebuilt table loses its
triggers: a later migration that rebuilds ``webhooks``, ``routes`` or ``endpoints`` must create these
again (``create_triggers``). ``tests/test_config_version.py`` checks every change still moves the
number at head.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
# The head when this was written; the revision ids are names, not an order.
down_revision = "0009"
branch_labels = None
depends_on = None

# The webhooks a changed endpoint concerns: those it owns and those routed to it.
_CONCERNED = "endpoint_id = OLD.id OR id IN (SELECT webhook_id FROM routes WHERE endpoint_id = OLD.id)"
_BUMP = "UPDATE webhooks SET config_version = config_version + 1 WHERE"


def _bump_in_order(which: str) -> str:
    """PL/pgSQL: lock the webhooks ``which`` selects in id order, then move their versions on. The
    ingest writer share-locks its batch's webhooks in id order too, so a change that concerns
    several webhooks waits for a batch holding one of them, or the batch for it, instead of the two
    deadlocking (``tests/test_config_version.py``)."""
    return f"""
      PERFORM 1 FROM webhooks WHERE {which} ORDER BY id FOR NO KEY UPDATE;
      {_BUMP} {which};"""


# PostgreSQL: per statement, with the changed rows as transition tables (one trigger per event:
# PostgreSQL takes transition tables only on a trigger of one event), so that a statement changing
# many routes or endpoints locks every webhook they concern in one ordered pass.
_ROUTES_OF = "id IN (SELECT webhook_id FROM changed_routes)"
_ROUTES_MOVED = "id IN (SELECT webhook_id FROM changed_routes UNION SELECT webhook_id FROM moved_routes)"
_ENDPOINTS_OF = (
    "endpoint_id IN (SELECT id FROM changed_endpoints)"
    " OR id IN (SELECT webhook_id FROM routes WHERE endpoint_id IN (SELECT id FROM changed_endpoints))"
)
POSTGRESQL = [
    """CREATE FUNCTION switchboard_webhook_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN NEW.config_version := OLD.config_version + 1; RETURN NEW; END $$""",
    """CREATE TRIGGER webhooks_config_version BEFORE UPDATE ON webhooks
    FOR EACH ROW EXECUTE FUNCTION switchboard_webhook_changed()""",
    f"""CREATE FUNCTION switchboard_routes_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN {_bump_in_order(_ROUTES_OF)} RETURN NULL; END $$""",
    f"""CREATE FUNCTION switchboard_routes_moved() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN {_bump_in_order(_ROUTES_MOVED)} RETURN NULL; END $$""",
    """CREATE TRIGGER routes_inserted_config_version AFTER INSERT ON routes
    REFERENCING NEW TABLE AS changed_routes FOR EACH STATEMENT EXECUTE FUNCTION switchboard_routes_changed()""",
    """CREATE TRIGGER routes_deleted_config_version AFTER DELETE ON routes
    REFERENCING OLD TABLE AS changed_routes FOR EACH STATEMENT EXECUTE FUNCTION switchboard_routes_changed()""",
    """CREATE TRIGGER routes_updated_config_version AFTER UPDATE ON routes
    REFERENCING OLD TABLE AS changed_routes NEW TABLE AS moved_routes
    FOR EACH STATEMENT EXECUTE FUNCTION switchboard_routes_moved()""",
    f"""CREATE FUNCTION switchboard_endpoints_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN {_bump_in_order(_ENDPOINTS_OF)} RETURN NULL; END $$""",
    """CREATE TRIGGER endpoints_updated_config_version AFTER UPDATE ON endpoints
    REFERENCING OLD TABLE AS changed_endpoints FOR EACH STATEMENT EXECUTE FUNCTION switchboard_endpoints_changed()""",
    """CREATE TRIGGER endpoints_deleted_config_version AFTER DELETE ON endpoints
    REFERENCING OLD TABLE AS changed_endpoints FOR EACH STATEMENT EXECUTE FUNCTION switchboard_endpoints_changed()""",
]
POSTGRESQL_DROP = [
    *(
        f"DROP TRIGGER IF EXISTS {name}_config_version ON {table}"
        for name, table in (
            ("endpoints_deleted", "endpoints"),
            ("endpoints_updated", "endpoints"),
            ("routes_updated", "routes"),
            ("routes_deleted", "routes"),
            ("routes_inserted", "routes"),
            ("webhooks", "webhooks"),
        )
    ),
    "DROP FUNCTION IF EXISTS switchboard_endpoints_changed()",
    "DROP FUNCTION IF EXISTS switchboard_routes_moved()",
    "DROP FUNCTION IF EXISTS switchboard_routes_changed()",
    "DROP FUNCTION IF EXISTS switchboard_webhook_changed()",
]

# SQLite's triggers cannot assign to NEW: the webhook's own is an update after the update, guarded
# so that it does not move the number twice (and would stop even with recursive triggers on).
SQLITE = [
    """CREATE TRIGGER webhooks_config_version AFTER UPDATE ON webhooks
    FOR EACH ROW WHEN NEW.config_version = OLD.config_version
    BEGIN UPDATE webhooks SET config_version = OLD.config_version + 1 WHERE id = NEW.id; END""",
    f"""CREATE TRIGGER routes_config_version_insert AFTER INSERT ON routes
    FOR EACH ROW BEGIN {_BUMP} id = NEW.webhook_id; END""",
    f"""CREATE TRIGGER routes_config_version_update AFTER UPDATE ON routes
    FOR EACH ROW BEGIN {_BUMP} id IN (OLD.webhook_id, NEW.webhook_id); END""",
    f"""CREATE TRIGGER routes_config_version_delete AFTER DELETE ON routes
    FOR EACH ROW BEGIN {_BUMP} id = OLD.webhook_id; END""",
    f"""CREATE TRIGGER endpoints_config_version_update AFTER UPDATE ON endpoints
    FOR EACH ROW BEGIN {_BUMP} {_CONCERNED}; END""",
    f"""CREATE TRIGGER endpoints_config_version_delete AFTER DELETE ON endpoints
    FOR EACH ROW BEGIN {_BUMP} {_CONCERNED}; END""",
]
SQLITE_DROP = [
    f"DROP TRIGGER IF EXISTS {name}"
    for name in (
        "endpoints_config_version_delete",
        "endpoints_config_version_update",
        "routes_config_version_delete",
        "routes_config_version_update",
        "routes_config_version_insert",
        "webhooks_config_version",
    )
]


def _on_sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def create_triggers() -> None:
    for statement in SQLITE if _on_sqlite() else POSTGRESQL:
        op.execute(statement)


def drop_triggers() -> None:
    for statement in SQLITE_DROP if _on_sqlite() else POSTGRESQL_DROP:
        op.execute(statement)


def upgrade() -> None:
    # A constant default: SQLite adds the column in place (no table rebuild, no lost triggers).
    op.add_column(
        "webhooks", sa.Column("config_version", sa.BigInteger(), nullable=False, server_default=sa.text("0"))
    )
    create_triggers()


def downgrade() -> None:
    drop_triggers()
    with op.batch_alter_table("webhooks") as batch:
        batch.drop_column("config_version")
