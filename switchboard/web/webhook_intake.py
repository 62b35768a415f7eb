"""One webhook's page (``/ui/webhooks/{id}``): its facts, how many of its deliveries are held in
quarantine (linking to them), its trusted actors and its routing rules (docs/routing.md).

* **Trusted actors**: the setting in words and in full, and (managers) the form that replaces it.
* **Routing rules**: the rule set as JSON in a textarea. **Preview (dry run)** runs every check and
  tries the rules on the webhook's newest stored deliveries, showing what each would become, and
  saves nothing; **Save** runs the same and stores the rules only if nothing faults. A refusal shows
  its stable code (``invalid_rule``, ``invalid_expression``, …) and names the rule and the delivery
  at fault, with the text as it was typed.

Both are ``intake_config``'s operations, as in the API and the CLI. Another scope's webhook is a 404;
a team member sees the page without the forms and gets 403 from them.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from sqlalchemy import select

from switchboard import intake_config, quarantine
from switchboard.errors import SwitchboardError
from switchboard.intake_config import DRY_RUN_DELIVERIES, DryRun
from switchboard.models import Endpoint, Route, Webhook
from switchboard.provider import SourceKind
from switchboard.rules import RuleError
from switchboard.sanitize import DuplicateKey, no_duplicate_keys
from switchboard.services import services_of
from switchboard.tenancy import Owner
from switchboard.web.confirm import confirm_link
from switchboard.web.forms import see_other
from switchboard.web.html import (
    EMPTY,
    Safe,
    badge,
    h,
    hint,
    join,
    kv,
    mono,
    muted,
    notice_of,
    page,
    path_part,
    post_form,
    when,
)
from switchboard.web.intake_views import action_text, caller_of, dry_run_table
from switchboard.web.session import Viewer
from switchboard.web.trust_form import setting_form, shown_list, trust_fields, trust_value

log = logging.getLogger("switchboard.web")

RULES_EXAMPLE = (
    '{"rules": [{"id": "agent-label", "expr": "(.payload.issue.labels // []) | any(.name == \\"agent\\")", '
    '"action": {"type": "queue"}}], "default_action": {"type": "drop"}}'
)


def page_url(webhook_id: str) -> str:
    return f"/ui/webhooks/{path_part(webhook_id)}"


async def _found(request: web.Request, viewer: Viewer) -> tuple[Webhook, Endpoint]:
    async with services_of(request).db.read() as s:
        return await viewer.owned(s, Webhook, request.match_info["webhook_id"], "webhook")


def _manages(viewer: Viewer, endpoint: Endpoint) -> bool:
    scope = viewer.scope_of(Owner.of(endpoint))
    return scope is not None and scope.manage


async def _targets(request: web.Request, webhook: Webhook, owner: Endpoint) -> list[Endpoint]:
    """The webhook's own endpoint and its routes' endpoints: what a rule's ``endpoints`` may name."""
    async with services_of(request).db.read() as s:
        routed = (
            await s.scalars(
                select(Endpoint)
                .join(Route, Route.endpoint_id == Endpoint.id)
                .where(Route.webhook_id == webhook.id)
                .order_by(Route.created_at)
            )
        ).all()
    return [owner, *routed]


def _targets_text(targets: list[Endpoint]) -> Safe:
    return join(
        h(
            '<div>{slug} {state} <span class="muted">queues {queues}</span></div>',
            slug=mono(e.slug),
            state=badge(e.state) if e.state != "active" else EMPTY,
            queues=", ".join(e.queues or ()),
        )
        for e in targets
    )


# ---------------------------------------------------------------------------------------------
# Sections


def _trust_section(
    viewer: Viewer,
    webhook: Webhook,
    kind: SourceKind | None,
    manage: bool,
    form: Mapping[str, str] | None,
    error: SwitchboardError | None = None,
) -> Safe:
    view = intake_config.trust_view(kind, webhook)
    spec = kind.trust if kind is not None else None
    if not view["supported"] or spec is None:
        return h(
            '<section class="card"><p class="muted">Not available for this kind: {why}.</p></section>',
            why="its deliveries are unsigned, so a name in them proves nothing"
            if spec is not None
            else "its deliveries name no actors",
        )
    shown = h(
        "<p><strong>{described}</strong></p>{entries}",
        described=view["described"],
        entries=shown_list(spec, webhook.trust),
    )
    if not manage:
        return h('<section class="card">{shown}</section>', shown=shown)
    fields = trust_fields(
        form if form is not None else setting_form(spec, webhook.trust),
        label=f"{spec.label}s",
        matches=spec.matches,
        legend="Change them",
        note="Replaces the setting whole; it applies from the next delivery. A delivery from anyone "
        "else becomes one held todo in quarantine, never work for an agent.",
    )
    editor = post_form(
        viewer,
        f"{page_url(webhook.id)}/trust",
        "trust-form",
        join([fields, Safe('<p><button type="submit">Save trusted actors</button></p>')]),
    )
    return h(
        '<section class="card">{shown}{refusal}{editor}</section>',
        shown=shown,
        refusal=_refusal(webhook, error) if error is not None else EMPTY,
        editor=editor,
    )


