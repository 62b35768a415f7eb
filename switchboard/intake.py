"""Intake: what a routed delivery becomes (docs/routing.md). Trust, then the webhook's rules, then
the chosen action, decided once per delivery into a ``Plan`` that ingest turns into rows.

The order is the contract:

1. **trust**, only for a verified delivery of a kind that declares actors: ``trust.judge`` of the
   webhook's setting against who the signed body names. Untrusted: one held todo (reason
   ``untrusted_actor``), disposition ``quarantined``;
2. **rules** (``webhook.routing`` not null): the first rule whose jq expression matches the
   delivery's envelope, in the process's sandbox (``jq_sandbox``); no match is the rule set's
   ``default_action``, or else the delivery is queued to every live target as if there were no
   rules. A fault (a jq error, a rule past its time limit or the delivery's budget) holds it
   (``rule_fault``, disposition ``faulted``);
3. **the action**: ``queue`` (on a queue, to some of the targets, exclusively, ``once`` per
   subject), ``drop`` or ``quarantine``. A queue is re-checked against each chosen endpoint's grant
   now, whatever it was when the rules were saved: none granted is a fault, never another queue.

Rules only narrow: the targets ``plan`` is given (live, granted the webhook's queue, not the sender
of this very reply) are all a rule can choose from. Anything unexpected (a provider's ``actors``
raising, a stored setting that is not what ``rules.check_rule_set`` saves) fails closed as a
faulted hold: the delivery is never lost and never answered 500.

Without rules and with trust satisfied, the plan is exactly what ingest did before intake existed
(one todo per target on the webhook's queue) at the cost of one trust judgement: no sandbox call.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from switchboard.ingest_config import Target, WebhookConfig
from switchboard.models import Endpoint
from switchboard.provider import Address, Delivery, SourceKind, Verdict
from switchboard.sanitize import clean_line, redact_headers, storable_encoded
from switchboard.services import Services
from switchboard.todos import new_todo_values
from switchboard.trust import ActorVerdict, judge

log = logging.getLogger("switchboard.intake")

# The reserved queue of held todos, on the webhook's own endpoint; no agent ever reads it.
HOLD_QUEUE = "quarantine"
HOLD_DAYS = 30
HOLD_TTL = timedelta(days=HOLD_DAYS)
# todos.once_key is String(300): a longer subject key is folded by its hash.
ONCE_KEY_MAX = 300

DISPOSITIONS = ("routed", "quarantined", "dropped", "faulted", "self_reply")
HOLD_REASONS = ("untrusted_actor", "rule", "rule_fault")
QUEUE_ALL: dict[str, Any] = {"type": "queue"}


@dataclass(frozen=True)
class Mint:
    """One todo the plan makes: on ``target``'s endpoint, on ``queue``; ``once_key``: at most one
    open todo per (endpoint, queue, key) (``todos.uq_todos_once``)."""

    target: Target
    queue: str
    once_key: str | None = None


@dataclass(frozen=True)
class Hold:
    """The one held todo a quarantined or faulted delivery becomes, on the webhook's own endpoint."""

    endpoint_id: str
    slug: str
    reason: str  # HOLD_REASONS
    detail: dict[str, Any]


@dataclass(frozen=True)
class Plan:
    """What a routed delivery becomes.

    ``disposition``: ``routed`` (``mints``, possibly none left after ``once``), ``quarantined`` or
    ``faulted`` (``hold``), ``dropped`` (nothing), ``self_reply`` (a rule chose only endpoints
    that sent this very reply). ``trace``: the routing trace every todo records; ``event_trace``
    adds what each target got (``targets``), for the event. ``actor``: the trust verdict (None
    when there was no trust step).
    """

    disposition: str
    mints: tuple[Mint, ...] = ()
    hold: Hold | None = None
    trace: dict[str, Any] = field(default_factory=dict)
    outcomes: tuple[dict[str, Any], ...] = ()
    actor: ActorVerdict | None = None

    @property
    def event_trace(self) -> dict[str, Any]:
        return {**self.trace, "targets": [dict(o) for o in self.outcomes]}


