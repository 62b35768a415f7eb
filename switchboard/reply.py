"""The ``reply`` verb: an agent answers the conversation its todo came from.

The agent chooses the words. The delivery chose the place (the todo's immutable ``reply_to``). The
owner chose the credential (the connection of the *todo's* owner scope that serves that address).

Every check runs before any dial, in the order docs/replying.md lists them ("Refusals and their
fixes"; the checks themselves are ``reply_checks``), and a refusal writes no reply row.
The checks and the insert of the ``pending`` row are one read and one take that writes only if
nothing the checks relied on changed in between (on PostgreSQL without a lock, retried under the
todo's ``FOR UPDATE`` lock when something did; SQLite's writer takes turns, so there it is one
transaction), so of concurrent identical calls exactly one inserts and dials; the others find its
row and wait for its outcome. Bounds (the endpoint's token bucket, the todo's lifetime cap, a
connection blocked by a provider 429) live in the database, so they hold across processes and
restarts. The statements (one read and the take before the dial, one update after it) and why they
are safe are in ``reply_statements``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import DBAPIError, IntegrityError

from switchboard import outbound, secretscan
from switchboard import reply_checks as checks
from switchboard import reply_statements as statements
from switchboard.connections import open_secret
from switchboard.db import utcnow
from switchboard.direct import Steps, drive_async, on
from switchboard.errors import SwitchboardError, invalid, not_found
from switchboard.ids import new_id
from switchboard.models import Connection, Endpoint, Reply
from switchboard.plugins import UnknownKind
from switchboard.provider import DISPLAY_MAX, Address, PostResult, ReplyPost
from switchboard.reply_statements import Recorded
from switchboard.services import Services
from switchboard.tenancy import Owner
from switchboard.todos import reply_view

log = logging.getLogger("switchboard.reply")

# The per-endpoint token bucket: a burst of 30, then one reply every 2 seconds.
BUCKET_CAPACITY = statements.BUCKET_CAPACITY
BUCKET_REFILL_PER_SECOND = statements.BUCKET_REFILL_PER_SECOND
MAX_RETRIES = 2
RETRY_AFTER_CAP = 10.0
DEFAULT_BLOCK_SECONDS = 30.0
BLOCK_CAP_SECONDS = 24 * 3600.0
PENDING_TIMEOUT = timedelta(seconds=60)
# All attempts of one reply finish well inside the pending timeout, so the sweeper never marks a
# reply whose dial is still running.
DIAL_DEADLINE = 45.0
SWEEP_INTERVAL = 10.0
# A concurrent identical call waits this long for the winner's outcome.
DUPLICATE_WAIT = PENDING_TIMEOUT.total_seconds() + 5


def _outcome(row: Recorded, *, duplicate: bool) -> dict[str, Any]:
    # A row still pending when we stop waiting has an outcome nobody knows yet.
    state = "unknown" if row.state == "pending" else row.state
    out: dict[str, Any] = {"reply_id": row.id, "state": state, "duplicate": duplicate, "display": row.display}
    if row.permalink:
        out["permalink"] = row.permalink
    if row.error_class or state == "unknown":
        out["error_class"] = row.error_class or "network"
    return out


async def replies_of(services: Services, todo_id: str) -> list[dict[str, Any]]:
    async with services.db.read() as s:
        rows = await s.scalars(
            select(Reply).where(Reply.todo_id == todo_id).order_by(Reply.created_at, Reply.id)
        )
        return [reply_view(r) for r in rows.all()]


@dataclass(frozen=True)
class _Ready:
    reply_id: str
    todo_id: str
    connection_id: str
    kind: str
    account_key: str
    secret: str
    address: Address
    text: str
    # The owner scope whose in-flight dial slots this reply takes (outbound fairness).
    owner_scope: str = ""


def _prepare_steps(
    services: Services,
    endpoint: Endpoint,
    todo_id: str,
    text: str,
    key: str,
    lease_token: str | None,
    now: datetime,
    *,
    locked: bool,
) -> Steps[_Ready | str | None]:
    """Every check, the token and the pending row (see reply_statements); or the id of the existing
    row for this key. ``locked``: the todo is held from the read to the commit, and a bucket that
    changed since the read is decided again from its locked row. Unlocked, a take that found
    anything changed writes nothing and answers None: run again, locked."""
    ctx = yield from statements.read_context(todo_id, key, Owner.of(endpoint).id, lock=locked)
    if ctx is None or ctx.endpoint_id != endpoint.id:
        raise not_found(f"todo {todo_id!r}")
    if ctx.existing is not None:
        return ctx.existing
    if not ctx.reply_to:
        raise checks.refuse(
            "no_reply_address",
            "this todo has no reply address (only a verified delivery from a conversation has one)",
        )
    try:
        address = Address.from_dict(ctx.reply_to)
    except (KeyError, TypeError):
        raise checks.refuse("no_reply_address", "this todo's reply address is unreadable") from None
    if not isinstance(address.display, str) or len(address.display) > DISPLAY_MAX:
        # Kept before ingest refused such addresses: its reply row could not record it.
        raise checks.refuse("no_reply_address", "this todo's reply address is too long to reply to")
    checks.check_state(todo_id, ctx, endpoint, now, services.settings.reply_grace_seconds, lease_token)
    connection, kind = checks.choose_connection(services, ctx, endpoint, address)
    body = text.strip()
    if len(body) > kind.text_limit:
        raise invalid(f"text must be at most {kind.text_limit} characters for {kind.name}")
    rule = secretscan.scan(body, services.providers.secret_rules)
    if rule is not None:
        services.metrics.inc("switchboard_secret_blocks_total", rule=rule.id)
        raise checks.refuse(
            "secret_detected",
            f"the text contains what looks like a secret (rule {rule.id}); remove it and retry",
            rule=rule.id,
        )
    if connection.blocked_until is not None and connection.blocked_until > now:
        wait = math.ceil((connection.blocked_until - now).total_seconds())
        raise checks.refuse(
            "rate_limited",
            f"the provider rate-limited connection {connection.name!r}; retry in {wait} s",
            retry_after=wait,
        )
    cap = services.settings.reply_todo_cap
    if ctx.replies >= cap:
        raise checks.cap_reached(cap)
    tokens = statements.tokens_now(ctx.bucket_tokens, ctx.bucket_at, now)
    if tokens < 1.0:
        raise checks.rate_limited_bucket(tokens)
    secret = open_secret(services, connection)
    ready = _Ready(
        new_id("rp"),
        todo_id,
        connection.id,
        connection.kind,
        connection.account_key,
        secret,
        address,
        body,
        connection.owner_human_id or connection.owner_team_id or "",
    )
    pending = {
        "id": ready.reply_id,
        "todo_id": todo_id,
        "endpoint_id": endpoint.id,
        "idempotency_key": key,
        "state": "pending",
        "connection_id": connection.id,
        "connection_name": connection.name,
        "connection_fingerprint": connection.fingerprint,
        "owner_scope": ready.owner_scope,
        "address_kind": address.kind,
        "provider": address.provider,
        "display": address.display,
        "thread_key": address.display,
        "text_hash": hashlib.sha256(body.encode("utf-8", errors="surrogatepass")).hexdigest(),
        "created_at": now,
        "updated_at": now,
    }
    dialect = services.db.dialect
    taken = yield from statements.take_and_insert(
        dialect,
        endpoint_id=endpoint.id,
        todo_id=todo_id,
        cap=cap,
        tokens=tokens,
        seen=ctx.bucket_at,
        todo=ctx,
        now=now,
        pending=pending,
    )
    if not taken and not locked:
        return None
    if not taken:
        # A concurrent reply changed the bucket, or filled the todo's cap, since the read: decide
        # again from the locked rows.
        if (yield from statements.replies_now(todo_id)) >= cap:
            raise checks.cap_reached(cap)
        tokens = yield from statements.lock_bucket(dialect, endpoint.id, now)
        if tokens < 1.0:
            raise checks.rate_limited_bucket(tokens)
        yield from statements.spend_locked(endpoint.id, tokens, now)
        yield from statements.insert_pending(pending)
    return ready


async def _prepare(
    services: Services, endpoint: Endpoint, todo_id: str, text: str, key: str, lease_token: str | None
) -> _Ready | str:
    """Run every check and insert the pending row; or the id of the existing row for this key."""
    db = services.db
    if not db.is_sqlite:
        # First without a transaction: two round trips, each committed by itself (the pending row's
        # is the commit that must land before the dial).
        steps = _prepare_steps(services, endpoint, todo_id, text, key, lease_token, utcnow(), locked=False)
        prepared = await db.run_steps(steps, transaction=False, generic_plans=True)
        if prepared is not None:
            return prepared
    # One transaction: on PostgreSQL the todo's row lock lasts from the read to the insert.
    steps = _prepare_steps(services, endpoint, todo_id, text, key, lease_token, utcnow(), locked=True)
    prepared = await db.run_steps(steps, transaction=True, generic_plans=True)
    if prepared is None:  # pragma: no cover - the locked path always decides
        raise RuntimeError("a locked reply answered nothing")
    return prepared


async def _post_once(services: Services, post: ReplyPost) -> PostResult:
    try:
        kind = services.providers.connection(post.kind)
    except UnknownKind:
        return PostResult(state="failed", error_class="invalid", error_code="no_provider_for_kind")
    try:
        result = await kind.post(post)
    except outbound.OutboundError as exc:
        return outbound.result_of_error(exc)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        # The plugin may have failed after writing the request: never assume it did not.
        log.error("post_reply for %s failed: %s", post.kind, type(exc).__name__)
        return PostResult(state="unknown", error_class="server", error_code="provider_error")
    return result


async def _block(services: Services, connection_id: str, seconds: float | None) -> None:
    if seconds is None or math.isnan(seconds):
        seconds = DEFAULT_BLOCK_SECONDS
    # Bounded like a Retry-After: a far-off wait (GitHub's x-ratelimit-reset in milliseconds from a
    # proxy, a plugin's inf) would overflow the date, failing the reply with its row left pending.
    until = utcnow() + timedelta(seconds=min(max(seconds, 0.0), BLOCK_CAP_SECONDS))
    async with services.db.write() as s:
        await s.execute(
            update(Connection)
            .where(
                Connection.id == connection_id,
                (Connection.blocked_until.is_(None)) | (Connection.blocked_until < until),
            )
            .values(blocked_until=until)
        )


async def _dial(services: Services, ready: _Ready) -> PostResult:
    async with outbound.borrowed(services) as http:
        return await _dial_with(services, ready, http)


async def _dial_with(services: Services, ready: _Ready, http: outbound.Outbound) -> PostResult:
    """Post once; retry only what is safe to retry (nothing sent, or a 429), within the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DIAL_DEADLINE
    post = ReplyPost(
        http=http,
        kind=ready.kind,
        account_key=ready.account_key,
        secret=ready.secret,
        address=ready.address,
        text=ready.text,
        reply_id=ready.reply_id,
        settings=services.providers.settings_of(ready.kind, services.settings),
    )
    attempt = 0
    while True:
        try:
            # One of the owner's in-flight slots for this attempt, so one tenant's flood queues
            # behind its own dials; a slot that never came means nothing was sent (retryable).
            async with http.slot(ready.owner_scope):
                result = await _post_once(services, post)
        except outbound.OutboundError as exc:
            result = outbound.result_of_error(exc)
        if result.error_class == "rate_limited":
            await _block(services, ready.connection_id, result.retry_after)
        if not result.retryable or result.state != "failed" or attempt >= MAX_RETRIES:
            return result
        if result.error_class == "rate_limited":
            wait = result.retry_after if result.retry_after is not None else DEFAULT_BLOCK_SECONDS
        else:
            wait = 0.5 * 2**attempt
        if wait > RETRY_AFTER_CAP or loop.time() + wait + outbound.TOTAL_TIMEOUT > deadline:
            return result
        await asyncio.sleep(wait)
        attempt += 1


