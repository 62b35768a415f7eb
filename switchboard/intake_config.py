"""What an owner sets on a webhook for intake (docs/routing.md): its trusted actors and its routing
rules, with the dry run that makes saving rules safe.

The API, the web UI and the CLI call these for a ``Caller``: the same three things the todo operator
actions take (``todos.operator``): who acts, the owner scopes they may see (``None``: the instance
operator at the CLI, every scope) and the check that refuses a caller who may only read a scope. A
webhook outside the caller's scopes is ``not_found``, exactly like one that does not exist.

Every change goes through ``config_changes.changing``: ingest serves from a per-process copy of the
webhook row, which hears of the change at commit (this process) or by NOTIFY (the others), and the
group-commit writer re-checks the row before storing, so a new setting applies from the next delivery
in every process.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, TypedDict

from multidict import CIMultiDict, CIMultiDictProxy
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard import trust as trusting
from switchboard.config_changes import changing
from switchboard.db import rfc3339, utcnow
from switchboard.delivery_signing import SIGNATURE_HEADERS, signed
from switchboard.echo import own_reply_scopes
from switchboard.errors import SwitchboardError, conflict, not_found
from switchboard.ingest_config import Target, WebhookConfig, config_by_token_hash
from switchboard.instances import instance_of
from switchboard.intake import HOLD_QUEUE, plan
from switchboard.models import Endpoint, Event, Webhook
from switchboard.plugins import Providers
from switchboard.provider import Actors, Address, Delivery, SourceKind, Verdict
from switchboard.rules import RuleError, check_rule_set
from switchboard.sanitize import clean_line
from switchboard.services import Services
from switchboard.tenancy import Owner, endpoint_is_live, webhook_secret
from switchboard.todos.operator import Actor, ManageCheck
from switchboard.todos.queries import visible
from switchboard.vault import VaultError

log = logging.getLogger("switchboard.intake")

# How many of a webhook's newest stored deliveries a rule set is tried on before it is saved.
DRY_RUN_DELIVERIES = 50


@dataclass(frozen=True)
class Caller:
    """Who acts on a webhook or a held todo, and where (see the module docstring)."""

    actor: Actor
    scopes: list[Owner] | None = None
    manage: ManageCheck | None = None

    @classmethod
    def cli(cls) -> Caller:
        """The instance operator at the CLI: every scope, every change."""
        return cls(Actor.cli())

    def require_manage(self, owner: Owner) -> None:
        if self.manage is not None:
            self.manage(owner)


async def owned_webhook(
    s: AsyncSession, caller: Caller, webhook_id: Any, *, manage: bool, lock: bool = False
) -> tuple[Webhook, Endpoint]:
    """The webhook and its owner endpoint, if the caller sees it (else ``not_found``) and, with
    ``manage``, may change it (else the caller's check refuses); the row locked with ``lock``."""
    if not isinstance(webhook_id, str) or not webhook_id or len(webhook_id) > 40:
        raise not_found(f"webhook {webhook_id!r}")
    query = (
        select(Webhook, Endpoint)
        .join(Endpoint, Endpoint.id == Webhook.endpoint_id)
        .where(Webhook.id == webhook_id, visible(caller.scopes))
    )
    found = (await s.execute(query.with_for_update(of=Webhook) if lock else query)).first()
    if found is None:
        raise not_found(f"webhook {webhook_id!r}")
    if manage:
        caller.require_manage(Owner.of(found[1]))
    return found[0], found[1]


def _kind(providers: Providers, webhook: Webhook) -> SourceKind:
    kind = providers.sources.get(webhook.source)
    if kind is None:
        raise conflict(f"no installed provider handles source kind {webhook.source!r}")
    return kind


# ---------------------------------------------------------------------------------------------
# Trusted actors


def _signed(kind: SourceKind, webhook: Webhook | None = None) -> bool:
    """Whether the kind's deliveries are signed (and the webhook takes them signed)."""
    return kind.secret != "none" and (webhook is None or webhook.trust_mode == "signed")


def trust_for_create(providers: Providers, source: str, value: object) -> dict[str, Any] | None:
    """The trust setting a new webhook of ``source`` is created with (``tenancy.create_webhook``'s
    ``trust``): for a signed kind with actors the choice is required (``trust_required``) and
    checked (``invalid_trust``); any other kind takes none (``trust_not_supported``). An unknown
    kind is left to ``create_webhook`` to refuse."""
    kind = providers.sources.get(source)
    if kind is None:
        return None
    if value is None and not trusting.trust_needed(kind.trust, signed=_signed(kind)):
        return None
    return trusting.check_trust(kind.trust, value, signed=_signed(kind))


def trust_view(kind: SourceKind | None, webhook: Webhook) -> dict[str, Any]:
    """A webhook's trust as every surface shows it: the setting, one line for people, and whether
    the kind takes one at all."""
    spec = kind.trust if kind is not None else None
    supported = kind is not None and trusting.trust_needed(spec, signed=_signed(kind, webhook))
    return {
        "webhook": webhook.id,
        "trust": webhook.trust,
        "supported": supported,
        "label": spec.label if spec is not None and supported else None,
        "matches": list(spec.matches) if spec is not None and supported else [],
        "described": trusting.describe(spec, webhook.trust) if supported else "not available for this kind",
    }


async def show_trust(services: Services, caller: Caller, webhook_id: str) -> dict[str, Any]:
    async with services.db.read() as s:
        webhook, _ = await owned_webhook(s, caller, webhook_id, manage=False)
    return trust_view(services.providers.sources.get(webhook.source), webhook)


async def set_trust(services: Services, caller: Caller, webhook_id: str, value: object) -> dict[str, Any]:
    """Replace the webhook's trusted actors with ``value`` (``{"allow_all": true}`` or the kind's
    list, checked by ``trust.check_trust``): ``trust_not_supported`` on a kind without actors or
    with unsigned deliveries; applies from the next delivery in every process."""
    async with changing(services.db) as s:
        webhook, _ = await owned_webhook(s, caller, webhook_id, manage=True, lock=True)
        kind = _kind(services.providers, webhook)
        webhook.trust = trusting.check_trust(kind.trust, value, signed=_signed(kind, webhook))
    return trust_view(kind, webhook)


async def trust_delivery_actor(
    services: Services, caller: Caller, webhook_id: str, verdict: Mapping[str, Any] | None
) -> list[str]:
    """For "trust this actor and release": add whom the webhook's setting needs so that a delivery
    judged ``verdict`` (a held todo's actor verdict) is trusted (``trust.actors_to_add``); the
    actors added, none when it is trusted already. ``conflict`` when nobody can be added (the
    delivery names no actor, or the kind has none)."""
    async with changing(services.db) as s:
        webhook, _ = await owned_webhook(s, caller, webhook_id, manage=True, lock=True)
        kind = _kind(services.providers, webhook)
        if kind.trust is None or not _signed(kind, webhook) or not isinstance(verdict, Mapping):
            raise trusting.TrustError(
                "trust_not_supported", "this webhook's deliveries name no actor to trust"
            )
        adding = trusting.actors_to_add(kind.trust, webhook.trust, verdict)
        if adding:
            webhook.trust = trusting.add_actors(kind.trust, webhook.trust, adding)
            return adding
        named = Actors(verdict.get("sender"), tuple(verdict.get("authors") or ()))
        if not trusting.judge(kind.trust, webhook.trust, named)["trusted"]:
            raise conflict("the delivery names no actor that trusting would let in")
    return []


# ---------------------------------------------------------------------------------------------
# A stored delivery, read again


class Unreadable(Exception):
    """A stored delivery that cannot be read again here (said in one line, never a secret)."""


@dataclass(frozen=True)
class Reread:
    delivery: Delivery
    verdict: Verdict
    verified: bool


def reread(services: Services, config: WebhookConfig, kind: SourceKind, event: Event) -> Reread:
    """A stored delivery through its kind's verifier again, the way ``deliveries.redeliver`` does:
    the stored body (the exact bytes that were verified) and kept headers, re-signed with the
    webhook's current secret, judged at the time it arrived (a body that carries its send time, as
    Cairn's does, was fresh then), else now (a signature that carries its signing time, as Slack's
    and Stripe's do, was made now). ``Unreadable`` when the kind refuses it (one Switchboard cannot
    sign for), the secret cannot be read, or the verifier fails."""
    webhook = config.webhook
    signing = _signed(kind, webhook)
    try:
        secret = webhook_secret(services.vault, webhook)
    except VaultError:
        raise Unreadable("the webhook's signing secret cannot be read") from None
    if signing and not secret:
        raise Unreadable("the webhook is waiting for its signing secret")
    headers = signed(webhook.source, secret, event.headers, event.body)
    if signing and not any(name.lower() in SIGNATURE_HEADERS for name in headers):
        # A plugin kind whose scheme the core cannot make (Linear, Plain): its verifier would only
        # say "signature missing", which reads as a broken delivery rather than what it is.
        raise Unreadable(f"Switchboard cannot sign {webhook.source} deliveries again to verify a stored copy")
    wire = CIMultiDictProxy(CIMultiDict(headers))
    verdict = None
    for at in (event.received_at, utcnow()):
        delivery = Delivery(
            source=webhook.source, headers=wire, body=event.body, received_at=at, secret=secret
        )
        try:
            verdict = kind.verify(delivery)
        except Exception as exc:
            log.warning(
                "webhook %s: the %s verifier raised %s", webhook.id, webhook.source, type(exc).__name__
            )
            raise Unreadable(f"the {webhook.source} verifier failed on it") from None
        if verdict.ok:
            return Reread(delivery, verdict, signing and event.verified)
    detail = clean_line(verdict.detail if verdict is not None else "", 120)
    raise Unreadable(f"the {webhook.source} verifier refuses the stored copy ({detail})")


def stored_address(services: Services, config: WebhookConfig, got: Reread) -> Address | None:
    """The reply address ingest would keep, without binding an unbound webhook (a dry run changes
    nothing): withheld when it names another instance than the one the webhook serves."""
    address = None
    if got.verified:
        try:
            address = services.providers.source(config.webhook.source).derive_address(
                got.delivery, got.verdict
            )
        except Exception:
            return None
    if not isinstance(address, Address):
        return None
    bound = config.webhook.instance
    if bound is not None and instance_of(services.providers, address) != bound:
        return None
    return address


# ---------------------------------------------------------------------------------------------
# Routing rules


def rules_view(webhook: Webhook) -> dict[str, Any]:
    """A webhook's rule set as stored (``rules.RuleSet.as_json``), or the empty one."""
    routing = webhook.routing if isinstance(webhook.routing, dict) else None
    return {
        "webhook": webhook.id,
        "routing": routing or {"rules": [], "default_action": None, "params": {}},
        "rules": len((routing or {}).get("rules") or []),
        "active": routing is not None,
    }


async def show_rules(services: Services, caller: Caller, webhook_id: str) -> dict[str, Any]:
    async with services.db.read() as s:
        webhook, _ = await owned_webhook(s, caller, webhook_id, manage=False)
    return rules_view(webhook)


class DryRun(TypedDict):
    """What ``set_rules`` answers: the rule set as it would be stored, whether it was, and per
    stored delivery (newest first) what it would have become. ``error``: the fault that refuses a
    save (``rules test`` reports it here; ``rules set`` raises it)."""

    webhook: str
    saved: bool
    routing: dict[str, Any]
    results: list[dict[str, Any]]
    error: dict[str, Any] | None
    # How many of ``results`` the rules were not tried on (``skipped``: not read again): a fault
    # there cannot refuse the save, so every surface says so.
    untried: int


async def _config(s: AsyncSession, webhook: Webhook) -> WebhookConfig:
    config = await config_by_token_hash(s, webhook.ingest_token_hash)
    if config is None:
        raise not_found(f"webhook {webhook.id!r}")
    return config


def _grants(config: WebhookConfig) -> dict[str, list[str]]:
    """The queues each live endpoint of the webhook is granted: what a rule may choose from."""
    now = utcnow()
    return {e.slug: list(e.queues or ()) for e in (config.owner, *config.routed) if endpoint_is_live(e, now)}


async def set_rules(
    services: Services, caller: Caller, webhook_id: str, value: object, *, save: bool = True
) -> DryRun:
    """Check ``value`` (``{"rules": [...], "default_action": ..., "params": {...}}``; null or no
    rules at all clears them) and, unless a fault refuses it, store it: the shape and limits
    (``rules.check_rule_set``, against the grants of the webhook's live endpoints now), every
    expression compiled in the sandbox (``invalid_expression``), then a dry run against the
    webhook's ``DRY_RUN_DELIVERIES`` newest stored deliveries, where any fault refuses it
    (``invalid_rule``, naming the rule and the delivery). ``save=False`` is ``rules test``: the same
    checks and dry run, nothing stored, a dry-run fault reported in ``error``."""
    async with services.db.read() as s:
        webhook, _ = await owned_webhook(s, caller, webhook_id, manage=True)
        config = await _config(s, webhook)
    kind = _kind(services.providers, webhook)
    rule_set = (
        None if value is None else check_rule_set(value, targets=_grants(config), webhook_queue=webhook.queue)
    )
    routing = (
        rule_set.as_json() if rule_set is not None and (rule_set.rules or rule_set.default_action) else None
    )
    if rule_set is not None and rule_set.rules:
        problems = await services.sandbox.compile_check([r.expr for r in rule_set.rules])
        for rule, problem in zip(rule_set.rules, problems, strict=True):
            if problem is not None:
                raise RuleError(
                    "invalid_expression", f"rule {rule.id!r}: {clean_line(problem, 300)}", rule.id
                )
    results, error = await _dry_run(services, config, kind, routing, stop_at_fault=save)
    if error is not None and save:
        raise SwitchboardError(
            error["code"], error["message"], rule=error["rule"], delivery=error["delivery"]
        )
    if save:
        async with changing(services.db) as s:
            stored, _ = await owned_webhook(s, caller, webhook_id, manage=True, lock=True)
            stored.routing = routing
    shown = routing or {"rules": [], "default_action": None, "params": {}}
    untried = sum(1 for row in results if row["disposition"] == "skipped")
    return {
        "webhook": webhook.id,
        "saved": save,
        "routing": shown,
        "results": results,
        "error": error,
        "untried": untried,
    }


async def _dry_run(
    services: Services,
    config: WebhookConfig,
    kind: SourceKind,
    routing: dict[str, Any] | None,
    *,
    stop_at_fault: bool,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Each of the newest stored deliveries through ``intake.plan`` under ``routing`` (the webhook's
    trust as it is now; nothing stored, bound or rung); the first fault, if any, as an error."""
    async with services.db.read() as s:
        events = (
            await s.scalars(
                select(Event)
                .where(Event.webhook_id == config.id)
                .order_by(Event.id.desc())
                .limit(DRY_RUN_DELIVERIES)
            )
        ).all()
    candidate = replace(config, webhook=_with_routing(config.webhook, routing))
    targets = config.targets()
    results: list[dict[str, Any]] = []
    error: dict[str, Any] | None = None
    for event in events:
        result = await _dry_one(services, candidate, kind, event, targets)
        results.append(result)
        if result["fault"] is not None and error is None:
            rule = result["rule"]
            where = f"rule {rule!r}" if rule else "the rules"
            error = {
                "code": "invalid_rule",
                "message": f"{where} faulted on stored delivery {event.id} ({event.event_type}): "
                f"{result['fault']}",
                "rule": rule,
                "delivery": event.id,
            }
            if stop_at_fault:
                break
    return results, error


def _with_routing(webhook: Webhook, routing: dict[str, Any] | None) -> Webhook:
    """A detached copy of the webhook row with other rules (never added to a session)."""
    copy = Webhook(**{key: getattr(webhook, key) for key in _WEBHOOK_KEYS})
    copy.routing = routing
    return copy


_WEBHOOK_KEYS = tuple(column.key for column in Webhook.__mapper__.column_attrs)


async def _dry_one(
    services: Services, config: WebhookConfig, kind: SourceKind, event: Event, targets: list[Target]
) -> dict[str, Any]:
    """What one stored delivery would become now (see ``_dry_run``)."""
    row: dict[str, Any] = {
        "delivery": event.id,
        "received_at": rfc3339(event.received_at),
        "event": event.event_type,
        "was": event.disposition,
        "disposition": "skipped",
        "by": None,
        "rule": None,
        "rule_name": None,
        "why": "",
        "todos": [],
        "fault": None,
        "actor": None,
    }
    if not targets:
        return {**row, "why": "the webhook has no live endpoint: ingest would refuse it (503)"}
    try:
        got = reread(services, config, kind, event)
    except Unreadable as exc:
        return {**row, "why": f"not tried: {exc}"}
    if got.verdict.ignore or got.verdict.respond is not None:
        return {**row, "disposition": "ignored", "why": "housekeeping: never routed"}
    address = stored_address(services, config, got)
    minting = targets
    if got.verified:
        # Echo suppression, as ingest does it before the rules (``ingest_steps.disposition``): the
        # agent's own reply coming back never reaches them, so it can neither show as work here
        # nor refuse a save by faulting a rule.
        scopes = [t.owner_scope for t in targets]
        echoed = await own_reply_scopes(services, got.delivery, got.verdict, address, scopes)
        minting = [t for t in targets if t.owner_scope not in echoed]
        if not minting:
            return {**row, "disposition": "self_reply", "why": "the agent's own reply: never routed"}
    decided = await plan(
        services, config, kind, got.delivery, got.verdict, got.verified, address, minting, live=targets
    )
    trace = decided.trace
    hold = decided.hold
    todos = [
        {"endpoint": m.target.slug, "queue": m.queue, "once": m.once_key is not None} for m in decided.mints
    ]
    if hold is not None:
        todos = [{"endpoint": hold.slug, "queue": HOLD_QUEUE, "held": hold.reason}]
    fault = hold.detail.get("fault") if hold is not None and hold.reason == "rule_fault" else None
    return {
        **row,
        "disposition": decided.disposition,
        "by": trace.get("by"),
        "rule": trace.get("rule"),
        "rule_name": trace.get("rule_name"),
        "why": trace.get("why", ""),
        "todos": todos,
        "fault": fault,
        "actor": decided.actor,
    }