@dataclass(frozen=True)
class Content:
    """What every todo of one delivery shares, held or not: stored once, the same on each."""

    source: str
    kind: str
    title: str
    payload: Any
    encoded: bytes
    reply_to: dict[str, Any] | None
    event_id: str | None
    now: datetime
    # ``encoded`` is the event's raw body itself: the todos keep no copy (``Todo.payload``).
    in_event: bool = False

    @classmethod
    def of(
        cls,
        source: str,
        verdict: Verdict,
        address: Address | None,
        *,
        event_id: str | None,
        now: datetime,
        encoded: tuple[Any, bytes] | None = None,
        in_event: bool = False,
    ) -> Content:
        """The todo content of a delivery, as ingest has always made it (``encoded``: the payload's
        ``storable_encoded`` when the caller has it already, or with ``in_event`` the event's body)."""
        payload, body = encoded or storable_encoded(verdict.payload if verdict.payload is not None else {})
        return cls(
            source=source,
            kind=clean_line(verdict.event or source, 100),
            title=clean_line(verdict.title or f"{source} delivery", 300),
            payload=payload,
            encoded=body,
            reply_to=address.as_dict() if address is not None else None,
            event_id=event_id,
            now=now,
            in_event=in_event,
        )


class IntakeFault(Exception):
    """A delivery the chosen action cannot be carried out for: held as ``rule_fault``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------
# The decision


async def plan(
    services: Services,
    config: WebhookConfig,
    kind: SourceKind,
    delivery: Delivery,
    verdict: Verdict,
    verified: bool,
    address: Address | None,
    targets: list[Target],
    *,
    trusted: bool = False,
    live: Sequence[Target] | None = None,
    encoded: tuple[Any, bytes] | None = None,
) -> Plan:
    """Decide what a routed delivery becomes (see the module docstring). ``targets``: the live
    targets that get a todo without rules (after echo suppression); ``live``: every live target,
    echoed or not (default ``targets``), so a rule that names only the sender of this very reply
    is a ``self_reply``, not a fault. ``trusted``: the trust step is satisfied (a human's release).
    Never raises: anything unexpected is a faulted hold."""
    actor: ActorVerdict | None = None
    try:
        actor = _trust(kind, config, delivery, verdict, verified, trusted)
        if actor is not None and not actor["trusted"]:
            return _held(
                config,
                "untrusted_actor",
                {"actor": actor},
                _trace("trust", None, {"type": "quarantine"}, f"untrusted actor: {actor['why']}", actor),
                "quarantined",
                actor,
            )
        routing = config.webhook.routing
        if routing is None:
            return _everyone(config, targets, actor)
        return await _route(
            services, config, routing, delivery, verdict, verified, address, targets, live, actor, encoded
        )
    except Exception as exc:
        log.exception("intake on webhook %s failed; the delivery is held as a rule fault", config.id)
        fault = f"intake failed: {type(exc).__name__}"
        trace = _trace("none", None, {"type": "quarantine"}, fault, actor)
        return _held(config, "rule_fault", {"fault": fault, "actor": actor}, trace, "faulted", actor)


def _everyone(config: WebhookConfig, targets: list[Target], actor: ActorVerdict | None) -> Plan:
    """No rules: a todo on every target, on the webhook's queue (which ``config.targets`` already
    checked each is granted), as before intake existed."""
    queue = config.webhook.queue
    trace = _trace("none", None, QUEUE_ALL, "no routing rules: queued to every live target", actor)
    return Plan(
        "routed",
        mints=tuple(Mint(t, queue) for t in targets),
        trace=trace,
        outcomes=tuple({"endpoint": t.slug, "queue": queue, "outcome": "todo"} for t in targets),
        actor=actor,
    )


def _trust(
    kind: SourceKind,
    config: WebhookConfig,
    delivery: Delivery,
    verdict: Verdict,
    verified: bool,
    trusted: bool,
) -> ActorVerdict | None:
    """The trust step's verdict; None when there is none (unverified, or a kind without actors)."""
    if not verified or kind.actors is None:
        return None
    found = judge(kind.trust, config.webhook.trust, kind.actors(delivery, verdict))
    if trusted and not found["trusted"]:
        # A human released it: trusted for this delivery, the verdict otherwise as judged.
        return {**found, "trusted": True, "why": f"released by a person ({found['why']})"}
    return found


