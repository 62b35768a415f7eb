"""The quarantine (docs/routing.md, "Quarantine"): held todos, and what a human does with them.

A delivery that trust refuses, that a rule sends to quarantine or that a rule faults on becomes one
``held`` todo on its webhook's own endpoint, queue ``quarantine`` (``intake``). No agent path lists,
claims or rings a held todo; these functions are the only way out of that state:

* **release** runs routing again with trust satisfied (the rules still apply: they may drop it or
  hold it again), or puts one todo straight on a queue of the endpoint's grant; **trust and
  release** first adds the delivery's actor to the webhook's trusted actors;
* **discard** ends it with a reason;
* **expire_held**, a background pass, ends those nobody decided on before ``hold_expires_at``.

Each writes a ``todo_events`` row (``todos.operator``'s history: who, when, from which state, and
for a release the todos it made) and leaves the held todo ``cancelled``; a todo a release makes rings
the doorbell like any other. The callers and their checks are ``intake_config.Caller``'s: a held
todo outside the caller's scopes is ``not_found``, exactly like one that does not exist.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.db import Database, rfc3339, utcnow
from switchboard.errors import SwitchboardError, conflict, invalid
from switchboard.ingest_config import Target, WebhookConfig, config_by_token_hash
from switchboard.intake import Content, Mint, Plan, plan, todo_rows
from switchboard.intake_config import (
    Caller,
    Reread,
    Unreadable,
    owned_webhook,
    reread,
    trust_delivery_actor,
)
from switchboard.models import Endpoint, Event, Todo, TodoEvent, Webhook
from switchboard.paging import Page, check_page, stamp
from switchboard.provider import Address, SourceKind
from switchboard.sanitize import clean_line
from switchboard.services import Services
from switchboard.tenancy import Owner, check_queue, endpoint_is_live
from switchboard.todos import operator as todo_ops
from switchboard.todos.queries import find_in_scopes, history_view, visible
from switchboard.todos.views import stored_payload

HELD = "held"
DISCARD_REASON_MAX = 500
LIST_LIMIT_DEFAULT = 50
# Rows per transaction of the expiry pass, so it never holds the write lock long.
EXPIRE_BATCH = 200
# Who ends a held todo that nobody decided on, as its history shows it.
EXPIRY = todo_ops.Actor("switchboard:expiry")


def _detail(todo: Todo) -> dict[str, Any]:
    detail = todo.hold_detail
    return detail if isinstance(detail, dict) else {}


def held_view(todo: Todo, endpoint_slug: str, webhook_id: str | None) -> dict[str, Any]:
    """A held todo as every surface lists it: what arrived, why it is held, until when."""
    detail = _detail(todo)
    return {
        "id": todo.id,
        "webhook": webhook_id,
        "endpoint": endpoint_slug,
        "source": todo.source,
        "event": todo.kind,
        "delivery": todo.event_id,
        "title": todo.title,
        "state": todo.state,
        "reason": todo.hold_reason,
        "actor": detail.get("actor"),
        "rule": detail.get("rule"),
        "fault": detail.get("fault"),
        "reply_to": dict(todo.reply_to) if todo.reply_to else None,
        "created_at": rfc3339(todo.created_at),
        "expires_at": rfc3339(todo.hold_expires_at),
    }


def _held_query(scopes: list[Owner] | None) -> Any:
    return (
        select(Todo, Endpoint.slug, Event.webhook_id)
        .join(Endpoint, Endpoint.id == Todo.endpoint_id)
        .outerjoin(Event, Event.id == Todo.event_id)
        .where(Todo.state == HELD, visible(scopes))
    )


async def list_held(
    db: Database,
    caller: Caller,
    *,
    webhook_id: str | None = None,
    before: Any = None,
    after: Any = None,
    limit: Any = LIST_LIMIT_DEFAULT,
) -> Page[dict[str, Any]]:
    """One page of the held todos the caller sees (of one webhook, given ``webhook_id``), newest
    first like every todo list; ``before``/``after`` are ids, each a point in time (``paging``)."""
    before, after, limit = check_page(before, after, limit)
    async with db.read() as s:
        query = _held_query(caller.scopes)
        if webhook_id is not None:
            await owned_webhook(s, caller, webhook_id, manage=False)
            query = query.where(Event.webhook_id == webhook_id)
        if after is not None:
            page = query.where(Todo.id > "td_" + stamp(after)).order_by(Todo.id.asc())
        else:
            page = query.order_by(Todo.id.desc())
            if before is not None:
                page = page.where(Todo.id < "td_" + stamp(before))
        found = (await s.execute(page.limit(limit + 1))).all()
        more = len(found) > limit
        shown = list(found[:limit])
        if after is not None:
            shown.reverse()
        # The far side of a cursor has rows when anything held is there (the cursor's own row
        # counts: the walk came from it).
        if after is not None:
            newer, older = more, await _any(s, query.where(Todo.id <= "td_" + stamp(after)))
        else:
            newer = before is not None and await _any(s, query.where(Todo.id >= "td_" + stamp(before)))
            older = more
    rows = [held_view(todo, slug, hook) for todo, slug, hook in shown]
    return Page(
        rows,
        next_before=rows[-1]["id"] if rows and older else None,
        next_after=rows[0]["id"] if rows and newer else None,
    )


async def _any(s: AsyncSession, query: Any) -> bool:
    return (await s.execute(query.limit(1))).first() is not None


async def quarantined_counts(db: Database, webhook_ids: list[str]) -> dict[str, int]:
    """How many held todos each webhook has (0 for none), in one grouped query."""
    counts = dict.fromkeys(webhook_ids, 0)
    if not webhook_ids:
        return counts
    async with db.read() as s:
        rows = await s.execute(
            select(Event.webhook_id, func.count())
            .select_from(Todo)
            .join(Event, Event.id == Todo.event_id)
            .where(Todo.state == HELD, Event.webhook_id.in_(webhook_ids))
            .group_by(Event.webhook_id)
        )
        for webhook_id, count in rows:
            counts[str(webhook_id)] = int(count)
    return counts


async def with_quarantined(db: Database, views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Webhook views (``tenancy.webhook_view``) with their ``quarantined`` count added."""
    counts = await quarantined_counts(db, [str(v["id"]) for v in views])
    return [{**view, "quarantined": counts.get(str(view["id"]), 0)} for view in views]