def _refusal(webhook: Webhook, error: SwitchboardError) -> Safe:
    """A refused rule set: the stable code, and the rule and delivery at fault when known."""
    pairs: list[tuple[str, object]] = [("code", mono(error.code)), ("message", error.message)]
    rule = error.extra.get("rule")
    if rule:
        pairs.append(("rule", mono(rule)))
    delivery = error.extra.get("delivery")
    if delivery:
        pairs.append(
            (
                "delivery",
                h(
                    '<a class="mono" href="{u}/deliveries/{d}">{id}</a>',
                    u=page_url(webhook.id),
                    d=path_part(str(delivery)),
                    id=delivery,
                ),
            )
        )
    return h('<div class="refusal" role="alert"><h3>Refused</h3>{kv}</div>', kv=kv(pairs))


def _rules_section(
    viewer: Viewer,
    webhook: Webhook,
    routing: Mapping[str, Any],
    active: bool,
    manage: bool,
    text: str | None,
    error: SwitchboardError | None,
) -> Safe:
    rules = routing.get("rules") or []
    default = routing.get("default_action")
    summary = (
        h(
            "<p>{n} rule{s}, first match wins; otherwise {default}.</p>",
            n=len(rules),
            s="" if len(rules) == 1 else "s",
            default=action_text(default) if default else "queued to every live target",
        )
        if active
        else Safe("<p>No routing rules: every delivery is queued to every live target.</p>")
    )
    stored = json.dumps(routing, indent=2, ensure_ascii=False) if active else ""
    if not manage:
        return h(
            '<section class="card">{summary}{pre}</section>',
            summary=summary,
            pre=h("<pre>{t}</pre>", t=stored) if active else EMPTY,
        )
    editor = post_form(
        viewer,
        f"{page_url(webhook.id)}/rules",
        "rules-form",
        h(
            '<label for="rules">Rule set (JSON)</label>'
            '<textarea id="rules" name="rules" rows="14" spellcheck="false" class="code" '
            'placeholder="{example}">{text}</textarea>{note}'
            '<p class="actions"><button type="submit" name="do" value="preview" class="secondary">'
            'Preview (dry run)</button> <button type="submit" name="do" value="save">Save</button></p>',
            example=RULES_EXAMPLE,
            text=stored if text is None else text,
            note=hint(
                '{"rules": [{"id", "name"?, "expr", "action"}…], "default_action": …, "params": {…}}: '
                "see docs/routing.md. Empty: no rules. The preview tries the rules on the "
                f"{DRY_RUN_DELIVERIES} newest stored deliveries and saves nothing; Save does the same "
                "checks and stores them only if nothing faults."
            ),
        ),
    )
    return h(
        '<section class="card">{summary}{refusal}{editor}</section>',
        summary=summary,
        refusal=_refusal(webhook, error) if error is not None else EMPTY,
        editor=editor,
    )


def _dry_section(webhook: Webhook, dry: DryRun) -> Safe:
    outcome = (
        "Saved."
        if dry["saved"]
        else "Nothing was saved."
        if dry["error"] is None
        else "Saving these rules would be refused:"
    )
    fault = (
        h('<p class="flag">{code}: {m}</p>', code=dry["error"].get("code"), m=dry["error"].get("message"))
        if dry["error"]
        else EMPTY
    )
    untried = (
        h(
            '<p class="flag">The rules were not tried on {n} of these (skipped: "Why" says why), so a '
            "fault there could not refuse them.</p>",
            n=dry["untried"],
        )
        if dry["untried"]
        else EMPTY
    )
    return h(
        '<h2 id="dry-run">Dry run</h2><p class="hint">What the {n} newest stored deliveries would become '
        "under these rules, with the webhook's trust and endpoints as they are now. {outcome}</p>{fault}"
        "{untried}{table}",
        n=len(dry["results"]),
        outcome=outcome,
        fault=fault,
        untried=untried,
        table=dry_run_table(webhook.id, dry["results"]),
    )


