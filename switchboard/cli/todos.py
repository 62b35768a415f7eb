"""``switchboard todo``: push a todo by hand, list and inspect todos, and an operator's hands on them
(requeue, release, cancel; requeue in bulk by filter). The CLI acts as the instance operator: every
scope, and the history names it ``cli:USER``."""

from __future__ import annotations

import json
from typing import Any

import click
from sqlalchemy import select

from switchboard import todos
from switchboard.cli.group import main
from switchboard.cli.output import emit, fail, json_option, printable, table, when
from switchboard.cli.pages import page_options, with_hint
from switchboard.cli.runner import do
from switchboard.db import rfc3339
from switchboard.errors import SwitchboardError, invalid, not_found
from switchboard.models import Todo
from switchboard.paging import Page
from switchboard.sanitize import finite_float, lone_surrogate, refuse_constant
from switchboard.services import Services
from switchboard.todos import operator as todo_ops


@main.group("todo")
def todo_group() -> None:
    """Push, list and inspect todos; requeue, release or cancel them."""


def _parse_payload(raw: str | None) -> Any:
    """``--payload`` read as the API reads a body: standard JSON only (no NaN or Infinity, no number
    past a float's range, which ``todo show --json`` could not print as JSON) and no lone surrogate
    (a ``\\ud800`` escape), which no database can store."""
    if raw is None:
        return None
    try:
        value = json.loads(raw, parse_constant=refuse_constant, parse_float=finite_float)
    except json.JSONDecodeError as exc:
        raise invalid(f"--payload is not valid JSON ({exc.msg} at position {exc.pos})") from None
    except ValueError:
        # NaN or Infinity, a number past a float's range, or an integer literal longer than Python
        # converts (4300 digits).
        raise invalid("--payload is not valid JSON (NaN, Infinity or a number too large)") from None
    except RecursionError:
        raise invalid("--payload is not valid JSON (nested too deeply)") from None
    if "\\u" in raw and lone_surrogate(value):
        raise invalid("--payload must not contain a lone surrogate (\\ud800-\\udfff)")
    return value


@todo_group.command("push")
@click.option(
    "--endpoint", "endpoint_slug", metavar="SLUG", required=True, help="The endpoint whose queue gets it."
)
@click.option("--title", required=True, metavar="T", help="One-line title.")
@click.option("--queue", metavar="Q", help="Queue (default: the endpoint's first).")
@click.option("--payload", metavar="JSON", help="A JSON value for the todo's payload.")
@json_option
def todo_push(endpoint_slug: str, title: str, queue: str | None, payload: str | None, as_json: bool) -> None:
    """Put a todo on an endpoint's queue by hand."""
    try:
        value = _parse_payload(payload)
    except SwitchboardError as exc:
        fail(f"{exc.code}: {exc.message}")

    async def go(services: Services) -> dict[str, Any]:
        todo = await todos.push(
            services.db, endpoint_slug=endpoint_slug, title=title, queue=queue, payload=value
        )
        await services.todos_created([todo.id])
        return todos.operator_row(todo, endpoint_slug)

    row = do(go)
    emit(as_json, {"todo": row}, f"todo {row['id']} pushed to {endpoint_slug}/{row['queue']}")


def filter_options(fn: Any) -> Any:
    """The filters ``todo list`` and the bulk ``todo requeue`` share (``todos.TodoFilter``)."""
    for option in reversed(
        (
            click.option("--endpoint", "endpoint", metavar="SLUG", help="Only this endpoint's todos."),
            click.option("--queue", metavar="Q", help="Only this queue."),
            click.option("--source", metavar="KIND", help="Only this source kind (github, manual, …)."),
            click.option("--kind", metavar="K", help="Only this kind (the event, e.g. push)."),
            click.option("--search", metavar="TEXT", help="Only titles containing TEXT (any case)."),
            click.option(
                "--place", metavar="REPO|CHANNEL", help="Only replies into this repo or channel id."
            ),
            click.option(
                "--since", metavar="TIME", help="Created at or after (RFC 3339 or YYYY-MM-DD, UTC)."
            ),
            click.option("--until", metavar="TIME", help="Created before (RFC 3339 or YYYY-MM-DD, UTC)."),
        )
    ):
        fn = option(fn)
    return fn


def _filters(state: str | None, filters: dict[str, str | None]) -> todos.TodoFilter:
    """The checked filter of ``todo list`` or a bulk ``todo requeue``. ``TodoFilter.of`` reads ""
    as no filter (the board's empty form fields); here ``--queue "$QUEUE"`` with the variable unset
    would then take every queue's todos (a bulk requeue: every queue's dead letters), so an empty
    value is refused, as the API refuses it."""
    for name, value in filters.items():
        if value == "":
            raise invalid(f"--{name} must not be empty (leave it out for every {name})")
    return todos.TodoFilter.of(state=state, **filters)


