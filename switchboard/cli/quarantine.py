"""``switchboard quarantine``: the held todos that trust or a rule kept from every agent, and what the
operator decides for each (docs/routing.md, "Quarantine"): ``release`` (routing run again with trust
satisfied, ``--queue`` straight to a granted queue, ``--trust`` adding the delivery's actor first) or
``discard`` with a reason. The operations and their checks are ``switchboard.quarantine``'s; the
history names the CLI (``cli:USER``)."""

from __future__ import annotations

from typing import Any

import click

from switchboard import quarantine
from switchboard.cli.group import main
from switchboard.cli.output import emit, json_option, table, when
from switchboard.cli.pages import page_options, with_hint
from switchboard.cli.runner import do
from switchboard.intake_config import Caller
from switchboard.paging import Page
from switchboard.services import Services


@main.group("quarantine")
def quarantine_group() -> None:
    """Held deliveries no agent sees: list them, release or discard each."""


def why_held(row: dict[str, Any]) -> str:
    """Why a held todo is held, in a few words (the actor verdict's own explanation for trust)."""
    reason = row["reason"] or "held"
    if reason == "untrusted_actor":
        actor = row["actor"] if isinstance(row["actor"], dict) else {}
        return f"untrusted_actor: {actor.get('why') or 'no trusted actor'}"
    if reason == "rule_fault":
        where = f"rule {row['rule']}" if row["rule"] else "the rules"
        return f"rule_fault: {where} faulted: {row['fault'] or 'unknown fault'}"
    if reason == "rule":
        return f"rule: rule {row['rule']} chose quarantine" if row["rule"] else "rule: the default action"
    return str(reason)


@quarantine_group.command("list")
@click.option("--webhook", "webhook_id", metavar="ID", help="Only this webhook's held deliveries.")
@page_options(default=quarantine.LIST_LIMIT_DEFAULT)
@json_option
def quarantine_list(
    webhook_id: str | None, before: str | None, after: str | None, limit: int, as_json: bool
) -> None:
    """Held todos, newest first: when, which webhook and endpoint, the event, why it is held, and
    when it expires (30 days after it arrived, unless someone decides first)."""

    async def go(services: Services) -> Page[dict[str, Any]]:
        return await quarantine.list_held(
            services.db, Caller.cli(), webhook_id=webhook_id, before=before, after=after, limit=limit
        )

    page = do(go)
    rows = [
        [
            row["id"],
            when(row["created_at"]),
            row["webhook"] or "-",
            row["endpoint"],
            f"{row['source']}:{row['event']}" if row["event"] else row["source"],
            why_held(row),
            f"expires {when(row['expires_at'])}",
            row["title"],
        ]
        for row in page.rows
    ]
    emit(
        as_json,
        page.answer("todos", page.rows),
        lambda: with_hint(table(rows, "nothing is quarantined"), page),
    )


def _release_text(answer: dict[str, Any]) -> str:
    todo = answer["todo"]
    lines = []
    if answer["trusted"]:
        lines.append(f"webhook {todo['webhook']} now trusts {', '.join(answer['trusted'])}")
    made = answer["todos"]
    if todo["state"] == "held":
        lines.append(f"todo {todo['id']} is still held: routing held it again ({answer['outcome']})")
    elif made:
        where = ", ".join(f"{m['id']} on {m['endpoint']}/{m['queue']}" for m in made)
        lines.append(f"todo {todo['id']} released: made {where}")
    else:
        lines.append(f"todo {todo['id']} released: it made no todo ({answer['outcome']})")
    lines.append(f"why: {answer['routing']['why']}")
    return "\n".join(lines)


@quarantine_group.command("release")
@click.argument("todo_id")
@click.option(
    "--queue", metavar="Q", help="Put it straight on queue Q of its endpoint (which must be granted Q)."
)
@click.option(
    "--trust",
    "trust",
    is_flag=True,
    help="Trust the delivery's actor first (added to the webhook's trusted actors), then release.",
)
@json_option
def quarantine_release(todo_id: str, queue: str | None, trust: bool, as_json: bool) -> None:
    """Release a held todo: routing runs again with trust satisfied (the rules still apply), or
    --queue Q makes one todo on that queue of its endpoint."""

    async def go(services: Services) -> dict[str, Any]:
        return await quarantine.release(services, Caller.cli(), todo_id, queue=queue, trust=trust)

    answer = do(go)
    emit(as_json, answer, lambda: _release_text(answer))


@quarantine_group.command("discard")
@click.argument("todo_id")
@click.option("--reason", required=True, metavar="TEXT", help="Why (kept in the todo's history).")
@json_option
def quarantine_discard(todo_id: str, reason: str, as_json: bool) -> None:
    """Discard a held todo for good, with a reason; it becomes cancelled and no agent ever sees it."""

    async def go(services: Services) -> dict[str, Any]:
        return await quarantine.discard(services, Caller.cli(), todo_id, reason)

    answer = do(go)
    emit(as_json, answer, f"todo {answer['todo']['id']} discarded: {answer['event']['detail']}")