def _clip(value: str | None, limit: int) -> str | None:
    # A plugin's id, link or code may carry the provider's text: one the database cannot store (a
    # NUL, a lone surrogate) is dropped rather than failing the record of a post that was made.
    return value[:limit] if isinstance(value, str) and value and value.isprintable() else None


async def _finish(services: Services, ready: _Ready, result: PostResult) -> Recorded:
    permalink = result.permalink if result.permalink and result.permalink.startswith("https://") else None
    if permalink is None and result.permalink and result.permalink.startswith("http://"):
        permalink = result.permalink  # only reachable with SWITCHBOARD_OUTBOUND_ALLOW_HTTP set
    sent = result.state == "sent"
    wrote = Recorded(
        id=ready.reply_id,
        todo_id=ready.todo_id,
        state=result.state,
        display=ready.address.display,
        permalink=_clip(permalink, 2000),
        error_class=None if sent else result.error_class,
        error_code=None if sent else _clip(result.error_code, 100),
    )
    values = {
        "state": wrote.state,
        "provider_object_id": _clip(result.object_id, 200),
        "permalink": wrote.permalink,
        "error_class": wrote.error_class,
        "error_code": wrote.error_code,
        "updated_at": utcnow(),
    }
    row = await services.db.run_steps(
        statements.record_outcome(services.db.dialect, ready.reply_id, values),
        transaction=False,
        generic_plans=True,
    )
    if row is None:
        # Already final, or gone with its todo: what the table says, else what the dial said.
        async with services.db.read() as s:
            read = on(await s.connection())
            row = await drive_async(read, statements.read_recorded(ready.reply_id))
    return row or wrote


