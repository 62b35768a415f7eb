"""``switchboard todo``: push a todo by hand, list and inspect todos."""

from __future__ import annotations

import json
from typing import Any

import click

from switchboard import todos
from switchboard.cli.group import main
from switchboard.cli.output import emit, fail, json_option, table
from switchboard.cli.runner import do
from switchboard.errors import SwitchboardError, invalid
from switchboard.services import Services


@main.group("todo")
def todo_group() -> None:
    """Push, list and inspect todos."""


def _parse_payload(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise invalid(f"--payload is not valid JSON ({exc.msg} at position {exc.pos})") from None
    except ValueError:
        # e.g. an integer literal longer than Python converts (4300 digits).
        raise invalid("--payload is not valid JSON (a number is too long)") from None
    except RecursionError:
        raise invalid("--payload is not valid JSON (nested too deeply)") from None


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
        return {**todos.todo_row(todo), "endpoint": endpoint_slug}

    row = do(go)
    emit(as_json, {"todo": row}, f"todo {row['id']} pushed to {endpoint_slug}/{row['queue']}")


@todo_group.command("list")
@click.option("--endpoint", "endpoint_slug", metavar="SLUG", help="Only this endpoint's todos.")
@click.option("--state", type=click.Choice(("pending", "claimed", "done", "failed")), help="Only this state.")
@click.option("--queue", metavar="Q", help="Only this queue.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@json_option
def todo_list(
    endpoint_slug: str | None, state: str | None, queue: str | None, limit: int, as_json: bool
) -> None:
    """List todos, newest first (no payloads)."""

    async def go(services: Services) -> list[dict[str, Any]]:
        return await todos.list_in_scopes(
            services.db, scopes=None, endpoint_slug=endpoint_slug, state=state, queue=queue, limit=limit
        )

    rows = do(go)
    emit(
        as_json,
        {"todos": rows},
        lambda: table(
            [
                [
                    t["id"],
                    f"{t['endpoint']}/{t['queue']}",
                    t["state"] + (" (dead)" if t["dead_letter"] else ""),
                    t["source"],
                    t["title"][:70],
                ]
                for t in rows
            ],
            "no todos",
        ),
    )


@todo_group.command("show")
@click.argument("todo_id")
@json_option
def todo_show(todo_id: str, as_json: bool) -> None:
    """Show one todo with its payload, attempts and replies."""

    async def go(services: Services) -> dict[str, Any]:
        return await todos.show_in_scopes(services.db, todo_id, scopes=None)

    row = do(go)

    def text_out() -> str:
        lines = [
            f"{row['id']}  {row['state']}{' (dead letter)' if row['dead_letter'] else ''}",
            f"title:    {row['title']}",
            f"endpoint: {row['endpoint']}  queue: {row['queue']}",
            f"source:   {row['source']}  kind: {row['kind']}",
            f"attempt:  {row['attempt']}/{row['max_attempts']}  created {row['created_at']}",
        ]
        if row["reply_to"]:
            lines.append(f"reply to: {row['reply_to'].get('display', row['reply_to'].get('kind'))}")
        for a in row["attempts"]:
            lines.append(
                f"attempt {a['number']}: {a['endpoint']} claimed {a['claimed_at']} → {a['outcome'] or 'open'}"
                + (f" ({a['summary']})" if a.get("summary") else "")
            )
        for r in row["replies"]:
            lines.append(
                f"reply {r.get('id') or r.get('reply_id')}: {r.get('state')} {r.get('display', '')} "
                f"{r.get('permalink') or ''}".rstrip()
            )
        lines.append("payload:")
        lines.append(json.dumps(row["payload"], indent=2, ensure_ascii=False))
        return "\n".join(lines)

    emit(as_json, {"todo": row}, text_out)
