"""``/webhooks/{id}/trust`` and ``/webhooks/{id}/rules``: who may create work on a webhook, and which
events become work (docs/routing.md).

The checks, the dry run and the stored shapes are ``intake_config``'s; this module only maps the
operator API's caller onto an ``intake_config.Caller`` (the same scopes and team roles as every
other webhook route: members read, owners and admins change) and declares the routes and their
schemas. A rule set is the JSON document of ``switchboard webhook rules set FILE``, sent as the
body: ``{"rules": [...], "default_action": ..., "params": {...}}``. Saving answers the dry run it
passed; any fault refuses it with its stable code and nothing changes.
"""

from __future__ import annotations

from typing import Any

from switchboard import intake_config
from switchboard.api.openapi import nullable, obj, ref
from switchboard.api.routing import Operation, Param, Request
from switchboard.rules import MAX_EXPR_BYTES, MAX_NAME_CHARS, MAX_RULES
from switchboard.tenancy import Owner
from switchboard.todos import operator as todo_ops
from switchboard.trust import ENTRIES_LIMIT, MATCH_MODES


def acting(req: Request, what: str, scopes: list[Owner] | None = None) -> intake_config.Caller:
    """The API's caller as intake's operations take it: their scopes (anything else is 404; a
    listing may narrow them to ``scopes``), and the team-role check (403 for a member) naming
    ``what``."""
    caller = req.caller
    return intake_config.Caller(
        todo_ops.Actor.human(caller.human.id, caller.human.handle),
        scopes=caller.scopes if scopes is None else scopes,
        manage=lambda owner: caller.require_manage(owner, what),
    )


def _webhook(req: Request) -> tuple[str, intake_config.Caller]:
    webhook_id = req.path["id"]
    return webhook_id, acting(req, f"webhook {webhook_id!r}")


async def show_trust(req: Request) -> tuple[int, dict[str, Any]]:
    webhook_id, caller = _webhook(req)
    return 200, await intake_config.show_trust(req.services, caller, webhook_id)


async def set_trust(req: Request) -> tuple[int, dict[str, Any]]:
    webhook_id, caller = _webhook(req)
    return 200, await intake_config.set_trust(req.services, caller, webhook_id, req.body["trust"])


async def show_rules(req: Request) -> tuple[int, dict[str, Any]]:
    webhook_id, caller = _webhook(req)
    return 200, await intake_config.show_rules(req.services, caller, webhook_id)


def _rule_set(req: Request) -> dict[str, Any]:
    # The body is the rule set document itself; its fields are checked by rules.check_rule_set.
    return {key: req.body[key] for key in RULE_SET_FIELDS if key in req.body}


async def set_rules(req: Request) -> tuple[int, dict[str, Any]]:
    webhook_id, caller = _webhook(req)
    return 200, dict(await intake_config.set_rules(req.services, caller, webhook_id, _rule_set(req)))


async def dry_run_rules(req: Request) -> tuple[int, dict[str, Any]]:
    webhook_id, caller = _webhook(req)
    dry = await intake_config.set_rules(req.services, caller, webhook_id, _rule_set(req), save=False)
    return 200, dict(dry)


# ---------------------------------------------------------------------------------------------
# Shapes. Request shapes document what the server accepts, never less: anything they refuse, the
# server refuses too (schemathesis sends such bodies and expects a 4xx). Their finer rules (a
# queue's name, an expression that compiles, a login's length) are the server's alone.

# A trust setting: {"allow_all": true}, or the kind's list field (GET /kinds names it) and maybe
# `match`. The list field's name is the kind's, so any other key must be a list of strings.
TRUST_SHAPE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "allow_all": {"const": True, "description": "Trust everyone: alone, never with a list."},
        "match": {
            "type": "string",
            "enum": list(MATCH_MODES),
            "description": "Which actor must be listed (kinds that offer modes; default: sender).",
        },
    },
    "additionalProperties": {
        "type": "array",
        "items": {"type": "string"},
        "minItems": 1,
        "maxItems": ENTRIES_LIMIT,
    },
}


def trust_param(description: str, *, required: bool) -> Param:
    """The ``trust`` field. Null passes the framework, so that ``trust.check_trust`` answers it with
    its own code (``trust_required`` where one is needed)."""
    return Param("trust", "any", description, required=required, nullable=True, shape=TRUST_SHAPE)