# ---------------------------------------------------------------------------------------------
# Ending a held todo


async def _locked_held(s: AsyncSession, caller: Caller, todo_id: Any) -> tuple[Todo, Endpoint]:
    """The held todo and its endpoint, locked; ``not_found`` outside the caller's scopes, the
    caller's check for one they may only read, ``conflict`` once it is no longer held."""
    todo, endpoint = await todo_ops._locked(s, todo_id, caller.scopes)
    caller.require_manage(Owner.of(endpoint))
    if todo.state != HELD:
        raise conflict(f"todo {todo.id} is {todo_ops.board_state(todo)}, not held: it was already decided on")
    return todo, endpoint


def _end(
    s: AsyncSession, todo: Todo, actor: todo_ops.Actor, action: str, detail: str, now: datetime
) -> TodoEvent:
    """Held → cancelled for good (finished by no endpoint: no reply window opens), with its history
    row. The hold's reason and detail stay, to show why it was held."""
    todo.state = "cancelled"
    todo.next_ring_at = None
    todo.finished_at, todo.finished_by = now, None
    todo.updated_at = now
    return todo_ops._record(s, todo, actor, action, HELD, detail, now)


async def _webhook_of(s: AsyncSession, todo: Todo) -> str | None:
    if todo.event_id is None:
        return None
    webhook_id = await s.scalar(select(Event.webhook_id).where(Event.id == todo.event_id))
    return str(webhook_id) if webhook_id is not None else None


def check_reason(reason: Any) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise invalid("give the reason for discarding it")
    text = " ".join(reason.split())
    if len(text) > DISCARD_REASON_MAX:
        raise invalid(f"the reason is longer than {DISCARD_REASON_MAX} characters")
    if not text.isprintable():
        raise invalid("the reason must be printable text")
    return text


