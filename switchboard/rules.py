"""A webhook's routing rules: their shape, their limits and the lexical check of their jq.

Pure, no I/O. ``check_rule_set`` turns what an owner sent (the parsed JSON of
``{"rules": [...], "default_action": ..., "params": {...}}``) into a ``RuleSet`` or raises
``RuleError`` with one of the stable codes of docs/routing.md. Whether each expression compiles is
asked of the sandbox (``switchboard.jq_sandbox``), which also evaluates them; this module only
decides what may be sent there.

The forbidden-name check (``switchboard.jq_text``) is a policy check at save time; the sandbox
does not rely on it (its workers run with an empty environment and no input but the envelope).
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from switchboard.errors import SwitchboardError
from switchboard.jq_text import (
    EXPR_FIRST_LINE,
    FORBIDDEN_NAMES,
    FORBIDDEN_VARIABLES,
    expression_problem,
    forbidden_name,
    rule_program,
)
from switchboard.tenancy import check_queue

__all__ = [
    "ACTION_TYPES",
    "CODES",
    "EXPR_FIRST_LINE",
    "FORBIDDEN_NAMES",
    "FORBIDDEN_VARIABLES",
    "MAX_EXPR_BYTES",
    "MAX_NAME_CHARS",
    "MAX_PARAMS_BYTES",
    "MAX_RULES",
    "RULE_ID_RE",
    "Action",
    "ActionType",
    "Rule",
    "RuleError",
    "RuleSet",
    "check_expression",
    "check_grant",
    "check_rule_set",
    "expression_problem",
    "forbidden_name",
    "parse_rule_set",
    "rule_program",
]

MAX_RULES = 32
MAX_EXPR_BYTES = 4096
MAX_PARAMS_BYTES = 16384
MAX_NAME_CHARS = 100
RULE_ID_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")

CODES = (
    "invalid_rule",
    "invalid_expression",
    "forbidden_function",
    "not_granted",
    "too_many_rules",
    "invalid_params",
)

ActionType = Literal["queue", "drop", "quarantine"]
ACTION_TYPES: tuple[ActionType, ...] = ("queue", "drop", "quarantine")
_QUEUE_KEYS = frozenset({"type", "queue", "endpoints", "exclusive", "once"})
_RULE_KEYS = frozenset({"id", "name", "expr", "action"})
_SET_KEYS = frozenset({"rules", "default_action", "params"})


class RuleError(SwitchboardError):
    """A rule set refused: ``code`` is one of CODES; ``rule_id`` names the rule when one is at fault.
    A SwitchboardError, so every surface shows it as ``{"error", "message", "rule"}``."""

    def __init__(self, code: str, message: str, rule_id: str | None = None) -> None:
        super().__init__(code, message, rule=rule_id)
        self.rule_id = rule_id


@dataclass(frozen=True)
class Action:
    type: ActionType
    queue: str | None = None  # None: the webhook's queue
    endpoints: tuple[str, ...] | None = None  # None: every live target
    exclusive: bool = False
    once: bool = False

    def as_json(self) -> dict[str, Any]:
        if self.type != "queue":
            return {"type": self.type}
        return {
            "type": "queue",
            "queue": self.queue,
            "endpoints": None if self.endpoints is None else list(self.endpoints),
            "exclusive": self.exclusive,
            "once": self.once,
        }


@dataclass(frozen=True)
class Rule:
    id: str
    expr: str
    action: Action
    name: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "expr": self.expr, "action": self.action.as_json()}


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...] = ()
    default_action: Action | None = None
    # The owner's $params, and the same as compact UTF-8 JSON (what the sandbox is handed).
    params: Mapping[str, Any] = field(default_factory=dict)
    params_json: bytes = b"{}"

    def as_json(self) -> dict[str, Any]:
        """The normalised stored form; ``check_rule_set`` accepts it back unchanged."""
        return {
            "rules": [r.as_json() for r in self.rules],
            "default_action": None if self.default_action is None else self.default_action.as_json(),
            "params": json.loads(self.params_json),
        }

    @property
    def exprs(self) -> list[tuple[str, str]]:
        """(rule id, expr) in order: what ``Sandbox.first_match`` takes."""
        return [(r.id, r.expr) for r in self.rules]


def check_rule_set(value: object, *, targets: Mapping[str, Collection[str]], webhook_queue: str) -> RuleSet:
    """The rule set ``value`` (parsed JSON) for a webhook whose targets are ``targets`` (endpoint
    slug -> the queues it is granted) and whose queue is ``webhook_queue``; RuleError otherwise."""
    rule_set = parse_rule_set(value, targets=targets.keys())
    for rule in rule_set.rules:
        check_grant(rule.action, targets=targets, webhook_queue=webhook_queue, rule_id=rule.id)
    if rule_set.default_action is not None:
        check_grant(rule_set.default_action, targets=targets, webhook_queue=webhook_queue)
    return rule_set


def parse_rule_set(value: object, *, targets: Collection[str] | None = None) -> RuleSet:
    """Shape, limits and the lexical check, without the grant check. With ``targets`` (endpoint
    slugs), an action's ``endpoints`` must name them; None skips that (a stored set read back)."""
    if not isinstance(value, dict):
        raise RuleError("invalid_rule", 'rules must be a JSON object {"rules": [...], ...}')
    _no_unknown_keys(value, _SET_KEYS, "the rule set", None)
    rules_value = value.get("rules", [])
    if not isinstance(rules_value, list):
        raise RuleError("invalid_rule", '"rules" must be a list')
    if len(rules_value) > MAX_RULES:
        raise RuleError("too_many_rules", f"{len(rules_value)} rules; a webhook has at most {MAX_RULES}")
    rules: list[Rule] = []
    seen: set[str] = set()
    for position, item in enumerate(rules_value, 1):
        rule = _rule(item, position, targets)
        if rule.id in seen:
            raise RuleError("invalid_rule", f"rule id {rule.id!r} is used twice", rule.id)
        seen.add(rule.id)
        rules.append(rule)
    default_value = value.get("default_action")
    default = None if default_value is None else _action(default_value, targets, "default_action", None)
    params, params_json = _params(value.get("params", {}))
    return RuleSet(tuple(rules), default, params, params_json)