RULE_SET_FIELDS = ("rules", "default_action", "params")
_RULE_SET_BODY = (
    Param(
        "rules",
        "any",
        shape={"type": "array", "items": ref("Rule"), "maxItems": MAX_RULES},
        description=f"The rules in order, first match wins; at most {MAX_RULES} (`too_many_rules`). "
        "Absent or empty: no rules.",
    ),
    Param(
        "default_action",
        "any",
        nullable=True,
        shape=nullable(ref("RuleAction")),
        description="What a delivery no rule matches becomes; null or absent: queued to every live target.",
    ),
    Param(
        "params",
        "any",
        nullable=True,
        shape={"type": "object"},
        description="`$params` in every expression; at most 16 KiB as JSON (`invalid_params`).",
    ),
)

_RULE_CODES = (
    "Refusals (400): `invalid_rule` (a malformed document or rule, or a rule faulting on a stored "
    "delivery in the dry run: `rule` and `delivery` name them), `invalid_expression`, "
    "`forbidden_function`, `not_granted`, `too_many_rules`, `invalid_params`; `rule` names the rule at "
    "fault. 409 `conflict`: no installed provider handles the webhook's kind."
)
_TRUST_CODES = (
    "Refusals (400): `invalid_trust` (the shape or an entry), `trust_not_supported` (the kind names no "
    "actors, or its deliveries are not signed), `trust_required` (null). 409 `conflict`: no installed "
    "provider handles the webhook's kind."
)
_ERRORS = (400, 401, 403, 404, 409)

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/webhooks/{id}/trust",
        "getWebhookTrust",
        "The webhook's trusted actors: the setting, whether its kind takes one, and one line for people.",
        "webhooks",
        show_trust,
        "WebhookTrust",
    ),
    Operation(
        "PUT",
        "/webhooks/{id}/trust",
        "setWebhookTrust",
        "Replace the webhook's trusted actors (owners/admins); applies from the next delivery.",
        "webhooks",
        set_trust,
        "WebhookTrust",
        errors=_ERRORS,
        body=(
            trust_param(
                '`{"allow_all": true}` or the kind\'s list (`{"logins": [...], "match": "sender"}`, '
                '`{"actor_ids": [...]}`: GET /kinds names the field).',
                required=True,
            ),
        ),
        description=_TRUST_CODES,
    ),
    Operation(
        "GET",
        "/webhooks/{id}/rules",
        "getWebhookRules",
        "The webhook's routing rules as stored (the empty set when it has none).",
        "webhooks",
        show_rules,
        "WebhookRules",
    ),
    Operation(
        "PUT",
        "/webhooks/{id}/rules",
        "setWebhookRules",
        "Replace the webhook's routing rules (owners/admins) after the shape, compile and grant checks "
        "and a dry run against its 50 newest stored deliveries; answers the dry run. A body with no "
        "rules and no default action clears them.",
        "webhooks",
        set_rules,
        "RuleDryRun",
        errors=_ERRORS,
        body=_RULE_SET_BODY,
        description=_RULE_CODES,
    ),
    Operation(
        "POST",
        "/webhooks/{id}/rules/test",
        "testWebhookRules",
        "The same checks and dry run as PUT /webhooks/{id}/rules, storing nothing; a fault in the dry "
        "run is reported in `error` (200) instead of refusing.",
        "webhooks",
        dry_run_rules,
        "RuleDryRun",
        errors=_ERRORS,
        body=_RULE_SET_BODY,
        description=_RULE_CODES,
    ),
)

_STRING_OR_NULL = {"type": ["string", "null"]}

# An action; the stored form names every key of a queue action (null: the default).
_QUEUE_ACTION = obj(
    {
        "type": {"const": "queue"},
        "queue": {**_STRING_OR_NULL, "description": "Default (null or absent): the webhook's queue."},
        "endpoints": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "minItems": 1,
            "uniqueItems": True,
            "description": "Only these of the webhook's targets, in this order (default: every live one).",
        },
        "exclusive": {"type": "boolean", "description": "One todo: the first live endpoint only."},
        "once": {"type": "boolean", "description": "At most one open todo per subject and queue."},
    },
    ["type"],
)
_OTHER_ACTION = obj({"type": {"type": "string", "enum": ["drop", "quarantine"]}}, ["type"])

ACTOR_VERDICT = obj(
    {
        "trusted": {"type": "boolean"},
        "sender": _STRING_OR_NULL,
        "authors": {"type": "array", "items": {"type": "string"}},
        "matched": {"type": ["string", "null"], "enum": [*MATCH_MODES, "allow_all", None]},
        "why": {"type": "string"},
    },
    ["trusted", "sender", "authors", "matched", "why"],
)