def _state_label(t: dict[str, Any]) -> str:
    return str(t["state"]) + (" (dead)" if t["dead_letter"] else "")


@todo_group.command("list")
@click.option("--state", type=click.Choice(todos.BOARD_STATES), help="Only this state (dead: dead letters).")
@filter_options
@page_options(50, todos.OPERATOR_LIMIT_MAX)
@json_option
def todo_list(
    state: str | None, before: str | None, after: str | None, limit: int, as_json: bool, **filters: str | None
) -> None:
    """List todos, newest first (no payloads), one page at a time."""

    async def go(services: Services) -> Page[dict[str, Any]]:
        return await todos.list_in_scopes(
            services.db,
            scopes=None,
            filters=_filters(state, filters),
            before=before,
            after=after,
            limit=limit,
        )

    page = do(go)
    rows = page.rows
    emit(
        as_json,
        page.answer("todos", rows),
        lambda: with_hint(
            table(
                [
                    [t["id"], f"{t['endpoint']}/{t['queue']}", _state_label(t), t["source"], t["title"][:70]]
                    for t in rows
                ],
                "no todos",
            ),
            page,
        ),
    )


def _detail_lines(row: dict[str, Any]) -> list[str]:
    lines = [
        f"{row['id']}  {row['state']}{' (dead letter)' if row['dead_letter'] else ''}",
        f"title:    {row['title']}",
        f"endpoint: {row['endpoint']}  queue: {row['queue']}",
        f"source:   {row['source']}  kind: {row['kind']}",
        f"attempt:  {row['attempt']}/{row['max_attempts']}  created {row['created_at']}",
    ]
    if row["dead_letter"]:
        lines.append(f"dead:     {todo_ops.dead_reason_text(row['dead_reason'])} ({row['dead_reason']})")
    if row["lease_expires_at"]:
        lines.append(f"lease:    until {row['lease_expires_at']}")
    if row["next_retry_at"]:
        lines.append(f"retry:    at {row['next_retry_at']}")
    lines.append(f"finished: {when(row['finished_at'])}")
    if row["reply_to"]:
        lines.append(f"reply to: {row['reply_to'].get('display', row['reply_to'].get('kind'))}")
    lines += _intake_lines(row)
    for a in row["attempts"]:
        # The agent wrote the summary and the error: a line break in them printed as lines of this
        # account of its own (a "reply … sent" never posted), so each stays on its attempt's line.
        lines.append(
            f"attempt {a['number']}: {a['endpoint']} claimed {a['claimed_at']} → {a['outcome'] or 'open'}"
            + (f" ({printable(a['summary'], keep_newlines=False)})" if a.get("summary") else "")
            + (f" error: {printable(a['error'], keep_newlines=False)}" if a.get("error") else "")
        )
    for r in row["replies"]:
        lines.append(
            f"reply {r.get('id') or r.get('reply_id')}: {r.get('state')} {r.get('display', '')} "
            f"{r.get('permalink') or ''}".rstrip()
        )
    for e in row["history"]:
        lines.append(
            f"{e['at']} {e['action']} by {e['actor']}: {e['from_state']} → {e['to_state']}"
            + (f" ({e['detail']})" if e["detail"] else "")
        )
    lines.append("result:" if row["result"] is not None else "result:   -")
    if row["result"] is not None:
        lines.append(json.dumps(row["result"], indent=2, ensure_ascii=False))
    lines.append("payload:")
    lines.append(json.dumps(row["payload"], indent=2, ensure_ascii=False))
    return lines


def _intake_lines(row: dict[str, Any]) -> list[str]:
    lines = []
    trace = row.get("routing")
    if isinstance(trace, dict):
        by = f"rule {trace['rule']}" if trace.get("rule") else str(trace.get("by") or "-")
        lines.append(f"routing:  {by}: {trace.get('why') or ''}".rstrip())
    hold = row.get("hold")
    if hold is not None:
        actor = hold["actor"] if isinstance(hold["actor"], dict) else {}
        why = hold["fault"] or actor.get("why") or (f"rule {hold['rule']}" if hold["rule"] else "")
        lines.append(f"held:     {hold['reason']}: {why}; expires {when(hold['expires_at'])}")
    return lines