async def render(
    request: web.Request,
    viewer: Viewer,
    *,
    error: SwitchboardError | None = None,
    status: int = 200,
    trust_form: Mapping[str, str] | None = None,
    rules_text: str | None = None,
    dry: DryRun | None = None,
) -> web.Response:
    services = services_of(request)
    webhook, endpoint = await _found(request, viewer)
    manage = _manages(viewer, endpoint)
    kind = services.providers.sources.get(webhook.source)
    rules = intake_config.rules_view(webhook)
    held = (await quarantine.quarantined_counts(services.db, [webhook.id]))[webhook.id]
    targets = await _targets(request, webhook, endpoint)
    base = page_url(webhook.id)
    links = [h('<a class="button secondary" href="{b}/deliveries">Deliveries</a>', b=base)]
    if manage:
        links.append(confirm_link(f"{base}/edit", "Edit", "secondary"))
    facts: list[tuple[str, object]] = [
        ("id", mono(webhook.id)),
        ("endpoint", mono(endpoint.slug)),
        ("source", webhook.source),
        ("queue", webhook.queue),
        ("deliveries", "signed" if webhook.trust_mode == "signed" else "unsigned (the URL is the only key)"),
        ("state", badge("paused", "claimed") if webhook.paused_at else badge("active")),
        ("targets", _targets_text(targets)),
        ("created", when(webhook.created_at)),
    ]
    quarantined = (
        h(
            '<p><a href="/ui/quarantine?webhook={u}"><strong>{n}</strong> held todo{s}</a>: deliveries '
            "trust or a rule held back, waiting for a person to release or discard them.</p>",
            u=path_part(webhook.id),
            n=f"{held:,}",
            s="" if held == 1 else "s",
        )
        if held
        else muted("Nothing held in quarantine.")
    )
    body = h(
        '<p><a href="/ui/webhooks">← Webhooks</a></p><h1 class="title">{name}</h1>'
        '<p class="muted">{about}</p><div class="actions">{links}</div>'
        '<section class="card">{facts}</section>'
        '<h2>Quarantine</h2><section class="card">{held}</section>'
        "<h2>Trusted actors</h2>{trust}<h2>Routing rules</h2>{rules}{dry}",
        name=webhook.name or webhook.id,
        about=webhook.description or "",
        links=join(links),
        facts=kv(facts),
        held=quarantined,
        # A refusal is shown in the card of the form that was sent (the trusted actors' form comes
        # back with ``trust_form``, the rules' with ``rules_text``), not under the other one.
        trust=_trust_section(
            viewer, webhook, kind, manage, trust_form, error if trust_form is not None else None
        ),
        rules=_rules_section(
            viewer,
            webhook,
            rules["routing"],
            rules["active"],
            manage,
            rules_text,
            error if rules_text is not None else None,
        ),
        dry=_dry_section(webhook, dry) if dry is not None else EMPTY,
    )
    return page(
        f"Webhook {webhook.name or webhook.id}",
        body,
        viewer,
        active="webhooks",
        status=status,
        error=f"{error.code}: {error.message}" if error is not None else None,
        notice=notice_of(request),
    )


async def webhook_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await render(request, viewer)


# ---------------------------------------------------------------------------------------------
# Changes


async def trust_save(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    webhook, _ = await _found(request, viewer)
    try:
        value = trust_value(services.providers.sources.get(webhook.source), viewer.form)
        await intake_config.set_trust(
            services, caller_of(viewer, "change its trusted actors"), webhook.id, value
        )
    except SwitchboardError as exc:
        if exc.code == "not_found":
            raise
        return await render(request, viewer, error=exc, status=exc.http_status, trust_form=viewer.form)
    log.info("web: %s set the trusted actors of webhook %s", viewer.handle, webhook.id)
    raise see_other(page_url(webhook.id), "trust_saved")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number out of range")
    return value


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def parse_rules(text: str) -> object:
    """The rule set typed into the textarea (blank: no rules), or ``invalid_rule`` saying where the
    JSON is broken. A key named twice in one object is refused: which one was meant is not ours to
    guess (the API refuses it too)."""
    if not text.strip():
        return None
    try:
        return json.loads(
            text, object_pairs_hook=no_duplicate_keys, parse_float=_finite, parse_constant=_no_constant
        )
    except DuplicateKey as exc:
        raise RuleError(
            "invalid_rule", f"the rule set names the key {str(exc)[:60]!r} twice in one object"
        ) from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise RuleError("invalid_rule", f"the rule set is not valid JSON: {exc.msg} ({where})") from None
    except (ValueError, RecursionError) as exc:
        raise RuleError("invalid_rule", f"the rule set is not valid JSON: {str(exc)[:100]}") from None


async def rules_post(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Preview (``do=preview``: the dry run, nothing saved) or Save (``do=save``)."""
    services = services_of(request)
    webhook, _ = await _found(request, viewer)
    text = viewer.form.get("rules", "")
    save = viewer.form.get("do") == "save"
    caller = caller_of(viewer, "change its routing rules")
    dry: DryRun | None = None
    try:
        if viewer.form.get("do") not in ("preview", "save"):
            raise RuleError("invalid_rule", "press Preview (dry run) or Save")
        value = parse_rules(text)
        dry = await intake_config.set_rules(services, caller, webhook.id, value, save=save)
    except SwitchboardError as exc:
        if exc.code == "not_found":
            raise
        if save and exc.extra.get("delivery"):
            # A fault in the dry run: show the whole table, so the rule's effect on every stored
            # delivery is in view next to the refusal.
            try:
                dry = await intake_config.set_rules(
                    services, caller, webhook.id, parse_rules(text), save=False
                )
            except SwitchboardError:
                dry = None
        return await render(request, viewer, error=exc, status=exc.http_status, rules_text=text, dry=dry)
    if save:
        log.info("web: %s saved the routing rules of webhook %s", viewer.handle, webhook.id)
        if not dry or not dry["untried"]:
            raise see_other(page_url(webhook.id), "rules_saved")
        # Saved, but not tried on every stored delivery (a Linear or Plain webhook's cannot be read
        # again): the page says so with the dry run, where the usual notice would claim it passed.
    return await render(request, viewer, rules_text=text, dry=dry)