async def discard(services: Services, caller: Caller, todo_id: str, reason: Any) -> dict[str, Any]:
    """Held → cancelled, with the caller's reason in its history: ``{"todo", "event"}``."""
    text = check_reason(reason)
    now = utcnow()
    async with services.db.write() as s:
        todo, endpoint = await _locked_held(s, caller, todo_id)
        event = _end(s, todo, caller.actor, "discard", text, now)
        view = held_view(todo, endpoint.slug, await _webhook_of(s, todo))
    services.metrics.inc("switchboard_todo_transitions_total", verb="quarantine_discard")
    return {"todo": view, "event": history_view(event)}


async def expire_held(services: Services, *, now: datetime | None = None) -> int:
    """The background pass: held todos past ``hold_expires_at`` → cancelled, each with an
    ``expire`` history row; how many. Safe in several processes at once: each batch takes its rows
    with ``FOR UPDATE SKIP LOCKED`` (PostgreSQL; SQLite's writer excludes the others) and only rows
    still held."""
    now = now or utcnow()
    done = 0
    while True:
        async with services.db.write() as s:
            rows = (
                await s.scalars(
                    select(Todo)
                    .where(Todo.state == HELD, Todo.hold_expires_at <= now)
                    .order_by(Todo.hold_expires_at, Todo.id)
                    .limit(EXPIRE_BATCH)
                    .with_for_update(skip_locked=True)
                )
            ).all()
            for todo in rows:
                until = rfc3339(todo.hold_expires_at)
                _end(s, todo, EXPIRY, "expire", f"held until {until}; nobody released or discarded it", now)
        done += len(rows)
        if len(rows) < EXPIRE_BATCH:
            break
    if done:
        services.metrics.inc("switchboard_todo_transitions_total", float(done), verb="quarantine_expire")
    return done


# ---------------------------------------------------------------------------------------------
# Release


def _release_trace(trace: dict[str, Any], caller: Caller) -> dict[str, Any]:
    """A released todo's routing trace: how routing (or the human) placed it, marked a release."""
    return {
        **trace,
        "by": "release",
        "why": f"released from quarantine by {caller.actor.label}: {trace['why']}",
    }


async def _held_in_scopes(s: AsyncSession, caller: Caller, todo_id: Any) -> tuple[Todo, Endpoint]:
    """As ``_locked_held``, unlocked: for the reads before a release's transaction."""
    todo, endpoint = await find_in_scopes(s, todo_id, caller.scopes)
    caller.require_manage(Owner.of(endpoint))
    if todo.state != HELD:
        raise conflict(f"todo {todo.id} is {todo_ops.board_state(todo)}, not held: it was already decided on")
    return todo, endpoint


async def _content(s: AsyncSession, held: Todo, now: datetime) -> Content:
    """What the todos a release makes carry: exactly what the held todo holds (the same payload,
    title and reply address ingest gave it; a payload kept on the event stays there)."""
    return Content(
        source=held.source,
        kind=held.kind,
        title=held.title,
        payload=None,
        encoded=await stored_payload(s, held),
        reply_to=dict(held.reply_to) if held.reply_to else None,
        event_id=held.event_id,
        now=now,
        in_event=held.payload is None,
    )


async def _to_queue(
    services: Services, caller: Caller, todo_id: str, queue: Any, action: str, note: str
) -> dict[str, Any]:
    """One pending todo on ``queue`` of the held todo's own endpoint, which must be granted it."""
    queue = check_queue(queue)
    now = utcnow()
    async with services.db.write() as s:
        held, endpoint = await _locked_held(s, caller, todo_id)
        _check_destination(endpoint, queue, now)
        target = Target(endpoint.id, endpoint.slug, Owner.of(endpoint).id)
        why = f"released from quarantine to queue {queue} by {caller.actor.label}"
        trace = {
            "by": "release",
            "rule": None,
            "rule_name": None,
            "action": {"type": "queue", "queue": queue},
            "why": why,
            "actor": _actor(held),
        }
        decided = Plan("routed", mints=(Mint(target, queue),), trace=trace)
        made = await _insert(s, services.db.is_sqlite, decided, await _content(s, held, now))
        event = _end(
            s, held, caller.actor, action, f"{note}released to queue {queue} as {made[0]['id']}", now
        )
        view = held_view(held, endpoint.slug, await _webhook_of(s, held))
    await _made(services, [m["id"] for m in made])
    return {"todo": view, "event": history_view(event), "outcome": "routed", "todos": made, "routing": trace}