async def _route(
    services: Services,
    config: WebhookConfig,
    routing: Any,
    delivery: Delivery,
    verdict: Verdict,
    verified: bool,
    address: Address | None,
    targets: list[Target],
    live: Sequence[Target] | None,
    actor: ActorVerdict | None,
    encoded: tuple[Any, bytes] | None,
) -> Plan:
    """Steps 2 and 3 under the webhook's rule set."""
    if not isinstance(routing, Mapping):
        raise TypeError("webhook routing is not an object")
    rules = list(routing.get("rules") or [])
    default = routing.get("default_action")
    index: int | None = None
    if rules:
        envelope = envelope_bytes(config, delivery, verdict, verified, address, actor, encoded)
        params = json.dumps(routing.get("params") or {}, separators=(",", ":")).encode()
        match = await services.sandbox.first_match(
            [(str(rule["id"]), str(rule["expr"])) for rule in rules],
            envelope,
            params,
            # The webhook's owner scope: one tenant's rules never take the whole pool.
            tenant=config.owner.owner_human_id or config.owner.owner_team_id,
        )
        if match.fault is not None:
            # The sandbox's words name the rule ("rule r1 exceeded its time limit of 200 ms").
            fault = clean_line(match.fault, 300)
            rule = _rule_by_id(rules, match.rule)
            trace = _trace("rule", rule, {"type": "quarantine"}, fault, actor)
            detail = {"rule": match.rule, "fault": fault, "actor": actor}
            return _held(config, "rule_fault", detail, trace, "faulted", actor)
        index = match.index
    if index is not None:
        rule = rules[index]
        action = rule["action"]
        by, why = "rule", f"rule {rule['id']} matched"
    else:
        rule = None
        action = default if default is not None else QUEUE_ALL
        why = "no rule matched: " + (
            "the default action" if default is not None else "no default action, queued to every live target"
        )
        by = "default"
    trace = _trace(by, rule, action, why, actor)
    return _act(config, action, rule, targets, live, address, trace, actor)


def _act(
    config: WebhookConfig,
    action: Any,
    rule: Mapping[str, Any] | None,
    targets: list[Target],
    live: Sequence[Target] | None,
    address: Address | None,
    trace: dict[str, Any],
    actor: ActorVerdict | None,
) -> Plan:
    """Step 3: carry out ``action`` (a fault in doing so holds the delivery as ``rule_fault``)."""
    kind = action.get("type") if isinstance(action, Mapping) else None
    rule_id = rule["id"] if rule is not None else None
    if kind == "drop":
        return Plan("dropped", trace=trace, actor=actor)
    if kind == "quarantine":
        return _held(config, "rule", {"rule": rule_id, "actor": actor}, trace, "quarantined", actor)
    if kind != "queue":
        raise TypeError(f"unknown action type {kind!r}")
    try:
        return _queue(config, action, targets, live, address, trace, actor)
    except IntakeFault as fault:
        why = f"{trace['why']}; {fault.code}: {fault}"
        held = {**trace, "why": why}
        return _held(
            config,
            "rule_fault",
            {"rule": rule_id, "fault": f"{fault.code}: {fault}", "actor": actor},
            held,
            "faulted",
            actor,
        )