def check_grant(
    action: Action,
    *,
    targets: Mapping[str, Collection[str]],
    webhook_queue: str,
    rule_id: str | None = None,
) -> None:
    """RuleError ``not_granted`` unless a queue action's queue is granted where it sends: to each
    endpoint it names, or, naming none, to at least one of the targets. Also the delivery-time check."""
    if action.type != "queue":
        return
    where = f"rule {rule_id!r}" if rule_id else "default_action"
    queue = action.queue or webhook_queue
    if action.endpoints is not None:
        for slug in action.endpoints:
            granted = targets.get(slug)
            if granted is None:
                raise RuleError("not_granted", f"{where}: endpoint {slug!r} is not a target", rule_id)
            if queue not in granted:
                raise RuleError(
                    "not_granted",
                    f"{where}: queue {queue!r} is not granted to endpoint {slug!r} "
                    f"(its queues: {', '.join(sorted(granted)) or 'none'})",
                    rule_id,
                )
        return
    if not any(queue in granted for granted in targets.values()):
        raise RuleError(
            "not_granted", f"{where}: queue {queue!r} is not granted to any of the webhook's targets", rule_id
        )


def check_expression(expr: object, rule_id: str | None = None) -> str:
    """The expression if it may be saved; RuleError ``invalid_expression`` or ``forbidden_function``."""
    where = f"rule {rule_id!r}" if rule_id else "expr"
    if not isinstance(expr, str):
        raise RuleError("invalid_expression", f"{where}: expr must be a string of jq", rule_id)
    try:
        size = len(expr.encode())
    except UnicodeEncodeError:
        raise RuleError("invalid_expression", f"{where}: expr is not valid UTF-8", rule_id) from None
    if size > MAX_EXPR_BYTES:
        raise RuleError(
            "invalid_expression", f"{where}: expr is {size} bytes; at most {MAX_EXPR_BYTES}", rule_id
        )
    problem = expression_problem(expr)
    if problem is not None:
        raise RuleError("invalid_expression", f"{where}: {problem}", rule_id)
    name = forbidden_name(expr)
    if name is not None:
        only = (
            "only $params"
            if name.startswith("$")
            else "they see only the delivery and $params: no environment, inputs, clock, stderr, "
            "modules or halt"
        )
        raise RuleError("forbidden_function", f"{where}: {name} is not available to rules ({only})", rule_id)
    return expr


# --- the shapes -----------------------------------------------------------------------------------