def _check_destination(endpoint: Endpoint, queue: str, now: datetime) -> None:
    """A release to ``queue`` of the held todo's own ``endpoint`` can make its todo there."""
    if queue not in endpoint.queues:
        raise SwitchboardError(
            "not_granted", f"queue {queue!r} is not granted to endpoint {endpoint.slug!r}", queue=queue
        )
    if not endpoint_is_live(endpoint, now):
        raise conflict(f"endpoint {endpoint.slug!r} is not active: nothing could claim a todo there")


def _actor(held: Todo) -> Any:
    return _detail(held).get("actor")


async def _insert(s: AsyncSession, is_sqlite: bool, decided: Plan, content: Content) -> list[dict[str, Any]]:
    """The plan's todos, in the caller's transaction; a ``once`` todo whose subject already has an
    open todo on its endpoint and queue is skipped (the unique index decides, as for ingest)."""
    rows = todo_rows(decided, content)
    if not rows:
        return []
    table = cast(Table, Todo.__table__)
    dialect = sqlite if is_sqlite else postgresql
    statement = dialect.insert(table).on_conflict_do_nothing().returning(table.c.id)
    inserted = set((await s.execute(statement, rows)).scalars())
    slugs = {m.target.endpoint_id: m.target.slug for m in decided.mints}
    return [
        {"id": row["id"], "endpoint": slugs.get(row["endpoint_id"], ""), "queue": row["queue"]}
        for row in rows
        if row["id"] in inserted
    ]


async def _made(services: Services, todo_ids: list[str]) -> None:
    services.metrics.inc("switchboard_todo_transitions_total", verb="quarantine_release")
    if todo_ids:
        services.metrics.inc("switchboard_todos_created_total", float(len(todo_ids)), source="release")
        await services.todos_created(todo_ids)


async def _decide_again(services: Services, caller: Caller, todo_id: str) -> Plan:
    """Routing run again on the held todo's stored delivery with trust satisfied (its webhook's
    rules and targets as they are now)."""
    held, event, config, kind, targets, got = await _rerun_inputs(services, caller, todo_id)
    address = Address.from_dict(held.reply_to) if held.reply_to else None
    return await plan(
        services,
        config,
        kind,
        got.delivery,
        got.verdict,
        got.verified,
        address,
        targets,
        trusted=True,
        # A payload kept on the event (``Todo.payload`` null) is the event's body.
        encoded=(None, held.payload if held.payload is not None else event.body),
    )


async def _rerun_inputs(
    services: Services, caller: Caller, todo_id: str
) -> tuple[Todo, Event, WebhookConfig, SourceKind, list[Target], Reread]:
    """What running routing again needs (``conflict`` when it cannot run): the held todo, its
    stored delivery, its webhook as it is now, the kind, the live targets and the delivery read
    again through the kind's verifier. Nothing is written."""
    async with services.db.read() as s:
        held, _ = await _held_in_scopes(s, caller, todo_id)
        event = await s.get(Event, held.event_id) if held.event_id else None
        webhook = await s.get(Webhook, event.webhook_id) if event is not None and event.webhook_id else None
        config = await config_by_token_hash(s, webhook.ingest_token_hash) if webhook is not None else None
    instead = "; release it to a named queue instead"
    if event is None or config is None:
        raise conflict(f"todo {held.id}'s webhook is gone: routing cannot run again{instead}")
    kind = services.providers.sources.get(config.webhook.source)
    if kind is None:
        raise conflict(f"no installed provider handles source kind {config.webhook.source!r}{instead}")
    targets = config.targets()
    if not targets:
        raise conflict(f"webhook {config.id} has no live endpoint to deliver to{instead}")
    try:
        got = reread(services, config, kind, event)
    except Unreadable as exc:
        raise conflict(f"routing cannot run again: {exc}{instead}") from None
    return held, event, config, kind, targets, got