async def _await_outcome(services: Services, reply_id: str) -> Recorded:
    """The recorded reply, once it has left ``pending`` (or when waiting is pointless)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + DUPLICATE_WAIT
    delay = 0.05
    while True:
        async with services.db.read() as s:
            read = on(await s.connection())
            row = await drive_async(read, statements.read_recorded(reply_id))
        if row is None:
            raise not_found(f"reply {reply_id!r}")
        if row.state != "pending" or loop.time() >= give_up:
            return row
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


def _duplicate_key(exc: DBAPIError) -> bool:
    """A unique violation: SQLite's is an ``IntegrityError``; asyncpg's (under a direct statement)
    a ``DBAPIError`` whose driver error carries SQLSTATE 23505."""
    return isinstance(exc, IntegrityError) or getattr(exc.orig, "sqlstate", None) == "23505"


async def send_reply(
    services: Services,
    endpoint: Endpoint,
    todo_id: str,
    text: str,
    idempotency_key: str | None = None,
    *,
    lease_token: str | None = None,
) -> dict[str, Any]:
    """Post ``text`` to the todo's reply address; see the module docstring and docs/replying.md."""
    try:
        key = checks.check_arguments(todo_id, text, idempotency_key, lease_token)
        try:
            prepared = await _prepare(services, endpoint, todo_id, text, key, lease_token)
        except DBAPIError as exc:
            if not _duplicate_key(exc):
                raise
            # Another call inserted the same (todo, key) between our check and insert.
            async with services.db.read() as s:
                winner = await s.scalar(
                    select(Reply.id).where(Reply.todo_id == todo_id, Reply.idempotency_key == key)
                )
            if winner is None:
                raise
            prepared = winner
    except SwitchboardError as exc:
        services.metrics.inc("switchboard_reply_refusals_total", code=exc.code)
        raise
    if isinstance(prepared, str):
        return _outcome(await _await_outcome(services, prepared), duplicate=True)

    # The dial and its record run to the end even if the caller goes away (an MCP client that
    # disconnects): the provider may already hold the post, so the row must say what happened.
    task = asyncio.create_task(_dial_and_record(services, prepared))
    _IN_FLIGHT.add(task)
    task.add_done_callback(_IN_FLIGHT.discard)
    row = await asyncio.shield(task)
    return _outcome(row, duplicate=False)