def _rule(item: object, position: int, targets: Collection[str] | None) -> Rule:
    if not isinstance(item, dict):
        raise RuleError("invalid_rule", f"rule {position} must be an object with id, expr and action")
    raw_id = item.get("id")
    if not isinstance(raw_id, str) or not RULE_ID_RE.fullmatch(raw_id):
        raise RuleError(
            "invalid_rule",
            f"rule {position}: id must match [a-z0-9][a-z0-9_-]{{0,39}} (got {_show(raw_id)})",
        )
    rule_id = raw_id
    _no_unknown_keys(item, _RULE_KEYS, f"rule {rule_id!r}", rule_id)
    name = item.get("name")
    if name is not None:
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
            raise RuleError(
                "invalid_rule", f"rule {rule_id!r}: name must be 1-{MAX_NAME_CHARS} characters", rule_id
            )
        if not name.isprintable():
            raise RuleError("invalid_rule", f"rule {rule_id!r}: name must be one printable line", rule_id)
    if "expr" not in item:
        raise RuleError("invalid_rule", f"rule {rule_id!r} has no expr", rule_id)
    if "action" not in item:
        raise RuleError("invalid_rule", f"rule {rule_id!r} has no action", rule_id)
    expr = check_expression(item["expr"], rule_id)
    action = _action(item["action"], targets, f"rule {rule_id!r}", rule_id)
    return Rule(id=rule_id, expr=expr, action=action, name=name)


def _action(value: object, targets: Collection[str] | None, where: str, rule_id: str | None) -> Action:
    if not isinstance(value, dict) or value.get("type") not in ACTION_TYPES:
        raise RuleError(
            "invalid_rule",
            f'{where}: action must be an object whose "type" is queue, drop or quarantine',
            rule_id,
        )
    kind: ActionType = value["type"]
    if kind != "queue":
        _no_unknown_keys(value, frozenset({"type"}), f"{where}: a {kind} action", rule_id)
        return Action(type=kind)
    _no_unknown_keys(value, _QUEUE_KEYS, f"{where}: a queue action", rule_id)
    queue = value.get("queue")
    if queue is not None:
        try:
            queue = check_queue(queue)
        except SwitchboardError as exc:
            raise RuleError("invalid_rule", f"{where}: {exc.message}", rule_id) from None
    endpoints = value.get("endpoints")
    if endpoints is not None:
        if not isinstance(endpoints, list) or not endpoints or not all(isinstance(e, str) for e in endpoints):
            raise RuleError(
                "invalid_rule", f"{where}: endpoints must be a non-empty list of endpoint slugs", rule_id
            )
        if len(set(endpoints)) != len(endpoints):
            raise RuleError("invalid_rule", f"{where}: endpoints names an endpoint twice", rule_id)
        if targets is not None:
            for slug in endpoints:
                if slug not in targets:
                    raise RuleError(
                        "invalid_rule",
                        f"{where}: endpoint {_show(slug)} is not a target of this webhook "
                        f"(targets: {', '.join(sorted(targets)) or 'none'})",
                        rule_id,
                    )
        endpoints = tuple(endpoints)
    flags = {}
    for flag in ("exclusive", "once"):
        flag_value = value.get(flag, False)
        if not isinstance(flag_value, bool):
            raise RuleError("invalid_rule", f"{where}: {flag} must be true or false", rule_id)
        flags[flag] = flag_value
    return Action(
        type="queue", queue=queue, endpoints=endpoints, exclusive=flags["exclusive"], once=flags["once"]
    )


def _params(value: object) -> tuple[dict[str, Any], bytes]:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise RuleError("invalid_params", "params must be a JSON object")
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        encoded = text.encode()
    except (ValueError, TypeError, RecursionError):
        # NaN/Infinity, a lone surrogate, a key that is not a string, nesting beyond the parser:
        # nothing jq could be handed as JSON.
        raise RuleError(
            "invalid_params",
            "params must be plain JSON: no NaN or Infinity, no lone surrogates, not nested too deeply",
        ) from None
    if len(encoded) > MAX_PARAMS_BYTES:
        raise RuleError(
            "invalid_params", f"params are {len(encoded)} bytes as JSON; at most {MAX_PARAMS_BYTES}"
        )
    params: dict[str, Any] = json.loads(encoded)
    return params, encoded


def _no_unknown_keys(value: dict[Any, Any], allowed: frozenset[str], where: str, rule_id: str | None) -> None:
    unknown = [k for k in value if k not in allowed]
    if unknown:
        raise RuleError(
            "invalid_rule",
            f"{where} has unknown key {_show(unknown[0])} (allowed: {', '.join(sorted(allowed))})",
            rule_id,
        )


def _show(value: object) -> str:
    """A short printable rendering of something the owner sent, for a message (reprlib bounds the
    work too: a deeply nested or huge value is cut off while it is rendered, never recursed)."""
    text = _SHOW.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_SHOW = reprlib.Repr()
_SHOW.maxlevel = 3
_SHOW.maxstring = _SHOW.maxother = 60
