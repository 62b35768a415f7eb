"""The statements of ingest's group commit: one batch of deliveries stored in one transaction.

The writer (``ingest_writer``) hands a batch of ``Rows`` here and runs what comes back on the
driver directly (``Database.run_steps``). Two processes' writers (or a redelivery's batch and a
webhook's) may hold the same delivery: they are told apart by its unique keys. A batch's
transaction:

1. the batch's webhooks' ``config_version`` (share-locked on PostgreSQL; ``ingest_config``): a
   delivery decided on a configuration that has changed since is answered ``stale`` and decided
   again;
2. the events, ``INSERT … ON CONFLICT DO NOTHING RETURNING id``: an event that hits a unique key (a
   delivery already stored, by this batch or before) is a ``duplicate``;
3. the todos of the events that went in; those with a ``once`` key (docs/routing.md, "Actions")
   apart, skipping a todo whose endpoint, queue and key an open todo already holds
   (``uq_todos_once``): that delivery's event trace is updated, in the same transaction, to name
   the open todo it was folded into.

On PostgreSQL a batch without ``once`` todos (the usual one) is a single statement, which is a
transaction by itself: the three steps above as CTEs over arrays, one round trip whatever the
batch's size (``pg_batch``); a batch with ``once`` todos is a transaction of a few such statements
(``transaction``). On SQLite the whole transaction is one hand-off to the writer's thread, each
table's rows in multi-row ``VALUES`` of up to 32 rows.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    CompoundSelect,
    Insert,
    Select,
    Table,
    Text,
    bindparam,
    column,
    func,
    literal,
    literal_column,
    null,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import ARRAY

from switchboard import todo_notices
from switchboard.db import utcnow
from switchboard.direct import Rows as StatementRows
from switchboard.direct import Steps
from switchboard.ingest_config import VERSIONS_ANY, WebhookConfig, current_versions
from switchboard.models import Event, Todo
from switchboard.sanitize import json_text

Status = Literal["stored", "duplicate", "stale", "failed", "unavailable"]


@dataclass(frozen=True)
class Rows:
    """One delivery as the writer stores it: the event row, its todo rows (empty unless routed),
    and what they were decided on: the configuration and the endpoint ids of *all* its live
    targets (``config.targets``), whichever of them intake chose, so that a delivery whose rules
    chose some of them is not found changed on every attempt."""

    config: WebhookConfig
    target_ids: tuple[str, ...]
    event: dict[str, Any]
    todos: list[dict[str, Any]]
    source: str

    @property
    def sort_key(self) -> tuple[str, str]:
        # Every writer inserts in this order, so two processes storing overlapping batches take
        # their unique-key locks in the same order (PostgreSQL) instead of deadlocking.
        return (self.config.id, str(self.event["delivery_key"]))


EVENTS = cast(Table, Event.__table__)
TODOS = cast(Table, Todo.__table__)
# Ingest's two tables by name, and the names of their JSON columns (sent as text, ``sanitize.json_text``;
# a NaN, which PostgreSQL's JSON cannot hold, goes as null).
_TABLES = {EVENTS.name: EVENTS, TODOS.name: TODOS}
_JSON_COLUMNS = {
    name: frozenset(c.key for c in table.columns if isinstance(c.type, JSON))
    for name, table in _TABLES.items()
}

# Built once: an event that hits a unique key is skipped, and only the ids that went in come back.
_SQLITE_NEW_EVENTS = sqlite.insert(EVENTS).on_conflict_do_nothing().returning(EVENTS.c.id)
# ``once`` todos: skipped when an open todo holds the same (endpoint, queue, key); the partial
# unique index is named by its columns and predicate, the only way ON CONFLICT can infer it.
_ONCE_COLUMNS = [TODOS.c.endpoint_id, TODOS.c.queue, TODOS.c.once_key]
_ONCE_WHERE = text("once_key IS NOT NULL AND state IN ('pending', 'claimed')")
_SQLITE_ONCE = (
    sqlite.insert(TODOS)
    .on_conflict_do_nothing(index_elements=_ONCE_COLUMNS, index_where=_ONCE_WHERE)
    .returning(TODOS.c.id)
)
_OPEN_STATES = ("pending", "claimed")


# SQLite takes at most 999 placeholders in one statement (before 3.32), and a statement per row
# count is compiled and cached: rows go in chunks of 32, 16, 8, 4, 2 or 1.
_SQLITE_PLACEHOLDERS = 999
_SQLITE_CHUNKS = (32, 16, 8, 4, 2, 1)


@functools.cache
def _sqlite_rows_insert(kind: str, keys: tuple[str, ...], count: int) -> Insert:
    """SQLite: ``count`` rows of ``keys`` in one multi-row ``VALUES``, each value a placeholder
    ``<key>_<n>`` typed as its column (the direct runner binds by name, through the column's own
    bind processor). ``kind``: ``event`` (a unique-key hit skipped, the ids that went in returned),
    ``todo``, or ``once`` (a todo whose open holder's key is taken skipped, the ids returned).
    Built once per column set and count: every row ingest writes of one table sets the same
    columns."""
    table = EVENTS if kind == "event" else TODOS
    base = {"event": _SQLITE_NEW_EVENTS, "todo": sqlite.insert(TODOS), "once": _SQLITE_ONCE}[kind]
    return base.values(
        [{key: bindparam(f"{key}_{n}", type_=table.c[key].type) for key in keys} for n in range(count)]
    )


def _columns(what: str, rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The columns every one of ``rows`` sets. Ingest's rows of one table all set the same ones; a
    column only some rows set would be dropped from the others' multi-row statement, so a batch
    that mixes them is refused instead (and then stored a delivery at a time)."""
    keys = tuple(rows[0])
    if any(row.keys() != rows[0].keys() for row in rows):
        raise ValueError(f"the {what} rows of one batch set different columns")
    return keys


def _sqlite_insert(kind: str, rows: list[dict[str, Any]]) -> Steps[list[str]]:
    """SQLite: ``rows`` (every one setting the same columns, in order) in as few statements as
    the placeholder limit allows; the ids the statements returned. A statement per row cost the
    writer's thread more than the rows themselves (binding, a call into SQLite and a hand-over of
    the interpreter lock each): 32 senders went from about 500 to 610 deliveries/s (bench/HISTORY.md)."""
    if not rows:
        return []
    keys = _columns(kind, rows)
    fit = max(1, _SQLITE_PLACEHOLDERS // len(keys))
    ids: list[str] = []
    done = 0
    while done < len(rows):
        count = next(c for c in _SQLITE_CHUNKS if c <= min(fit, len(rows) - done))
        chunk = rows[done : done + count]
        values = {f"{key}_{n}": row[key] for n, row in enumerate(chunk) for key in keys}
        ids += [str(row.id) for row in (yield _sqlite_rows_insert(kind, keys, count), values)]
        done += count
    return ids


# The open todo holding a ``once`` key (rare: a folded delivery), and its event's trace updated.
_HOLDER = select(TODOS.c.id).where(
    TODOS.c.endpoint_id == bindparam("endpoint_id"),
    TODOS.c.queue == bindparam("queue"),
    TODOS.c.once_key == bindparam("once_key"),
    # Literal SQL: a list of values would compile to an expanding parameter, which the direct
    # runner does not take.
    TODOS.c.state.in_([literal_column(f"'{state}'") for state in _OPEN_STATES]),
)
_TRACE = (
    update(EVENTS)
    .where(EVENTS.c.id == bindparam("event_id"))
    .values(routing=bindparam("routing", type_=EVENTS.c.routing.type))
)


def _unchanged(batch: Sequence[Rows], current: dict[str, int]) -> list[int]:
    """The indexes of the deliveries whose configuration is as they were decided on (the rest are
    ``stale``), in the order every writer inserts them."""
    now = utcnow()
    keep = [
        n
        for n, rows in enumerate(batch)
        if current.get(rows.config.id) == rows.config.version and _live(rows, now)
    ]
    return sorted(keep, key=lambda n: batch[n].sort_key)


def _live(rows: Rows, now: datetime) -> bool:
    """Whether the delivery's live targets are still those it was decided with (an endpoint may
    have expired since: expiry is a time, not a change to any row)."""
    return tuple(t.endpoint_id for t in rows.config.targets(now)) == rows.target_ids


def _new_todos(
    batch: Sequence[Rows], keep: list[int], inserted: set[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The todos of the events that went in: (plain ones, ``once`` ones)."""
    plain: list[dict[str, Any]] = []
    once: list[dict[str, Any]] = []
    for n in keep:
        if batch[n].event["id"] in inserted:
            for todo in batch[n].todos:
                (plain if todo.get("once_key") is None else once).append(todo)
    return plain, once


def _statuses(batch: Sequence[Rows], keep: list[int], inserted: set[str]) -> list[Status]:
    statuses: list[Status] = ["stale"] * len(batch)
    for n in keep:
        statuses[n] = "stored" if batch[n].event["id"] in inserted else "duplicate"
    return statuses


def _once_key(todo: dict[str, Any]) -> tuple[Any, Any, Any]:
    return (todo["endpoint_id"], todo["queue"], todo["once_key"])


def transaction(batch: Sequence[Rows], dialect: str) -> Steps[tuple[list[Status], dict[str, str | None]]]:
    """The batch's transaction: the configurations re-read, the events, their todos, and the
    ``once`` todos folded into the open ones that hold their keys (see the module docstring).

    PostgreSQL inserts each table's rows in one statement (``_pg_insert``, from arrays). SQLite,
    whose driver has no arrays, takes them in multi-row ``VALUES`` (``_sqlite_insert``), on the
    writer's thread, without a hand-off."""
    on_sqlite = dialect == "sqlite"
    keep = _unchanged(batch, (yield from current_versions((rows.config.id for rows in batch), dialect)))
    events = [batch[n].event for n in keep]
    inserted: set[str] = set()
    if on_sqlite:
        inserted.update((yield from _sqlite_insert("event", events)))
    elif events:
        inserted.update(str(row.id) for row in (yield from _pg_insert(EVENTS.name, events)))
    plain, once = _new_todos(batch, keep, inserted)
    if on_sqlite:
        yield from _sqlite_insert("todo", plain)
    elif plain:
        yield from _pg_insert(TODOS.name, plain)
    if not once:
        return _statuses(batch, keep, inserted), {}
    went: set[str] = set()
    if on_sqlite:
        went.update((yield from _sqlite_insert("once", once)))
    else:
        went.update(str(row.id) for row in (yield from _pg_insert(TODOS.name, once, once=True)))
    folded: dict[str, str | None] = {}
    for todo in once:
        if str(todo["id"]) not in went:
            endpoint_id, queue, once_key = _once_key(todo)
            held = yield _HOLDER, {"endpoint_id": endpoint_id, "queue": queue, "once_key": once_key}
            folded[str(todo["id"])] = str(held[0].id) if held else None
    for n in keep:
        trace = _folded_trace(batch[n], folded)
        if trace is not None:
            yield _TRACE, {"event_id": batch[n].event["id"], "routing": trace}
    return _statuses(batch, keep, inserted), folded


def _pg_insert(table_name: str, rows: list[dict[str, Any]], *, once: bool = False) -> Steps[StatementRows]:
    """PostgreSQL: ``rows`` in one statement, each column an array (a JSON column's as text)."""
    keys = _columns(table_name, rows)
    return (yield _pg_rows_insert(table_name, keys, once), _arrays("a", table_name, keys, rows))


def _arrays(
    prefix: str, table_name: str, keys: tuple[str, ...], rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """The values of ``_given(prefix, …)``: one array per column (a JSON column's as text)."""
    json_columns = _JSON_COLUMNS[table_name]
    return {
        f"{prefix}_{key}": [json_text(row[key]) for row in rows]
        if key in json_columns
        else [row[key] for row in rows]
        for key in keys
    }


def _given(prefix: str, table_name: str, keys: tuple[str, ...], **extra: Any) -> tuple[Any, list[Any]]:
    """``unnest(<one array per key>) WITH ORDINALITY`` as the derived table ``<prefix>_given``
    (bound as ``<prefix>_<key>``; ``extra``: more arrays by name and type), and the table's values
    picked from it (a JSON column's values travel as text, ``json_text``, and are cast back)."""
    table, json_columns = _TABLES[table_name], _JSON_COLUMNS[table_name]
    sent = {key: Text() if key in json_columns else table.c[key].type for key in keys} | extra
    given = (
        func.unnest(*(bindparam(f"{prefix}_{key}", type_=ARRAY(kind)) for key, kind in sent.items()))
        .table_valued(*(column(key, kind) for key, kind in sent.items()), with_ordinality="n")
        .render_derived(name=f"{prefix}_given")
    )
    picked = [
        sql_cast(given.c[key], table.c[key].type) if key in json_columns else given.c[key] for key in keys
    ]
    return given, picked


@functools.cache
def _pg_rows_insert(table_name: str, keys: tuple[str, ...], once: bool) -> Insert:
    """``INSERT INTO <table> (keys) SELECT … FROM unnest(<one array per key>) WITH ORDINALITY``, in
    the arrays' order (the order every writer inserts in): events skip a unique-key hit and return
    the ids that went in; ``once`` todos skip an open todo's key and return theirs."""
    given, picked = _given("a", table_name, keys)
    table = _TABLES[table_name]
    statement = postgresql.insert(table).from_select(list(keys), select(*picked).order_by(given.c.n))
    if table is EVENTS:
        return statement.on_conflict_do_nothing().returning(EVENTS.c.id)
    if once:
        return statement.on_conflict_do_nothing(
            index_elements=_ONCE_COLUMNS, index_where=_ONCE_WHERE
        ).returning(TODOS.c.id)
    return statement


def pg_batch(batch: Sequence[Rows]) -> Steps[tuple[list[Status], dict[str, str | None]]]:
    """PostgreSQL, a batch without ``once`` todos: ``transaction`` as one statement, a transaction
    by itself (``_pg_batch_insert``): the batch's webhook versions share-locked, the events of the
    deliveries decided on those versions inserted (a unique-key hit skipped), and the todos of the
    events that went in. It answers the versions and the ids that went in, from which the statuses
    follow as in ``transaction``. One round trip instead of ``transaction``'s five (BEGIN, the
    versions, the events, the todos, COMMIT): 16-30% more deliveries/s on PostgreSQL, side by side
    (bench/HISTORY.md)."""
    now = utcnow()
    live = sorted((n for n, rows in enumerate(batch) if _live(rows, now)), key=lambda n: batch[n].sort_key)
    if not live:
        return _statuses(batch, [], set()), {}
    events = [batch[n].event for n in live]
    todos = [todo for n in live for todo in batch[n].todos]
    event_keys = _columns(EVENTS.name, events)
    todo_keys = _columns(TODOS.name, todos) if todos else ()
    values = {
        "ids": sorted({batch[n].config.id for n in live}),
        "e_config_version": [batch[n].config.version for n in live],
        **_arrays("e", EVENTS.name, event_keys, events),
        **_arrays("t", TODOS.name, todo_keys, todos),
    }
    found = yield _pg_batch_insert(event_keys, todo_keys), values
    current = {row[1]: row[2] for row in found if row[0] == "w"}
    inserted = {str(row[1]) for row in found if row[0] == "e"}
    keep = [n for n in live if current.get(batch[n].config.id) == batch[n].config.version]
    return _statuses(batch, keep, inserted), {}


@functools.cache
def _pg_batch_insert(event_keys: tuple[str, ...], todo_keys: tuple[str, ...]) -> CompoundSelect[Any]:
    """``WITH versions AS MATERIALIZED (… FOR SHARE), new_events AS (INSERT … RETURNING id),
    new_todos AS (INSERT … RETURNING id, state), notices AS (SELECT pg_notify(…) …) SELECT 'e', id …
    UNION ALL SELECT 'w', id, config_version … UNION ALL SELECT 'n' … FROM notices``.

    PostgreSQL runs the inserting CTEs on one snapshot, to completion, whether or not the final
    select reads them (the notices only because it does); the todos' foreign key to their new
    event is checked at the statement's end. The versions are locked in id order, as
    ``current_versions`` locks them."""
    versions = VERSIONS_ANY.cte("versions").prefix_with("MATERIALIZED")
    given, picked = _given("e", EVENTS.name, event_keys, config_version=BigInteger())
    decided_on_now = (versions.c.id == given.c.webhook_id) & (
        versions.c.config_version == given.c.config_version
    )
    new_events = (
        postgresql.insert(EVENTS)
        .from_select(
            list(event_keys), select(*picked).join_from(given, versions, decided_on_now).order_by(given.c.n)
        )
        .on_conflict_do_nothing()
        .returning(EVENTS.c.id)
        .cte("new_events")
    )
    answer = select(literal_column("'e'"), new_events.c.id, null()).union_all(
        select(literal_column("'w'"), versions.c.id, versions.c.config_version)
    )
    if not todo_keys:
        return answer
    todos, todo_values = _given("t", TODOS.name, todo_keys)
    went_in = todos.c.event_id.in_(select(new_events.c.id))
    new_todos = (
        postgresql.insert(TODOS)
        .from_select(list(todo_keys), select(*todo_values).where(went_in).order_by(todos.c.n))
        .returning(TODOS.c.id, TODOS.c.state)
        .cte("new_todos")
    )
    # The other processes hear of the todos that went in (a held one rings nobody) when this
    # statement commits: no statement of the doorbell's own (todo_notices). A notice per
    # PAYLOAD_LIMIT characters of ids, told apart by the ids' running length (``//``: SQLAlchemy's
    # ``/`` divides exactly, which made a notice an id). Selected from by the answer, so that
    # PostgreSQL runs it.
    running = func.sum(func.length(new_todos.c.id) + 1).over(rows=(None, 0))
    available = (
        select(new_todos.c.id, running.label("running"))
        .where(new_todos.c.state != "held")
        .subquery("available")
    )
    notices = (
        select(func.pg_notify(literal(todo_notices.CHANNEL), func.string_agg(available.c.id, literal(","))))
        .group_by(available.c.running // todo_notices.PAYLOAD_LIMIT)
        .cte("notices")
    )
    told = cast(Select[Any], select(literal_column("'n'"), null(), null()).select_from(notices))
    return cast(CompoundSelect[Any], union_all(*answer.selects, told).add_cte(new_todos))


def _folded_trace(rows: Rows, folded: dict[str, str | None]) -> dict[str, Any] | None:
    """``rows``' event trace with each folded todo's target marked ``once`` and the open todo named;
    None when none of its todos was folded."""
    mine = [t for t in rows.todos if str(t["id"]) in folded]
    trace = rows.event.get("routing")
    if not mine or not isinstance(trace, dict):
        return None
    config = rows.config
    slugs = {e.id: e.slug for e in (config.owner, *config.routed)}
    targets = [dict(o) for o in trace.get("targets") or []]
    notes = []
    for todo in mine:
        into = folded[str(todo["id"])]
        slug = slugs.get(todo["endpoint_id"], todo["endpoint_id"])
        for outcome in targets:
            if outcome.get("endpoint") == slug and outcome.get("queue") == todo["queue"]:
                outcome.update(outcome="once", open=into)
        notes.append(
            f"once: open todo {into} exists on {slug}" if into else f"once: an open todo existed on {slug}"
        )
    return {**trace, "targets": targets, "why": "; ".join([str(trace.get("why", "")), *notes])}