# Strong references to dials in flight (a shielded task must not be garbage-collected).
_IN_FLIGHT: set[asyncio.Task[Recorded]] = set()


async def _dial_and_record(services: Services, prepared: _Ready) -> Recorded:
    started = time.monotonic()
    result = await _dial(services, prepared)
    services.metrics.observe("switchboard_reply_seconds", time.monotonic() - started)
    row = await _finish(services, prepared, result)
    services.metrics.inc("switchboard_replies_total", state=row.state, error_class=row.error_class or "none")
    log.info(
        "reply %s on todo %s to %s: %s%s",
        row.id,
        row.todo_id,
        row.display,
        row.state,
        f" ({row.error_class}/{row.error_code})" if row.error_class else "",
    )
    return row


async def sweep_pending(services: Services) -> int:
    """Rows stuck ``pending`` (their process died mid-dial) become ``unknown``: the post may exist."""
    now = utcnow()
    async with services.db.write() as s:
        # An UPDATE answers with a CursorResult (it has the row count); execute() is typed for SELECTs.
        result = cast(
            "CursorResult[Any]",
            await s.execute(
                update(Reply)
                .where(Reply.state == "pending", Reply.created_at < now - PENDING_TIMEOUT)
                .values(state="unknown", error_class="network", error_code="stuck_pending", updated_at=now)
            ),
        )
    swept = int(result.rowcount or 0)
    if swept:
        services.metrics.inc("switchboard_replies_total", swept, state="unknown", error_class="network")
        log.warning("marked %d reply(s) stuck pending as unknown", swept)
    return swept