def _queue(
    config: WebhookConfig,
    action: Mapping[str, Any],
    targets: list[Target],
    live: Sequence[Target] | None,
    address: Address | None,
    trace: dict[str, Any],
    actor: ActorVerdict | None = None,
) -> Plan:
    """A ``queue`` action: which endpoints (among the live targets, in the order ``endpoints``
    names them), which queue (each chosen endpoint's grant checked now), ``exclusive`` and
    ``once``. An endpoint that sent this very reply is chosen like any other, then gets nothing."""
    queue = action.get("queue") or config.webhook.queue
    pool = list(live) if live is not None else list(targets)
    names = action.get("endpoints")
    if names is None:
        chosen = pool
    else:
        by_slug = {t.slug: t for t in pool}
        chosen = [by_slug[slug] for slug in names if slug in by_slug]
        if not chosen:
            raise IntakeFault("no_live_endpoint", f"none of {', '.join(map(str, names))} is a live target")
    grants = _grants(config)
    skipped: list[dict[str, Any]] = []
    granted: list[Target] = []
    for target in chosen:
        if queue in grants.get(target.endpoint_id, ()):
            granted.append(target)
        else:
            skipped.append({"endpoint": target.slug, "queue": queue, "outcome": "not_granted"})
    if names is not None and skipped:
        # Each live endpoint a rule names must hold the queue now, as when the rules were saved
        # (rules.check_grant): one that lost it fails closed and never hands the work to another
        # (with ``exclusive``, only a revoked or expired first endpoint passes it on).
        lost = ", ".join(str(s["endpoint"]) for s in skipped)
        raise IntakeFault("not_granted", f"queue {queue!r} is no longer granted to {lost}")
    if not granted:
        raise IntakeFault("not_granted", f"queue {queue!r} is not granted to any chosen endpoint")
    if action.get("exclusive"):
        granted, rest = granted[:1], granted[1:]
        skipped += [{"endpoint": t.slug, "queue": queue, "outcome": "not_chosen"} for t in rest]
    minting = {t.endpoint_id for t in targets}
    skipped += [
        {"endpoint": t.slug, "queue": queue, "outcome": "own_reply"}
        for t in granted
        if t.endpoint_id not in minting
    ]
    granted = [t for t in granted if t.endpoint_id in minting]
    if not granted:
        return Plan("self_reply", trace=trace, outcomes=tuple(skipped), actor=actor)
    once_key = None
    if action.get("once"):
        once_key = subject_key(address)
        if once_key is None:
            trace = {**trace, "why": f"{trace['why']}; once: no subject, not folded"}
    mints = tuple(Mint(t, queue, once_key) for t in granted)
    made = [{"endpoint": t.slug, "queue": queue, "outcome": "todo"} for t in granted]
    return Plan("routed", mints=mints, trace=trace, outcomes=(*made, *skipped), actor=actor)


def _held(
    config: WebhookConfig,
    reason: str,
    detail: dict[str, Any],
    trace: dict[str, Any],
    disposition: str,
    actor: ActorVerdict | None,
) -> Plan:
    owner: Endpoint = config.owner
    outcome = {"endpoint": owner.slug, "queue": HOLD_QUEUE, "outcome": "held"}
    hold = Hold(owner.id, owner.slug, reason, detail)
    return Plan(disposition, hold=hold, trace=trace, outcomes=(outcome,), actor=actor)


def _grants(config: WebhookConfig) -> dict[str, tuple[str, ...]]:
    """Each of the webhook's endpoints' granted queues, as the configuration read them."""
    return {e.id: tuple(e.queues or ()) for e in (config.owner, *config.routed)}


def _rule_by_id(rules: list[Any], rule_id: str | None) -> Mapping[str, Any] | None:
    return next((r for r in rules if isinstance(r, Mapping) and r.get("id") == rule_id), None)