async def _rerun(services: Services, caller: Caller, todo_id: str, action: str, note: str) -> dict[str, Any]:
    decided = await _decide_again(services, caller, todo_id)
    trace = _release_trace(decided.trace, caller)
    now = utcnow()
    async with services.db.write() as s:
        held, endpoint = await _locked_held(s, caller, todo_id)
        made: list[dict[str, Any]] = []
        if decided.hold is not None:
            # Routing holds it again (a rule chose quarantine, or faulted): it stays held, as now
            # decided, and says so in its history; it still expires when it would have.
            held.hold_reason, held.hold_detail = decided.hold.reason, decided.hold.detail
            held.routing, held.updated_at = trace, now
            detail = f"{note}routing held it again ({decided.hold.reason}): {decided.trace['why']}"
            event = todo_ops._record(s, held, caller.actor, action, HELD, clean_line(detail, 1000), now)
        else:
            content = await _content(s, held, now)
            made = await _insert(s, services.db.is_sqlite, replace(decided, trace=trace), content)
            outcome = (
                f"made {', '.join(m['id'] for m in made)}"
                if made
                else f"made no todo ({decided.disposition})"
            )
            detail = f"{note}routing ran again: {decided.trace['why']}; {outcome}"
            event = _end(s, held, caller.actor, action, clean_line(detail, 1000), now)
        view = held_view(held, endpoint.slug, await _webhook_of(s, held))
    await _made(services, [m["id"] for m in made])
    disposition = decided.disposition if made or decided.disposition != "routed" else "routed"
    return {
        "todo": view,
        "event": history_view(event),
        "outcome": disposition,
        "todos": made,
        "routing": trace,
    }


async def release(
    services: Services, caller: Caller, todo_id: str, *, queue: str | None = None, trust: bool = False
) -> dict[str, Any]:
    """Release a held todo (see the module docstring): with ``queue``, one todo on that queue of its
    endpoint (``not_granted`` outside the endpoint's grant); else routing runs again on its stored
    delivery with trust satisfied. ``trust`` first adds the delivery's actor to the webhook's trusted
    actors, once the release's own checks have passed (committed on its own, so it stays only if a
    concurrent decision then finds the todo decided).

    ``{"todo", "event", "outcome", "todos", "routing", "trusted"}``: the held todo as it is now
    (``cancelled``, or still ``held`` when routing held it again), its history row, what routing
    made of it (``routed``, ``dropped``, ``self_reply``, ``quarantined``, ``faulted``), the todos
    made (``{"id", "endpoint", "queue"}``), their routing trace and the actors trust gained."""
    trusted: list[str] = []
    note = ""
    if trust:
        async with services.db.read() as s:
            held, endpoint = await _held_in_scopes(s, caller, todo_id)
            webhook_id = await _webhook_of(s, held)
        if webhook_id is None:
            raise conflict(f"todo {held.id}'s webhook is gone: there is no trust to add to")
        # The release's own refusals first, before the trust (committed on its own) changes: a
        # refused "trust and release" must not leave the webhook trusting someone new.
        if queue is not None:
            _check_destination(endpoint, check_queue(queue), utcnow())
        else:
            await _rerun_inputs(services, caller, todo_id)
        trusted = await trust_delivery_actor(services, caller, webhook_id, _actor(held))
        note = f"trusted {', '.join(trusted)}; " if trusted else "already trusted; "
    action = "trust_release" if trust else "release"
    if queue is not None:
        answer = await _to_queue(services, caller, todo_id, queue, action, note)
    else:
        answer = await _rerun(services, caller, todo_id, action, note)
    return {**answer, "trusted": trusted}
