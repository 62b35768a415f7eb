"""Markup: the escaping rule, the page skeletons and the widgets every page family shares.

The one rule: ``h(template, **values)`` escapes every value unless it is ``Safe``, and only this
package makes ``Safe`` (from literals it wrote, or from values it escaped). Payload-derived text —
todo titles, reply displays, payloads, names — therefore reaches a page only as text. Widgets here
take plain values and escape them the same way; where one takes markup, its type says ``Safe``.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from aiohttp import web

from switchboard.db import rfc3339

if TYPE_CHECKING:
    from switchboard.web.session import Viewer


class Failure(str):
    """A notice that reports something that did not work (a failed connection test): shown as an
    error, not in the green box."""

    __slots__ = ()


# The notice a redirect leaves for the next page (``forms.see_other``), by key. It travels on the
# session's row, not in the URL: a page shows it only after the action happened, and no link can
# make one appear (``session.authed`` stores and takes it).
NOTICES: dict[str, str] = {
    "revoked": "Endpoint revoked. Its token no longer works and its open todos were dead-lettered.",
    "webhook_deleted": "Webhook deleted.",
    "secret_set": "Signing secret saved. The webhook now accepts deliveries.",
    "route_added": "Route added.",
    "route_removed": "Route removed.",
    "team_created": "Team created.",
    "member_saved": "Member saved.",
    "member_removed": "Member removed.",
    "connection_created": "Connection created.",
    "connection_rotated": "Connection secret rotated.",
    "connection_deleted": "Connection deleted.",
    "connection_test_ok": "Connection test passed.",
    "connection_test_failed": Failure("Connection test failed; its row shows the error class and detail."),
    "logged_out": "You are logged out.",
    "session_ended": "Session ended. That browser is logged out.",
    "sessions_ended": "Every other session ended. Only this browser is still logged in.",
    "webhook_saved": "Webhook saved.",
    "webhook_paused": "Webhook paused: deliveries are answered 503 with Retry-After and nothing is stored.",
    "webhook_resumed": "Webhook resumed: deliveries are accepted again.",
    "previous_secret_expired": "The previous signing secret no longer verifies: only the current one does.",
    "no_previous_secret": "There was no previous signing secret still accepted; nothing changed.",
    "team_deleted": "Team deleted.",
    "todo_requeued": "Todo requeued: it is pending again with a fresh attempt budget.",
    "todo_released": "Claim released: the todo is pending again.",
    "todo_cancelled": "Todo cancelled.",
    "delivery_redelivered": "Redelivered: this is the new delivery, with any todos it minted.",
    "test_delivery_sent": "Test delivery sent through ingest: this is how it was decided.",
    "todos_requeued": "The matching todos were requeued: they are pending again. Any still listed were "
    "left alone (another scope's, a revoked endpoint's, or past the limit of one go).",
    "trust_saved": "Trusted actors saved: they apply from the next delivery.",
    "rules_saved": "Routing rules saved: they passed every check and the dry run, and apply from the next "
    "delivery.",
    "quarantine_released": "Released: routing ran again and made its todos. The held todo's history names "
    "them.",
    "quarantine_trust_released": "Actor trusted and released: routing ran again and made its todos; their "
    "later deliveries become work directly.",
    "quarantine_released_queue": "Released to the queue: one pending todo was made there.",
    "quarantine_released_none": "Released, but routing made no todo (an open todo about the same subject, "
    "or only the sender's own endpoint): the held todo's history says why.",
    "quarantine_dropped": "Released, but the webhook's rules dropped it: no todo was made.",
    "quarantine_held_again": Failure(
        "Routing held it again (a rule sends it to quarantine, or faulted): it is still in the list."
    ),
    "quarantine_discarded": "Discarded. Its history keeps your reason.",
}

NAV = (
    ("board", "/ui", "Board"),
    ("endpoints", "/ui/endpoints", "Endpoints"),
    ("webhooks", "/ui/webhooks", "Webhooks"),
    ("quarantine", "/ui/quarantine", "Quarantine"),
    ("connections", "/ui/connections", "Connections"),
    ("teams", "/ui/teams", "Teams"),
)


# ---------------------------------------------------------------------------------------------
# Escaping


class Safe(str):
    """Markup written by this package (or already escaped): interpolated as is."""

    __slots__ = ()


EMPTY = Safe("")
MUTED_DASH = Safe('<span class="muted">—</span>')


def _visible(codepoint: int) -> str:
    return f"\\u{codepoint:04x}"


# Characters that would change how the text around them is shown, not what it says: the bidi
# embeddings, overrides, isolates and marks (a U+202E in a sender's title would show it reversed),
# and control characters. Each becomes its visible escape (``\u202e``), as the CLI shows it, in
# text and attributes alike, so what a page shows is the text in its logical order.
NEUTRALISED = {
    c: _visible(c)
    for c in (
        *range(0x00, 0x09),
        0x0B,
        0x0C,
        *range(0x0E, 0x20),
        *range(0x7F, 0xA0),
        0x061C,
        0x200E,
        0x200F,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
    )
}


def esc(value: object) -> Safe:
    if isinstance(value, Safe):
        return value
    if value is None:
        return EMPTY
    return Safe(html.escape(str(value).translate(NEUTRALISED), quote=True))


def h(template: str, **values: object) -> Safe:
    """Fill ``{name}`` slots of a trusted template with escaped values."""
    return Safe(template.format_map({k: esc(v) for k, v in values.items()}))


def join(parts: Iterable[object]) -> Safe:
    return Safe("".join(esc(p) for p in parts))


def flag(on: bool, name: str) -> Safe:
    """A boolean attribute (`` checked``, `` selected``, `` open``) when ``on``."""
    return h(" {name}", name=name) if on else EMPTY


def path_part(value: str) -> str:
    """A value placed in a URL path segment (an id or slug from the database)."""
    return quote(value, safe="")


# ---------------------------------------------------------------------------------------------
# Small pieces of text


def when(value: datetime | str | None) -> Safe:
    """A time as every page shows it: to the second, labelled UTC (the machine form in the tag)."""
    text = rfc3339(value) if isinstance(value, datetime) else value
    if not text:
        return MUTED_DASH
    return h('<time datetime="{t}">{short} UTC</time>', t=text, short=str(text).replace("T", " ")[:19])


def badge(text: str, cls: str | None = None) -> Safe:
    return h('<span class="badge {cls}">{text}</span>', cls=cls or text, text=text)


def mono(value: object) -> Safe:
    return h('<span class="mono">{v}</span>', v=value)


def muted(text: str) -> Safe:
    return h('<span class="muted">{t}</span>', t=text)


def link_if_web(url: object, label: str = "permalink") -> Safe:
    """A link only for http(s) URLs: a provider-supplied ``javascript:`` URL stays inert text."""
    if not isinstance(url, str) or not url:
        return EMPTY
    try:
        scheme = urlsplit(url).scheme
    except ValueError:
        scheme = ""
    if scheme not in ("http", "https"):
        return mono(url)
    return h('<a href="{u}" rel="noopener noreferrer">{label}</a>', u=url, label=label)


def kv(pairs: Iterable[tuple[str, object]]) -> Safe:
    return h(
        '<dl class="kv">{items}</dl>',
        items=join(h("<dt>{k}</dt><dd>{v}</dd>", k=k, v=v) for k, v in pairs),
    )


# ---------------------------------------------------------------------------------------------
# Tables and form controls


def table(headers: Sequence[str], rows: Iterable[Safe], *, empty: str | None = None) -> Safe:
    """A table; with no rows and an ``empty`` text, one muted row saying so."""
    body = join(rows)
    if not body and empty is not None:
        body = h('<tr><td colspan="{n}" class="muted">{m}</td></tr>', n=len(headers), m=empty)
    # The box scrolls sideways on a narrow screen; the page itself never does.
    return h(
        '<div class="scroll"><table><thead><tr>{heads}</tr></thead><tbody>{body}</tbody></table></div>',
        heads=join(h("<th>{t}</th>", t=t) for t in headers),
        body=body,
    )


def section(heading: str, *parts: Safe) -> Safe:
    """One owner scope's (or team's) part of a page: a heading and what follows it."""
    return h("<h2>{heading}</h2>{parts}", heading=heading, parts=join(parts))


def options(choices: Iterable[tuple[str, str]], selected: str | None) -> Safe:
    """``<option>`` tags from ``(value, label)`` pairs, the one equal to ``selected`` selected."""
    return join(
        h('<option value="{v}"{sel}>{label}</option>', v=v, label=label, sel=flag(v == selected, "selected"))
        for v, label in choices
    )


def same(values: Iterable[str]) -> list[tuple[str, str]]:
    """Choices whose label is their value."""
    return [(v, v) for v in values]


def dropdown(
    name: str,
    choices: Iterable[tuple[str, str]],
    selected: str | None = None,
    *,
    id_: str | None = None,
    any_label: str | None = None,
    aria_label: str | None = None,
) -> Safe:
    """A ``<select>``; ``any_label`` adds a leading empty choice (a filter's "any")."""
    return h(
        '<select{id} name="{name}"{aria}>{blank}{options}</select>',
        id=h(' id="{i}"', i=id_) if id_ else EMPTY,
        name=name,
        aria=h(' aria-label="{a}"', a=aria_label) if aria_label else EMPTY,
        blank=h('<option value="">{a}</option>', a=any_label) if any_label is not None else EMPTY,
        options=options(choices, selected),
    )


def owner_picker(viewer: Viewer, selected: str) -> Safe:
    """A create form's owner: one of the scopes the viewer manages (themself, or a team they own
    or administer). The handler checks the choice again with ``Viewer.managed_scope``."""
    return h(
        '<label for="owner">Owner</label>{d}',
        d=dropdown("owner", [(s.key, s.label) for s in viewer.managed], selected, id_="owner"),
    )


def _attrs(attrs: Mapping[str, object]) -> Safe:
    """Escaped attributes; ``True`` is a bare attribute, ``False``/``None`` none at all."""
    return join(
        flag(True, k) if v is True else h(' {k}="{v}"', k=k, v=v)
        for k, v in attrs.items()
        if v is not None and v is not False
    )


def hint(text: str | Safe) -> Safe:
    return h('<p class="hint">{t}</p>', t=text)


def _labelled_input(
    name: str, label: str, type_: str, note: str | Safe | None, attrs: Mapping[str, object]
) -> Safe:
    return h(
        '<label for="{n}">{label}</label><input{attrs}>{note}',
        n=name,
        label=label,
        attrs=_attrs({"type": type_, "id": name, "name": name, **attrs}),
        note=hint(note) if note else EMPTY,
    )


def field(
    name: str,
    label: str,
    value: object = "",
    *,
    type_: str = "text",
    note: str | Safe | None = None,
    **attrs: str | int | bool | None,
) -> Safe:
    """A labelled input that shows ``value`` (a refused form comes back filled in)."""
    if type_ == "password":
        raise TypeError("a password input shows no value: use secret_field()")
    return _labelled_input(name, label, type_, note, {**attrs, "value": str(value)})


def secret_field(name: str, label: str, *, note: str | Safe | None = None, **attrs: str | bool) -> Safe:
    """A labelled password input. It takes no value: a secret is never written into a page."""
    if "value" in attrs:
        raise TypeError("secret_field() takes no value: a secret is never written into a page")
    return _labelled_input(name, label, "password", note, {"autocomplete": "off", **attrs})


def checkbox(name: str, label: Safe, checked: bool) -> Safe:
    return h(
        '<label class="check"><input type="checkbox" name="{n}" value="on"{c}> <span>{label}</span></label>',
        n=name,
        c=flag(checked, "checked"),
        label=label,
    )


def csrf_field(viewer: Viewer) -> Safe:
    return h('<input type="hidden" name="csrf" value="{t}">', t=viewer.csrf)


def post_form(viewer: Viewer, action: str, cls: str, content: Safe) -> Safe:
    """Every POST form carries the session's CSRF token: build them all here."""
    return h(
        '<form method="post" action="{a}" class="{cls}">{csrf}{content}</form>',
        a=action,
        cls=cls,
        csrf=csrf_field(viewer),
        content=content,
    )


def card_form(viewer: Viewer, action: str, content: Safe, submit: str, *, after: Safe = EMPTY) -> Safe:
    """A page's create form: a card with its fields and one submit button."""
    button = h('<p><button type="submit">{s}</button></p>', s=submit)
    return post_form(viewer, action, "card", join([content, button, after]))


def action_form(
    viewer: Viewer,
    action: str,
    label: str,
    *,
    cls: str = "secondary",
    fields: Safe = EMPTY,
) -> Safe:
    """A one-button inline POST form (revoke, rotate, test, delete, …), with any ``fields``."""
    button = h('<button type="submit" class="{cls}">{label}</button>', cls=cls, label=label)
    return post_form(viewer, action, "inline", join([fields, button]))


def hidden(name: str, value: str) -> Safe:
    return h('<input type="hidden" name="{n}" value="{v}">', n=name, v=value)


def collapsible(summary: str, content: Safe, open_: bool) -> Safe:
    """A create form folded away under the page's lists (no script: <details> does it); open when
    it comes back with an error so the message and the kept values are in view."""
    return h(
        '<details class="create"{open}><summary>{summary}</summary>{content}</details>',
        open=flag(open_, "open"),
        summary=summary,
        content=content,
    )


# ---------------------------------------------------------------------------------------------
# Page skeletons


@dataclass(frozen=True)
class FormRefusal:
    """Why a POST changed nothing, for its page to show: the message, the status, and the create
    form's fields to fill in again (``None`` when the refused form was not the create form)."""

    message: str
    status: int
    form: Mapping[str, str] | None = None


def kept(refusal: FormRefusal | None) -> Mapping[str, str]:
    """The values a create form shows: what came back with a refusal, else nothing (defaults)."""
    return refusal.form if refusal is not None and refusal.form is not None else {}


def layout(title: str, body: Safe, viewer: Viewer | None, *, active: str = "", flash: Safe = EMPTY) -> Safe:
    if viewer is not None:
        links = join(
            h(
                '<a href="{href}" class="{cls}">{label}</a>',
                href=href,
                label=label,
                cls="active" if key == active else "",
            )
            for key, href, label in NAV
        )
        nav = h(
            '<header class="top"><span class="brand">Switchboard</span>{links}'
            '<span class="who"><a href="/ui/account" title="Your account and sessions">{handle}</a>'
            '<form method="post" action="/ui/logout">{csrf}'
            '<button type="submit">Log out</button></form></span></header>',
            links=links,
            handle=viewer.handle,
            csrf=csrf_field(viewer),
        )
    else:
        nav = Safe('<header class="top"><span class="brand">Switchboard</span></header>')
    return h(
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<title>{title} · Switchboard</title><link rel="stylesheet" href="/ui/static/app.css">'
        "</head><body>{nav}<main>{flash}{body}</main></body></html>\n",
        title=title,
        nav=nav,
        flash=flash,
        body=body,
    )


def flash_of(error: str | None = None, notice: str | None = None) -> Safe:
    if error or isinstance(notice, Failure):
        return h('<div class="flash error" role="alert">{m}</div>', m=error or notice)
    if notice:
        return h('<div class="flash notice" role="status">{m}</div>', m=notice)
    return EMPTY


def page(
    title: str,
    body: Safe,
    viewer: Viewer | None,
    *,
    active: str = "",
    status: int = 200,
    error: str | None = None,
    notice: str | None = None,
) -> web.Response:
    return web.Response(
        text=layout(title, body, viewer, active=active, flash=flash_of(error, notice)),
        status=status,
        content_type="text/html",
        charset="utf-8",
    )


# The notice ``session.authed`` took off the session's row for the request being handled (set and
# reset around each handler, so a kept-alive connection's next request does not inherit it).
TAKEN_NOTICE: ContextVar[str | None] = ContextVar("switchboard_web_notice", default=None)


def notice_of(request: web.Request) -> str | None:
    """The notice the last action left for this page, if any (taken once: a reload shows none)."""
    return NOTICES.get(TAKEN_NOTICE.get() or "")


def error_page(viewer: Viewer | None, status: int, message: str, title: str = "Error") -> web.Response:
    body = h(
        '<h1>{title}</h1><p>{message}</p><p><a href="/ui">Back to the board</a></p>',
        title=title,
        message=message,
    )
    return page(title, body, viewer, status=status)


def listing_page(
    request: web.Request,
    viewer: Viewer,
    refusal: FormRefusal | None,
    *,
    title: str,
    intro: str,
    sections: Iterable[Safe],
    create: Safe = EMPTY,
    create_label: str | None = None,
) -> web.Response:
    """The page of one family (endpoints, webhooks, connections, teams): heading, intro, the create
    form (folded under ``create_label`` unless a refused create form comes back), the sections, and
    either the refusal or the ``?done=`` notice in the flash."""
    if create and create_label is not None:
        create = collapsible(create_label, create, refusal is not None and refusal.form is not None)
    body = h(
        '<h1>{title}</h1><p class="hint">{intro}</p>{create}{sections}',
        title=title,
        intro=intro,
        create=create,
        sections=join(sections),
    )
    return page(
        title,
        body,
        viewer,
        active=title.lower(),
        status=refusal.status if refusal else 200,
        error=refusal.message if refusal else None,
        notice=notice_of(request),
    )


def reveal_page(
    viewer: Viewer,
    *,
    title: str,
    heading: str,
    active: str,
    lead: str,
    detail: str,
    content: Safe,
    facts: Iterable[tuple[str, object]],
) -> web.Response:
    """The one page that shows a new secret (token, ingest URL, signing secret): the GET a POST
    redirected to, shown once (``once``), never cached (the security headers say ``no-store``), and
    nothing links back to it. ``lead`` is the bold "copy this now" sentence, ``detail`` what
    Switchboard keeps instead."""
    body = h(
        '<h1>{heading}</h1><section class="reveal"><p><strong>{lead}</strong>; {rest}</p>{content}</section>'
        '<section class="card">{facts}</section><p><a href="/ui/{active}">Back to {active}</a></p>',
        heading=heading,
        lead=lead,
        rest=detail,
        content=content,
        facts=kv(facts),
        active=active,
    )
    return page(title, body, viewer, active=active)