def _trace(
    by: str, rule: Mapping[str, Any] | None, action: Any, why: str, actor: ActorVerdict | None
) -> dict[str, Any]:
    """The routing trace (docs/routing.md, "The routing trace")."""
    return {
        "by": by,
        "rule": rule.get("id") if rule is not None else None,
        "rule_name": rule.get("name") if rule is not None else None,
        "action": dict(action) if isinstance(action, Mapping) else action,
        "why": why,
        "actor": actor,
    }


# ---------------------------------------------------------------------------------------------
# The envelope rules see


def subject(address: Address | None) -> dict[str, Any] | None:
    """The thread a delivery is about, from its reply address: kind, key (the address's display,
    which names the thread) and the address's fields; None without an address."""
    if address is None:
        return None
    return {**address.fields, "kind": address.kind, "provider": address.provider, "key": address.display}


def subject_key(address: Address | None) -> str | None:
    """A ``once`` key: the subject's key, or its hash when longer than the column."""
    if address is None or not address.display:
        return None
    key = address.display
    if len(key) <= ONCE_KEY_MAX:
        return key
    return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def envelope_bytes(
    config: WebhookConfig,
    delivery: Delivery,
    verdict: Verdict,
    verified: bool,
    address: Address | None,
    actor: ActorVerdict | None,
    encoded: tuple[Any, bytes] | None = None,
) -> bytes:
    """The envelope as JSON (docs/routing.md, "What a rule sees"). The payload is the todo's stored
    encoding, spliced in rather than encoded again."""
    payload = (encoded or storable_encoded(verdict.payload if verdict.payload is not None else {}))[1]
    head = {
        "source": config.webhook.source,
        "event": clean_line(verdict.event or delivery.source, 100),
        "verified": verified,
        "headers": {name.lower(): value for name, value in redact_headers(delivery.headers).items()},
        "actor": actor,
        "subject": subject(address),
    }
    # ASCII-escaped: a header's lone surrogate must not stop the encoding.
    text = json.dumps(head, separators=(",", ":"), ensure_ascii=True)
    return text[:-1].encode() + b',"payload":' + payload + b"}"


# ---------------------------------------------------------------------------------------------
# Rows


def todo_rows(decided: Plan, content: Content) -> list[dict[str, Any]]:
    """The todo rows a plan makes, as the ingest writer's multi-row insert takes them: every row
    sets the same columns (a held one and a pending one may share a statement)."""
    common = {
        "source": content.source,
        "kind": content.kind,
        "title": content.title,
        "payload": content.payload,
        "reply_to": dict(content.reply_to) if content.reply_to else None,
        "event_id": content.event_id,
        "now": content.now,
        "encoded": content.encoded,
        "in_event": content.in_event,
        "routing": decided.trace,
    }
    hold = decided.hold
    if hold is not None:
        held = new_todo_values(
            endpoint_id=hold.endpoint_id,
            queue=HOLD_QUEUE,
            hold_reason=hold.reason,
            hold_detail=hold.detail,
            hold_expires_at=content.now + HOLD_TTL,
            **common,
        )
        return [held]
    return [
        new_todo_values(endpoint_id=m.target.endpoint_id, queue=m.queue, once_key=m.once_key, **common)
        for m in decided.mints
    ]


def answered(
    decided: Plan, todos: Sequence[Mapping[str, Any]], folded: Mapping[str, str | None]
) -> list[dict[str, Any]]:
    """The todos a 202 names: one per todo ``decided`` minted (``todos``: its rows, as stored), in
    the plan's order; one ``once`` folded (``folded``: its id -> the open todo's) names the open todo
    it was folded into, ``created: false``. A held todo is never named: the sender is the party it
    was held from."""
    if decided.hold is not None:
        return []
    out = []
    for mint, todo in zip(decided.mints, todos, strict=True):
        todo_id, created = str(todo["id"]), True
        if todo_id in folded:
            into, created = folded[todo_id], False
            if into is None:
                continue
            todo_id = into
        out.append({"id": todo_id, "endpoint": mint.target.slug, "queue": mint.queue, "created": created})
    return out