async def _intake_view(services: Services, todo_id: str) -> dict[str, Any]:
    """How intake decided the todo (its routing trace; null for one made before intake, or pushed)
    and, for one that was held, why and until when: the same two fields as the API's todo."""
    async with services.db.read() as s:
        found = (
            await s.execute(
                select(Todo.routing, Todo.hold_reason, Todo.hold_detail, Todo.hold_expires_at).where(
                    Todo.id == todo_id
                )
            )
        ).first()
    if found is None:  # deleted between the two reads
        raise not_found(f"todo {todo_id!r}")
    routing, reason, detail, expires_at = found
    detail = detail if isinstance(detail, dict) else {}
    hold = None
    if reason is not None:
        hold = {
            "reason": reason,
            "actor": detail.get("actor"),
            "rule": detail.get("rule"),
            "fault": detail.get("fault"),
            "expires_at": rfc3339(expires_at),
        }
    return {"routing": routing, "hold": hold}


@todo_group.command("show")
@click.argument("todo_id")
@json_option
def todo_show(todo_id: str, as_json: bool) -> None:
    """Show one todo with its result, payload, attempts, replies, operator history and how intake
    routed it (and, for one that was quarantined, why)."""

    async def go(services: Services) -> dict[str, Any]:
        row = await todos.show_in_scopes(services.db, todo_id, scopes=None)
        return {**row, **await _intake_view(services, row["id"])}

    row = do(go)
    emit(as_json, {"todo": row}, lambda: "\n".join(_detail_lines(row)))


def _acted(action: str, answer: dict[str, Any]) -> str:
    todo, event = answer["todo"], answer["event"]
    note = f" ({event['detail']})" if event["detail"] else ""
    return f"todo {todo['id']} {action}: {event['from_state']} → {event['to_state']}{note}"


def _one(action: str, verb: str, todo_id: str, as_json: bool) -> None:
    act = {"requeue": todo_ops.requeue, "release": todo_ops.release, "cancel": todo_ops.cancel}[action]

    async def go(services: Services) -> dict[str, Any]:
        return await act(services, todo_id, scopes=None, actor=todo_ops.Actor.cli())

    answer = do(go)
    emit(as_json, answer, _acted(verb, answer))


@todo_group.command("requeue")
@click.argument("todo_id", required=False)
@click.option(
    "--state",
    type=click.Choice(todo_ops.BULK_STATES),
    help="Requeue in bulk: every dead letter (dead) or every failed todo (failed) matching the filters.",
)
@filter_options
@click.option(
    "--limit",
    type=click.IntRange(1, todo_ops.BULK_LIMIT_MAX),
    # No default here: a --limit given with TODO_ID is a mistake to say, not an option to ignore.
    help=f"Bulk: requeue at most this many (default {todo_ops.BULK_LIMIT_DEFAULT}).",
)
@click.option("--dry-run", is_flag=True, help="Bulk: count what matches, change nothing.")
@json_option
def todo_requeue(
    todo_id: str | None,
    state: str | None,
    limit: int | None,
    dry_run: bool,
    as_json: bool,
    **filters: str | None,
) -> None:
    """Put a failed todo or dead letter back on its queue with a fresh attempt budget: TODO_ID, or
    in bulk with --state dead|failed and filters (each todo gets its own history row)."""
    bulk = state is not None or dry_run or limit is not None or any(v is not None for v in filters.values())
    if todo_id is not None and bulk:
        raise click.UsageError(
            "give TODO_ID, or --state with filters (and --limit, --dry-run) for a bulk requeue, not both"
        )
    if todo_id is not None:
        _one("requeue", "requeued", todo_id, as_json)
        return
    if state is None:
        raise click.UsageError("name a todo (TODO_ID), or requeue in bulk with --state dead|failed")

    async def go(services: Services) -> dict[str, Any]:
        return await todo_ops.requeue_matching(
            services,
            _filters(state, filters),
            scopes=None,
            actor=todo_ops.Actor.cli(),
            limit=todo_ops.BULK_LIMIT_DEFAULT if limit is None else limit,
            dry_run=dry_run,
        )

    answer = do(go)
    if dry_run:
        text = f"{answer['matched']} todo(s) match; nothing was changed (--dry-run)"
    else:
        text = f"{answer['requeued']} of {answer['matched']} matching todo(s) requeued"
        if answer["more"]:
            text += "; more still match (run it again, or raise --limit)"
    emit(as_json, answer, text)


@todo_group.command("release")
@click.argument("todo_id")
@json_option
def todo_release(todo_id: str, as_json: bool) -> None:
    """End a claim now: the todo is pending again (the attempt is given back), and the agent's later
    heartbeat, complete or fail on that claim is a conflict."""
    _one("release", "released", todo_id, as_json)


@todo_group.command("cancel")
@click.argument("todo_id")
@json_option
def todo_cancel(todo_id: str, as_json: bool) -> None:
    """Cancel a pending, claimed or failed todo for good (its state becomes cancelled)."""
    _one("cancel", "cancelled", todo_id, as_json)
