"""The tables. Every change here ships with a migration in ``migrations/versions``.

Owner scope: endpoints and connections belong to exactly one human or one team, enforced by a CHECK.
Ids carry a type prefix (``hu_``, ``tm_``), so ``coalesce(owner_human_id, owner_team_id)`` names the
scope unambiguously and the per-scope unique indexes can use it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    FetchedValue,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both engines (SQLite would otherwise hand back naive ones)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime")
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            from datetime import UTC

            value = value.replace(tzinfo=UTC)
        return value


OWNER_CHECK = "(owner_human_id IS NULL) <> (owner_team_id IS NULL)"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON, list[str]: JSON}


class Human(Base):
    __tablename__ = "humans"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    handle: Mapped[str] = mapped_column(String(63), unique=True)
    email: Mapped[str | None] = mapped_column(String(320))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    token_display: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime]
    # When the current token was issued by a rotation (None: it is still the one from ``human add``).
    token_rotated_at: Mapped[datetime | None]
    # Set by ``human revoke``: no token of this human is accepted until a rotation issues a new one.
    revoked_at: Mapped[datetime | None]


class Team(Base):
    __tablename__ = "teams"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    slug: Mapped[str] = mapped_column(String(63), unique=True)
    created_at: Mapped[datetime]


class Membership(Base):
    __tablename__ = "memberships"
    __table_args__ = (CheckConstraint("role IN ('owner', 'admin', 'member')", name="role"),)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True)
    human_id: Mapped[str] = mapped_column(ForeignKey("humans.id", ondelete="CASCADE"), primary_key=True)
    role: Mapped[str] = mapped_column(String(10))
    created_at: Mapped[datetime]


class Endpoint(Base):
    """An agent's identity and grant. Grants never widen: to change them, vend a new endpoint."""

    __tablename__ = "endpoints"
    __table_args__ = (
        CheckConstraint(OWNER_CHECK, name="one_owner"),
        CheckConstraint("state IN ('active', 'revoked')", name="state"),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    slug: Mapped[str] = mapped_column(String(63), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    owner_human_id: Mapped[str | None] = mapped_column(ForeignKey("humans.id"), index=True)
    owner_team_id: Mapped[str | None] = mapped_column(ForeignKey("teams.id"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    token_display: Mapped[str] = mapped_column(String(32))
    queues: Mapped[list[str]]
    verbs: Mapped[list[str]]
    state: Mapped[str] = mapped_column(String(10), default="active")
    expires_at: Mapped[datetime | None]
    default_lease_seconds: Mapped[int] = mapped_column(Integer, default=300)
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class Webhook(Base):
    __tablename__ = "webhooks"
    __table_args__ = (
        CheckConstraint("trust_mode IN ('signed', 'token')", name="trust_mode"),
        CheckConstraint("secret_state IN ('set', 'awaiting', 'none')", name="secret_state"),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("endpoints.id"), index=True)
    source: Mapped[str] = mapped_column(String(40))
    queue: Mapped[str] = mapped_column(String(63))
    ingest_token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    ingest_token_display: Mapped[str] = mapped_column(String(32))
    trust_mode: Mapped[str] = mapped_column(String(10))
    secret_state: Mapped[str] = mapped_column(String(10))
    # Vault envelope (see vault.py); plaintext only when no encryption key is configured.
    secret_ciphertext: Mapped[bytes | None] = mapped_column(LargeBinary)
    secret_key_id: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[datetime]
    secret_rotated_at: Mapped[datetime | None]
    # The instance the webhook serves, as the connection kind's account key (``github.com``,
    # ``https://git.example.com/gitea``): pinned at create, or bound by the first verified delivery
    # with a reply address. A later delivery naming another instance gets no reply address.
    instance: Mapped[str | None] = mapped_column(String(300))
    # What the operator calls it and why it exists (shown on the webhooks page; never a secret).
    name: Mapped[str | None] = mapped_column(String(100))
    description: Mapped[str | None] = mapped_column(String(500))
    # Set while its owner has paused it: ingest answers 503 with Retry-After and stores nothing.
    paused_at: Mapped[datetime | None]
    # The secret a rotation replaced, still accepted until ``previous_secret_expires_at`` so the
    # provider can be updated without lost deliveries (same vault envelope as the current one).
    previous_secret_ciphertext: Mapped[bytes | None] = mapped_column(LargeBinary)
    previous_secret_key_id: Mapped[str | None] = mapped_column(String(40))
    previous_secret_expires_at: Mapped[datetime | None]
    # Who may create work (docs/routing.md, "Trusted actors"): ``{"allow_all": true}`` or the kind's
    # actor list (``{"logins": [...], "match": "sender"}``, ``{"actor_ids": [...]}``). Null on a
    # kind whose deliveries name actors means nobody is trusted (fail closed); kinds without actors
    # keep it null.
    trust: Mapped[dict[str, Any] | None]
    # Which events become work (docs/routing.md): ``{"rules": [...], "default_action": ...,
    # "params": {...}}`` as ``rules.check_rule_set`` normalised it; null: every delivery is queued
    # to every live target, as before rules existed.
    routing: Mapped[dict[str, Any] | None]
    # Moved on by the database's own triggers whenever this row, one of its routes or an endpoint it
    # delivers to changes (migration 0010): the ingest writer compares it, instead of every column
    # of those rows, to know a delivery was decided on the webhook as it is now (``ingest_config``).
    config_version: Mapped[int] = mapped_column(
        BigInteger, default=0, server_default=text("0"), server_onupdate=FetchedValue()
    )


class Route(Base):
    """Another endpoint as a fan-out target of a webhook (the webhook's own endpoint is implicit)."""

    __tablename__ = "routes"
    __table_args__ = (UniqueConstraint("webhook_id", "endpoint_id"),)
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"), index=True)
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("endpoints.id"))
    created_at: Mapped[datetime]


class Event(Base):
    """One received delivery, kept with redacted headers and the raw body."""

    __tablename__ = "events"
    __table_args__ = (
        UniqueConstraint("webhook_id", "delivery_key"),
        UniqueConstraint("webhook_id", "secondary_key", name="uq_events_webhook_secondary"),
        CheckConstraint(
            "disposition IN ('routed', 'self_reply', 'duplicate', 'ignored', 'quarantined', 'dropped',"
            " 'faulted')",
            name="disposition",
        ),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    # Kept when a webhook is deleted so that todos keep their provenance.
    webhook_id: Mapped[str | None] = mapped_column(ForeignKey("webhooks.id", ondelete="SET NULL"))
    source: Mapped[str] = mapped_column(String(40))
    event_type: Mapped[str] = mapped_column(String(100))
    delivery_key: Mapped[str] = mapped_column(String(200))
    secondary_key: Mapped[str | None] = mapped_column(String(200))
    headers: Mapped[dict[str, Any]]
    body: Mapped[bytes] = mapped_column(LargeBinary)
    verified: Mapped[bool] = mapped_column(Boolean)
    verify_detail: Mapped[str] = mapped_column(String(200))
    trust_mode: Mapped[str] = mapped_column(String(10))
    disposition: Mapped[str] = mapped_column(String(12))
    received_at: Mapped[datetime] = mapped_column(index=True)
    # An operator's redelivery of a stored delivery: the event it repeats (``deliveries``). Its
    # delivery key is derived from that event's id and a counter, so it never takes the original's.
    redelivery_of: Mapped[str | None] = mapped_column(String(40))
    # How intake decided it (docs/routing.md, "The routing trace"): trust verdict, the rule or
    # default that matched, and what each target got.
    routing: Mapped[dict[str, Any] | None]


# The delivery log of one webhook, newest first, pages by id (``deliveries``).
Index("ix_events_webhook_log", Event.webhook_id, Event.id)


class DeliveryRecord(Base):
    """A delivery of a known webhook that stored no event: a refusal (401, 408, 413, 429, 503, 400)
    or a duplicate of one stored before. A small row, never a header or the body, so an operator
    sees it in the webhook's delivery log. Written off the hot path (``delivery_records``), bounded
    per webhook and minute (the rest counted in one row, ``count``), pruned after a few days."""

    __tablename__ = "delivery_records"
    __table_args__ = (
        CheckConstraint("disposition IN ('refused', 'duplicate')", name="disposition"),
        Index("ix_delivery_records_webhook_log", "webhook_id", "id"),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    received_at: Mapped[datetime] = mapped_column(index=True)
    disposition: Mapped[str] = mapped_column(String(12))
    status: Mapped[int] = mapped_column(Integer)
    # The refusal's code (signature_invalid, rate_limited, …); empty for a duplicate.
    reason: Mapped[str] = mapped_column(String(40))
    detail: Mapped[str] = mapped_column(String(200))
    # A duplicate: its delivery key and the stored event it repeated (gone if that was pruned).
    delivery_key: Mapped[str | None] = mapped_column(String(200))
    original_event_id: Mapped[str | None] = mapped_column(String(40))
    # How many deliveries this row stands for: 1, or the refusals of one minute past the bound.
    count: Mapped[int] = mapped_column(Integer)
    client: Mapped[str | None] = mapped_column(String(100))


class Todo(Base):
    __tablename__ = "todos"
    __table_args__ = (
        # ``cancelled``: an operator ended it (``todos.operator.cancel``); final, like ``done``.
        # ``held``: quarantined (docs/routing.md); never listed, claimed or rung for an agent.
        CheckConstraint(
            "state IN ('pending', 'claimed', 'done', 'failed', 'cancelled', 'held')", name="state"
        ),
        # A payload kept only on the todo's event (``payload`` null) needs the event.
        CheckConstraint("payload IS NOT NULL OR event_id IS NOT NULL", name="payload"),
        # claim_next: the oldest pending todo of one endpoint (optionally one queue). Partial on
        # state so the index stays as small as the backlog, and claim latency flat as it grows.
        Index(
            "ix_todos_claimable",
            "endpoint_id",
            "queue",
            "created_at",
            sqlite_where=text("state = 'pending'"),
            postgresql_where=text("state = 'pending'"),
        ),
        Index("ix_todos_endpoint_created", "endpoint_id", "created_at"),
        Index(
            "ix_todos_lease",
            "lease_expires_at",
            sqlite_where=text("state = 'claimed'"),
            postgresql_where=text("state = 'claimed'"),
        ),
        Index(
            "ix_todos_retry",
            "next_retry_at",
            sqlite_where=text("state = 'failed'"),
            postgresql_where=text("state = 'failed'"),
        ),
        # ``once`` rules: at most one open todo per subject and queue on an endpoint.
        Index(
            "uq_todos_once",
            "endpoint_id",
            "queue",
            "once_key",
            unique=True,
            sqlite_where=text("once_key IS NOT NULL AND state IN ('pending', 'claimed')"),
            postgresql_where=text("once_key IS NOT NULL AND state IN ('pending', 'claimed')"),
        ),
        # The quarantine: held todos by expiry, for the expiry pass.
        Index(
            "ix_todos_held",
            "hold_expires_at",
            sqlite_where=text("state = 'held'"),
            postgresql_where=text("state = 'held'"),
        ),
        # The doorbell's: pending todos due to ring. On PostgreSQL it also needs ``next_ring_at``
        # set, which a claim cannot prove: a claim's plan kept without statistics walked all of
        # this small index for its pick (migration 0011).
        Index(
            "ix_todos_ring",
            "next_ring_at",
            sqlite_where=text("state = 'pending'"),
            postgresql_where=text("state = 'pending' AND next_ring_at IS NOT NULL"),
        ),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("endpoints.id"))
    event_id: Mapped[str | None] = mapped_column(ForeignKey("events.id"), index=True)
    queue: Mapped[str] = mapped_column(String(63))
    source: Mapped[str] = mapped_column(String(40))
    kind: Mapped[str] = mapped_column(String(100))
    title: Mapped[str] = mapped_column(String(300))
    state: Mapped[str] = mapped_column(String(10), default="pending")
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=5)
    lease_expires_at: Mapped[datetime | None]
    lease_token_hash: Mapped[str | None] = mapped_column(String(64))
    next_retry_at: Mapped[datetime | None]
    dead_letter: Mapped[bool] = mapped_column(Boolean, default=False)
    # Why it was dead-lettered (``todos.operator.DEAD_REASONS``); null while it is not a dead letter.
    dead_reason: Mapped[str | None] = mapped_column(String(40))
    # The payload's stored JSON; null when it is its event's raw body byte for byte (a delivery read
    # as it came, the usual case: see ``todos.payload_column``), so that ingest stores the body once.
    payload: Mapped[bytes | None] = mapped_column(LargeBinary)
    payload_size: Mapped[int] = mapped_column(Integer)
    result: Mapped[Any | None] = mapped_column(JSON)
    # Immutable once written: the address kind, display and fields (never a credential).
    reply_to: Mapped[dict[str, Any] | None]
    finished_at: Mapped[datetime | None]
    finished_by: Mapped[str | None] = mapped_column(String(40))
    ring_count: Mapped[int] = mapped_column(Integer, default=0)
    next_ring_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    # Quarantine (docs/routing.md): why it is held (``untrusted_actor``, ``rule``, ``rule_fault``),
    # the actor verdict / rule / fault behind it, and when it expires unreleased.
    hold_reason: Mapped[str | None] = mapped_column(String(20))
    hold_detail: Mapped[dict[str, Any] | None]
    hold_expires_at: Mapped[datetime | None]
    # The routing trace: which rule (or the default, or trust) put it here, and why.
    routing: Mapped[dict[str, Any] | None]
    # A ``once`` rule's subject key (see uq_todos_once); null otherwise.
    once_key: Mapped[str | None] = mapped_column(String(300))


class Attempt(Base):
    """One claim of a todo: who, when, heartbeats, outcome."""

    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("todo_id", "number"),)
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    todo_id: Mapped[str] = mapped_column(ForeignKey("todos.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    endpoint_id: Mapped[str] = mapped_column(String(40))
    claimed_at: Mapped[datetime]
    lease_expires_at: Mapped[datetime]
    heartbeats: Mapped[int] = mapped_column(Integer, default=0)
    last_heartbeat_at: Mapped[datetime | None]
    # completed | failed | released | expired | dead_lettered | revoked | cancelled; null while open.
    outcome: Mapped[str | None] = mapped_column(String(20))
    summary: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    ended_at: Mapped[datetime | None]


class TodoEvent(Base):
    """An operator's action on a todo (requeue, release, cancel): who, when, and the state it left.

    ``actor`` is kept as text (``human:HANDLE``, ``cli:USER``) so the row still says who after the
    human is removed; ``human_id`` has no foreign key for the same reason.
    """

    __tablename__ = "todo_events"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    todo_id: Mapped[str] = mapped_column(ForeignKey("todos.id", ondelete="CASCADE"), index=True)
    action: Mapped[str] = mapped_column(String(20))
    actor: Mapped[str] = mapped_column(String(100))
    human_id: Mapped[str | None] = mapped_column(String(40))
    from_state: Mapped[str] = mapped_column(String(20))
    to_state: Mapped[str] = mapped_column(String(20))
    detail: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]


class Connection(Base):
    """An owner's outbound credential. The secret is write-only: only the vault ever reads it."""

    __tablename__ = "connections"
    __table_args__ = (
        CheckConstraint(OWNER_CHECK, name="one_owner"),
        Index(
            "uq_connections_scope_account",
            text("coalesce(owner_human_id, owner_team_id)"),
            "kind",
            "account_key_lower",
            unique=True,
        ),
        Index(
            "uq_connections_scope_name", text("coalesce(owner_human_id, owner_team_id)"), "name", unique=True
        ),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner_human_id: Mapped[str | None] = mapped_column(ForeignKey("humans.id"))
    owner_team_id: Mapped[str | None] = mapped_column(ForeignKey("teams.id"))
    kind: Mapped[str] = mapped_column(String(40))
    name: Mapped[str] = mapped_column(String(100))
    account_key: Mapped[str] = mapped_column(String(300))
    account_key_lower: Mapped[str] = mapped_column(String(300))
    secret_ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    secret_key_id: Mapped[str] = mapped_column(String(40))
    fingerprint: Mapped[str] = mapped_column(String(64))
    targets: Mapped[list[str] | None] = mapped_column(JSON)
    endpoints: Mapped[list[str] | None] = mapped_column(JSON)
    config: Mapped[dict[str, Any]]
    last_test: Mapped[dict[str, Any] | None]
    # Set from a provider 429: no dial on this connection before then.
    blocked_until: Mapped[datetime | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class Reply(Base):
    """One reply attempt, written (pending) before the dial. Unique on (todo, key): one dial."""

    __tablename__ = "replies"
    __table_args__ = (
        UniqueConstraint("todo_id", "idempotency_key"),
        CheckConstraint("state IN ('pending', 'sent', 'failed', 'unknown')", name="state"),
        Index("ix_replies_object", "provider_object_id"),
        Index(
            "ix_replies_pending",
            "created_at",
            sqlite_where=text("state = 'pending'"),
            postgresql_where=text("state = 'pending'"),
        ),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    todo_id: Mapped[str] = mapped_column(ForeignKey("todos.id", ondelete="CASCADE"), index=True)
    endpoint_id: Mapped[str] = mapped_column(String(40), index=True)
    idempotency_key: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(10))
    connection_id: Mapped[str | None] = mapped_column(String(40))
    connection_name: Mapped[str] = mapped_column(String(100))
    connection_fingerprint: Mapped[str] = mapped_column(String(64))
    # The scope the reply was made in (coalesce of the owner ids), for echo matching.
    owner_scope: Mapped[str] = mapped_column(String(40), index=True)
    address_kind: Mapped[str] = mapped_column(String(40))
    # The address's provider kind, part of the echo key (null on rows made before it was kept).
    provider: Mapped[str | None] = mapped_column(String(40))
    display: Mapped[str] = mapped_column(String(300))
    # The address's display: the provider, its instance and the thread (e.g. github
    # github.com/acme/api#7), which echo matching requires a delivery to share.
    thread_key: Mapped[str] = mapped_column(String(300))
    text_hash: Mapped[str] = mapped_column(String(64))
    provider_object_id: Mapped[str | None] = mapped_column(String(200))
    permalink: Mapped[str | None] = mapped_column(Text)
    error_class: Mapped[str | None] = mapped_column(String(20))
    error_code: Mapped[str | None] = mapped_column(String(100))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ReplyBucket(Base):
    """The per-endpoint reply token bucket, in the database so it holds across processes."""

    __tablename__ = "reply_buckets"
    endpoint_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tokens: Mapped[float]
    updated_at: Mapped[datetime]


class WebSession(Base):
    """A web UI login: the cookie carries the token; only its hash is stored."""

    __tablename__ = "web_sessions"
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    # The session's public name on the account page and in the API (never the cookie or its hash).
    ref: Mapped[str] = mapped_column(String(40), unique=True)
    human_id: Mapped[str] = mapped_column(ForeignKey("humans.id", ondelete="CASCADE"), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    # Refreshed at most every few minutes, so a page view is not a write.
    last_seen_at: Mapped[datetime]
    user_agent: Mapped[str | None] = mapped_column(String(200))
    # A rotated token waiting for its one showing, sealed under a key derived from this session's
    # cookie (which is not stored), so the database alone cannot open it; cleared when shown.
    reveal: Mapped[bytes | None] = mapped_column(LargeBinary)
    # The notice a redirect carries to the next page this session shows (a fixed key such as
    # ``webhook_deleted``), taken off the row by that page: a notice only after the action happened.
    flash: Mapped[str | None] = mapped_column(String(40))
