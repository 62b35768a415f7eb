"""``switchboard webhook rules``: a webhook's routing rules (docs/routing.md, "Routing rules").

``set`` and ``test`` read the rule set document from FILE (``-``: stdin), and both answer the dry
run ``intake_config.set_rules`` makes on the webhook's newest stored deliveries: one line per
delivery saying what it would become. ``set`` stores the rules unless a check or the dry run
refuses them; ``test`` never stores, and exits 1 when they would be refused so that a script can
check a file before saving it. ``show`` prints what is stored.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import click

from switchboard import intake_config
from switchboard.cli.output import emit, fail, json_option, table
from switchboard.cli.runner import do
from switchboard.cli.webhooks import webhook_group
from switchboard.errors import SwitchboardError
from switchboard.intake_config import Caller, DryRun
from switchboard.sanitize import DuplicateKey, no_duplicate_keys
from switchboard.services import Services

# Far above the largest rule set that can pass (32 rules of 4 KiB, 16 KiB of params, names, JSON
# layout), so only a wrong file is refused by size, before it is all read into memory.
MAX_FILE_BYTES = 1024 * 1024


@webhook_group.group("rules")
def webhook_rules_group() -> None:
    """A webhook's routing rules: which deliveries become work, on which queue, for whom."""


def read_rule_file(path: str) -> Any:
    """The parsed JSON document in ``path`` (``-``: stdin), or a one-line error: an unreadable file
    is ``invalid_argument``, a file that is not a JSON document, or names a key twice in one object,
    ``invalid_rule`` (the document is malformed, as ``rules.parse_rule_set`` would call any other
    shape it refuses)."""
    name = "stdin" if path == "-" else path
    if path == "-":
        if sys.stdin is None:
            fail("invalid_argument: cannot read stdin: it is closed")
        data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    else:
        try:
            with open(path, "rb") as file:
                data = file.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            fail(f"invalid_argument: cannot read {name}: {exc.strerror or type(exc).__name__}")
    if len(data) > MAX_FILE_BYTES:
        fail(f"invalid_rule: {name} is larger than {MAX_FILE_BYTES // 1024} KiB: not a rule set")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        fail(f"invalid_rule: {name} is not UTF-8 text")
    if not text.strip():
        fail(f'invalid_rule: {name} is empty: give a JSON object {{"rules": [...], ...}}')
    try:
        return json.loads(text, object_pairs_hook=no_duplicate_keys)
    except json.JSONDecodeError as exc:
        fail(f"invalid_rule: {name} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
    except DuplicateKey as exc:
        fail(f"invalid_rule: {name} names the key {str(exc)[:60]!r} twice in one object")
    except ValueError:
        # An integer literal longer than Python converts (4300 digits).
        fail(f"invalid_rule: {name} is not valid JSON (a number is too long)")
    except RecursionError:
        fail(f"invalid_rule: {name} is not valid JSON (nested too deeply)")


def _action_text(action: dict[str, Any] | None) -> str:
    if action is None:
        return "queue to every live target"
    if action["type"] != "queue":
        return str(action["type"])
    parts = [f"queue {action.get('queue') or '(the webhook queue)'}"]
    if action.get("endpoints"):
        parts.append(f"to {', '.join(action['endpoints'])}")
    parts += [flag for flag in ("exclusive", "once") if action.get(flag)]
    return " ".join(parts)


def _rules_text(routing: dict[str, Any]) -> list[str]:
    lines = []
    for position, rule in enumerate(routing.get("rules") or [], 1):
        name = f" ({rule['name']})" if rule.get("name") else ""
        lines.append(f"{position}. {rule['id']}{name} → {_action_text(rule['action'])}")
        lines.append(f"   {rule['expr']}")
    lines.append(f"default: {_action_text(routing.get('default_action'))}")
    if routing.get("params"):
        lines.append(f"params: {json.dumps(routing['params'], ensure_ascii=False, sort_keys=True)}")
    return lines


def _decided_by(row: dict[str, Any]) -> str:
    if row["rule"]:
        return f"rule {row['rule']}"
    return str(row["by"] or "-")


def _made(row: dict[str, Any]) -> str:
    made = []
    for todo in row["todos"]:
        mark = f" (held: {todo['held']})" if todo.get("held") else " (once)" if todo.get("once") else ""
        made.append(f"{todo['endpoint']}/{todo['queue']}{mark}")
    return ", ".join(made) or "no todo"


def dry_run_text(dry: DryRun, *, test: bool) -> str:
    """One line per stored delivery (newest first), then the rules and whether they were saved."""
    results = dry["results"]
    rows = [
        [
            row["delivery"],
            row["event"] or "-",
            f"{row['was'] or '-'} → {row['disposition']}",
            _decided_by(row),
            _made(row),
            f"fault: {row['fault']}" if row["fault"] else row["why"],
        ]
        for row in results
    ]
    lines = [table(rows, "no stored deliveries to try the rules on")]
    if results:
        tally = Counter(row["disposition"] for row in results)
        counts = ", ".join(f"{n} {what}" for what, n in sorted(tally.items()))
        lines.append(f"dry run on the {len(results)} newest stored deliveries: {counts}")
    if dry["untried"]:
        n = dry["untried"]
        lines.append(
            f"the rules were not tried on {n} stored {'delivery' if n == 1 else 'deliveries'} "
            "(skipped: the last column says why), so a fault there could not refuse them"
        )
    lines += _rules_text(dry["routing"])
    error = dry["error"]
    if error is not None:
        lines.append(f"not saved: would be refused: {error['code']}: {error['message']}")
    elif dry["saved"] and not dry["routing"]["rules"] and dry["routing"]["default_action"] is None:
        lines.append(f"saved: webhook {dry['webhook']} has no rules from its next delivery")
    elif dry["saved"]:
        lines.append(f"saved: webhook {dry['webhook']} routes by these rules from its next delivery")
    elif test:
        lines.append("not saved (test): `switchboard webhook rules set` would save them")
    return "\n".join(lines)


def _set(webhook_id: str, path: str, *, save: bool) -> DryRun:
    value = read_rule_file(path)

    async def go(services: Services) -> DryRun:
        try:
            return await intake_config.set_rules(services, Caller.cli(), webhook_id, value, save=save)
        except SwitchboardError as exc:
            if exc.extra.get("delivery") is None:
                raise
            # The dry run refused it: the whole table is one `rules test` away.
            raise SwitchboardError(
                exc.code,
                f"{exc.message} (`switchboard webhook rules test {webhook_id} FILE` shows the whole dry run)",
            ) from None

    return do(go)


@webhook_rules_group.command("set")
@click.argument("webhook_id")
@click.argument("file", metavar="FILE")
@json_option
def webhook_rules_set(webhook_id: str, file: str, as_json: bool) -> None:
    """Check and save WEBHOOK_ID's rules from FILE (`-`: stdin), a JSON object
    {"rules": [...], "default_action": ..., "params": {...}} with at most 32 rules. They are checked,
    compiled and tried on the webhook's newest stored deliveries first; any fault refuses them and
    nothing changes. {"rules": []} clears them."""
    dry = _set(webhook_id, file, save=True)
    emit(as_json, dict(dry), lambda: dry_run_text(dry, test=False))


@webhook_rules_group.command("test")
@click.argument("webhook_id")
@click.argument("file", metavar="FILE")
@json_option
def webhook_rules_test(webhook_id: str, file: str, as_json: bool) -> None:
    """Everything `rules set` does but saving: the checks, then what each of the webhook's newest
    stored deliveries would become under FILE's rules. Exits 1 when they would be refused."""
    dry = _set(webhook_id, file, save=False)
    emit(as_json, dict(dry), lambda: dry_run_text(dry, test=True))
    if dry["error"] is not None:
        sys.exit(1)


@webhook_rules_group.command("show")
@click.argument("webhook_id")
@json_option
def webhook_rules_show(webhook_id: str, as_json: bool) -> None:
    """WEBHOOK_ID's rules as stored, in order, with the default action and the params."""

    async def go(services: Services) -> dict[str, Any]:
        return await intake_config.show_rules(services, Caller.cli(), webhook_id)

    view = do(go)

    def text_out() -> str:
        if not view["active"]:
            return f"webhook {webhook_id}: no rules: every delivery is queued to every live target"
        count = view["rules"]
        head = f"webhook {webhook_id}: {count} rule{'' if count == 1 else 's'}, first match wins"
        return "\n".join([head, *_rules_text(view["routing"])])

    emit(as_json, view, text_out)
