"""How intake's decisions read on a page (docs/routing.md): a delivery's actor verdict, a routing
trace, why a todo is held, and what a rule set's dry run would make of each stored delivery; and
``caller_of``, the viewer as intake's operations take them.

Everything shown here comes from a delivery or from an owner's rules: logins, titles, rule names,
jq faults. It is data, so it reaches the page only through ``h()`` and the widgets (escaped), and a
stored value of an unexpected shape is shown as plain text rather than trusted to be a dict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from switchboard.intake_config import Caller
from switchboard.todos.operator import Actor
from switchboard.web.html import (
    EMPTY,
    MUTED_DASH,
    Safe,
    badge,
    h,
    join,
    kv,
    mono,
    muted,
    path_part,
    table,
    when,
)
from switchboard.web.session import Viewer

# A held todo's reason, in words (docs/routing.md, "Quarantine").
HOLD_REASONS = {
    "untrusted_actor": "untrusted actor",
    "rule": "a rule chose quarantine",
    "rule_fault": "a rule faulted",
}
# What decided a delivery (the trace's ``by``), in words.
DECIDED_BY = {
    "trust": "trust (the actor was not trusted)",
    "rule": "a rule",
    "default": "the default action",
    "release": "a release from quarantine",
    "none": "no rule (queued to every live target)",
}
DISPOSITION_CLASS = {
    "routed": "done",
    "quarantined": "quarantined",
    "faulted": "faulted",
    "dropped": "dropped",
    "self_reply": "cancelled",
    "ignored": "cancelled",
    "skipped": "cancelled",
}


def caller_of(viewer: Viewer, what: str) -> Caller:
    """The viewer as ``intake_config`` and ``quarantine`` take a caller: their scopes (anything
    else is a 404) and the team-role check (403 for a member) naming ``what`` they tried."""
    return Caller(
        Actor.human(viewer.human_id, viewer.handle),
        scopes=[scope.owner for scope in viewer.scopes],
        manage=lambda owner: viewer.managing(owner, what),
    )


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def action_text(action: object) -> str:
    """An action in one line: ``queue``, ``queue reviews (endpoints oncall; exclusive; once)``,
    ``drop``, ``quarantine``."""
    if not isinstance(action, Mapping):
        return "—" if action is None else json.dumps(action, ensure_ascii=False)[:200]
    kind = str(action.get("type", "?"))
    if kind != "queue":
        return kind
    text = f"queue {action['queue']}" if action.get("queue") else "queue (the webhook's)"
    notes = []
    endpoints = action.get("endpoints")
    if isinstance(endpoints, list) and endpoints:
        notes.append("endpoints " + ", ".join(str(e) for e in endpoints))
    notes += [flag for flag in ("exclusive", "once") if action.get(flag)]
    return f"{text} ({'; '.join(notes)})" if notes else text


def verdict_cell(actor: object) -> Safe:
    """An actor verdict: trusted or not, sender, authors, and why."""
    if not isinstance(actor, Mapping):
        return muted("no trust step (this kind names no actors, or the delivery was unverified)")
    trusted = actor.get("trusted") is True
    authors = actor.get("authors")
    names = ", ".join(str(a) for a in authors) if isinstance(authors, list) and authors else "none"
    return h(
        '<div>{badge} sender {sender}, authors {authors}</div><div class="muted">{why}</div>',
        badge=badge("trusted", "ok") if trusted else badge("untrusted", "failed"),
        sender=mono(actor.get("sender") or "—"),
        authors=mono(names),
        why=actor.get("why") or "",
    )


def rule_text(rule: object, name: object = None) -> Safe:
    if not rule:
        return MUTED_DASH
    return h("{id}{name}", id=mono(rule), name=h(" ({n})", n=name) if name else EMPTY)


def _targets(targets: object) -> Safe:
    if not isinstance(targets, list) or not targets:
        return MUTED_DASH
    return join(
        h(
            "<div>{endpoint} / {queue}: {outcome}</div>",
            endpoint=mono(_map(t).get("endpoint", "?")),
            queue=_map(t).get("queue", "?"),
            outcome=_map(t).get("outcome", "?"),
        )
        for t in targets
    )


def trace_card(trace: object, *, what: str = "todo") -> Safe:
    """A todo's (or event's) routing trace: what decided it, which rule, the action, why, and the
    actor verdict (and for an event, what each target got)."""
    if not isinstance(trace, Mapping):
        return h(
            '<p class="muted">No routing trace: this {what} was made before routing rules existed, or '
            "was not routed (a refusal, duplicate, housekeeping or one made by hand).</p>",
            what=what,
        )
    by = str(trace.get("by", "?"))
    pairs: list[tuple[str, object]] = [
        ("decided by", DECIDED_BY.get(by, by)),
        ("rule", rule_text(trace.get("rule"), trace.get("rule_name"))),
        ("action", action_text(trace.get("action"))),
        ("why", trace.get("why") or ""),
        ("actor", verdict_cell(trace.get("actor"))),
    ]
    if "targets" in trace:
        pairs.append(("targets", _targets(trace.get("targets"))))
    return h('<section class="card trace">{kv}</section>', kv=kv(pairs))


def hold_pairs(row: Mapping[str, Any]) -> list[tuple[str, object]]:
    """Why a todo is held (a ``quarantine.held_view`` row): reason, actor, rule, fault, expiry."""
    reason = str(row.get("reason") or "?")
    return [
        ("reason", h("{b} {text}", b=badge(reason, "claimed"), text=HOLD_REASONS.get(reason, ""))),
        ("actor", verdict_cell(row.get("actor"))),
        ("rule", rule_text(row.get("rule"))),
        ("fault", h('<span class="mono">{f}</span>', f=row["fault"]) if row.get("fault") else MUTED_DASH),
        ("expires", when(row.get("expires_at"))),
    ]


# ---------------------------------------------------------------------------------------------
# A rule set's dry run (``intake_config.DryRun``)


def _made(result: Mapping[str, Any]) -> Safe:
    todos = result.get("todos")
    if not isinstance(todos, list) or not todos:
        return muted("none")
    parts = []
    for item in todos:
        t = _map(item)
        note = f" held: {t['held']}" if t.get("held") else (" once" if t.get("once") else "")
        parts.append(
            h("<div>{e} / {q}{note}</div>", e=mono(t.get("endpoint", "?")), q=t.get("queue"), note=note)
        )
    return join(parts)


def dry_run_table(webhook_id: str, results: list[dict[str, Any]]) -> Safe:
    """Per stored delivery, newest first: what it was, what it would become under the rules, by
    which rule or default, the todos, and why (or the fault)."""
    base = f"/ui/webhooks/{path_part(webhook_id)}/deliveries"
    rows = (
        h(
            '<tr class="{cls}"><td><a href="{base}/{u}" class="mono">{id}</a><div>{at}</div></td>'
            "<td>{event}</td><td>{was}</td><td>{now}</td><td>{by}</td><td>{todos}</td>"
            "<td>{why}{fault}</td></tr>",
            cls="fault" if r.get("fault") else "",
            base=base,
            u=path_part(str(r.get("delivery", ""))),
            id=r.get("delivery", ""),
            at=when(r.get("received_at")),
            event=r.get("event") or "",
            was=badge(str(r.get("was") or "?"), DISPOSITION_CLASS.get(str(r.get("was")), "")),
            now=badge(str(r.get("disposition")), DISPOSITION_CLASS.get(str(r.get("disposition")), "")),
            by=h(
                "{by} {rule}",
                by=r.get("by") or "",
                rule=rule_text(r.get("rule"), r.get("rule_name")) if r.get("rule") else EMPTY,
            ),
            todos=_made(r),
            why=r.get("why") or "",
            fault=h('<div class="flag">fault: {f}</div>', f=r["fault"]) if r.get("fault") else EMPTY,
        )
        for r in results
    )
    return table(
        ("Delivery", "Event", "Was", "Would become", "By", "Todos", "Why"),
        rows,
        empty="No stored deliveries to try the rules on yet.",
    )