SCHEMAS: dict[str, Any] = {
    "ActorVerdict": ACTOR_VERDICT,
    "RuleAction": {"anyOf": [_QUEUE_ACTION, _OTHER_ACTION]},
    "Rule": obj(
        {
            "id": {
                "type": "string",
                "pattern": "^[a-z0-9][a-z0-9_-]{0,39}$",
                "description": "Unique in the set.",
            },
            "name": {"type": ["string", "null"], "minLength": 1, "maxLength": MAX_NAME_CHARS},
            "expr": {
                "type": "string",
                "minLength": 1,
                "description": f"jq, at most {MAX_EXPR_BYTES} bytes; matches when its first output is "
                "neither false nor null.",
            },
            "action": ref("RuleAction"),
        },
        ["id", "expr", "action"],
    ),
    "RuleSet": obj(
        {
            "rules": {"type": "array", "items": ref("Rule")},
            "default_action": nullable(ref("RuleAction")),
            "params": {"type": "object", "description": "`$params`: the owner's own values."},
        },
        ["rules", "default_action", "params"],
    ),
    "WebhookRules": obj(
        {
            "webhook": {"type": "string"},
            "routing": ref("RuleSet"),
            "rules": {"type": "integer", "description": "How many rules."},
            "active": {"type": "boolean", "description": "false: no rule set (every delivery is queued)."},
        },
        ["webhook", "routing", "rules", "active"],
    ),
    "RuleDryRun": obj(
        {
            "webhook": {"type": "string"},
            "saved": {"type": "boolean", "description": "true from PUT (it was stored), false from test."},
            "routing": ref("RuleSet"),
            "results": {
                "type": "array",
                "items": ref("DryRunResult"),
                "description": "The webhook's newest stored deliveries, newest first.",
            },
            "error": nullable(
                obj(
                    {
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                        "rule": _STRING_OR_NULL,
                        "delivery": {"type": "string"},
                    },
                    ["code", "message", "rule", "delivery"],
                )
            ),
            "untried": {
                "type": "integer",
                "minimum": 0,
                "description": "How many results are skipped: the rules were not tried on them, so a "
                "fault there could not refuse the save.",
            },
        },
        ["webhook", "saved", "routing", "results", "error", "untried"],
    ),
    "DryRunResult": obj(
        {
            "delivery": {"type": "string", "description": "The stored delivery (its event id)."},
            "received_at": {"type": "string", "format": "date-time"},
            "event": {"type": "string"},
            "was": {"type": "string", "description": "Its disposition when it arrived."},
            "disposition": {
                "type": "string",
                "description": "What it would be now: routed, quarantined, dropped, faulted, self_reply; "
                "ignored (housekeeping), skipped (not tried: the stored copy could not be read again; "
                "`why` says why).",
            },
            "by": {**_STRING_OR_NULL, "description": "trust, rule, default or none."},
            "rule": _STRING_OR_NULL,
            "rule_name": _STRING_OR_NULL,
            "why": {"type": "string"},
            "todos": {
                "type": "array",
                "items": obj(
                    {
                        "endpoint": {"type": "string"},
                        "queue": {"type": "string"},
                        "once": {"type": "boolean"},
                        "held": {"type": "string", "description": "The hold reason, for a held todo."},
                    },
                    ["endpoint", "queue"],
                ),
            },
            "fault": {**_STRING_OR_NULL, "description": "A rule's fault: refuses the save."},
            "actor": nullable(ref("ActorVerdict")),
        },
        [
            "delivery",
            "received_at",
            "event",
            "was",
            "disposition",
            "by",
            "rule",
            "rule_name",
            "why",
            "todos",
            "fault",
            "actor",
        ],
    ),
    "WebhookTrust": obj(
        {
            "webhook": {"type": "string"},
            "trust": {
                "type": ["object", "null"],
                "description": 'The setting: {"allow_all": true} or the kind\'s list (and match); null: '
                "none (a kind with actors then trusts nobody).",
            },
            "supported": {
                "type": "boolean",
                "description": "Whether the webhook's kind takes trusted actors.",
            },
            "label": {**_STRING_OR_NULL, "description": "What one entry is (GitHub login, Cairn actor id)."},
            "matches": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The match modes offered.",
            },
            "described": {"type": "string", "description": "The setting in one line, for people."},
        },
        ["webhook", "trust", "supported", "label", "matches", "described"],
    ),
}
