"""Connections (``/ui/connections``): the owners' outbound credentials, shown by fingerprint only.

A scope's managers (the human themself; a team's owners and admins) add, test, rotate and delete;
team members see name, kind, account key and fingerprint. The secret is write-only: it is typed
into a password field, never rendered, never kept in a form that comes back with an error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

from aiohttp import web

from switchboard import connections as owner_connections
from switchboard.provider import ConnectionKind
from switchboard.services import Services, services_of
from switchboard.tenancy import Owner
from switchboard.web.confirm import confirm_link, confirm_page
from switchboard.web.forms import changes, list_field, see_other, shows_refusals
from switchboard.web.html import (
    EMPTY,
    MUTED_DASH,
    FormRefusal,
    Safe,
    action_form,
    badge,
    card_form,
    dropdown,
    field,
    h,
    join,
    kept,
    listing_page,
    owner_picker,
    path_part,
    same,
    secret_field,
    section,
    table,
    when,
)
from switchboard.web.session import Scope, Viewer

log = logging.getLogger("switchboard.web")


def last_test_cell(last: Mapping[str, Any] | None) -> Safe:
    if not last:
        return Safe('<span class="muted">never tested</span>')
    if last.get("ok") is True:
        verdict = badge("ok")
    elif last.get("ok") is False:
        verdict = badge(str(last.get("error_class") or "error"), "error")
    else:
        verdict = badge("untested", "pending")
    return h(
        '{verdict} <span class="muted">{detail}</span> {at}',
        verdict=verdict,
        detail=last.get("detail") or "",
        at=when(last.get("tested_at")),
    )


def connection_actions(viewer: Viewer, c: Mapping[str, Any]) -> Safe:
    base = f"/ui/connections/{path_part(str(c['id']))}"
    # Rotate and Delete lead to their confirmation pages (rotate's has the new secret's field).
    return h(
        '<div class="actions">{test}{rotate}{delete}</div>',
        test=action_form(viewer, f"{base}/test", "Test"),
        rotate=confirm_link(f"{base}/rotate", "Rotate", "secondary"),
        delete=confirm_link(f"{base}/delete", "Delete"),
    )


def connection_row(viewer: Viewer, c: Mapping[str, Any]) -> Safe:
    manage = bool(c.get("can_manage"))
    return h(
        '<tr><td>{name}<div class="muted mono">{id}</div></td><td>{kind}</td>'
        '<td class="mono">{account}</td><td class="mono">{fp}</td><td>{limits}</td>'
        "<td>{test}</td><td>{actions}</td></tr>",
        name=c.get("name", ""),
        id=c.get("id", ""),
        kind=c.get("kind", ""),
        account=c.get("account_key", ""),
        fp=c.get("fingerprint", ""),
        limits=h(
            '<div class="nowrap"><span class="muted">targets</span> '
            '<span class="mono">{t}</span></div><div class="nowrap">'
            '<span class="muted">endpoints</span> <span class="mono">{e}</span></div>',
            t=", ".join(c.get("targets") or []) or "any",
            e=", ".join(c.get("endpoints") or []) or "any",
        )
        if manage
        else MUTED_DASH,
        test=last_test_cell(c.get("last_test")) if manage else EMPTY,
        actions=connection_actions(viewer, c) if manage else EMPTY,
    )


def scope_section(viewer: Viewer, scope: Scope, rows: list[dict[str, Any]]) -> Safe:
    return section(
        scope.label,
        EMPTY
        if scope.manage
        else h(
            '<p class="hint">You are a member of {t}: you see its connections; its owners and '
            "admins manage them.</p>",
            t=scope.label,
        ),
        table(
            ("Name", "Kind", "Account", "Fingerprint", "Allowlists", "Last test", ""),
            (connection_row(viewer, c) for c in rows if c.get("owner_id") == scope.owner.id),
            empty="No connections.",
        ),
    )


def account_key_hints(kinds: Mapping[str, ConnectionKind]) -> str:
    """What the account key is for each installed kind, as each kind describes it."""
    return (
        "; ".join(
            f"{name}: {kind.account_key_hint or kind.description or 'see the kind'}"
            for name, kind in sorted(kinds.items())
        )
        + "."
    )


def connection_form(services: Services, viewer: Viewer, form: Mapping[str, str]) -> Safe:
    kinds = services.providers.connections
    if not viewer.managed or not kinds:
        return EMPTY
    warning = (
        EMPTY
        if services.vault.has_key
        else Safe(
            '<div class="flash error">This instance has no SWITCHBOARD_SECRET_ENCRYPTION_KEY, so '
            "connections cannot be stored. The operator must set one (<code>switchboard keygen</code>).</div>"
        )
    )
    fields = join(
        [
            warning,
            owner_picker(viewer, form.get("owner", "me")),
            h(
                '<label for="kind">Kind</label>{d}',
                d=dropdown("kind", same(sorted(kinds)), form.get("kind"), id_="kind"),
            ),
            field(
                "name",
                "Name",
                form.get("name", ""),
                maxlength=100,
                required=True,
                placeholder="e.g. acme-bot",
            ),
            field(
                "account_key",
                "Account key",
                form.get("account_key", ""),
                note=account_key_hints(kinds),
            ),
            secret_field(
                "secret",
                "Secret",
                required=True,
                note="Write-only: it is encrypted at rest and never shown again, anywhere. Pages show a "
                "fingerprint so you can tell secrets apart.",
            ),
            field(
                "targets",
                "Targets (optional)",
                form.get("targets", ""),
                placeholder="acme/*, C0123",
                note="Comma-separated allowlist: repository globs, Slack channel ids or Cairn artifact ids. "
                "Empty allows every target of the account.",
            ),
            field(
                "endpoints",
                "Endpoints (optional)",
                form.get("endpoints", ""),
                note="Comma-separated endpoint slugs of the same owner that may reply with it. Empty allows "
                "all of the owner's endpoints.",
            ),
        ]
    )
    return card_form(viewer, "/ui/connections", fields, "Add connection")


async def connections_page(request: web.Request, viewer: Viewer, refusal: FormRefusal | None) -> web.Response:
    services = services_of(request)
    rows = await owner_connections.connections_for_human(services, viewer.human_id)
    return listing_page(
        request,
        viewer,
        refusal,
        title="Connections",
        intro="A connection is the credential replies are posted with: always the todo owner's, matched by "
        "the reply address's provider and account. Agents never see it.",
        create=connection_form(services, viewer, kept(refusal)),
        create_label="Add a connection",
        sections=[scope_section(viewer, scope, rows) for scope in viewer.scopes],
    )


@shows_refusals(connections_page, create_form=True)
async def connection_create(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    form = viewer.form
    scope = viewer.managed_scope(form.get("owner", "me"))
    created = await owner_connections.create_connection(
        services,
        scope.owner,
        kind=form.get("kind", ""),
        name=form.get("name", ""),
        account_key=form.get("account_key", "").strip() or None,
        secret=form.get("secret", ""),
        targets=list_field(form, "targets"),
        endpoints=list_field(form, "endpoints"),
    )
    log.info("web: %s created connection %s", viewer.handle, created.get("id"))
    raise see_other("/ui/connections", "connection_created")


class Managed(NamedTuple):
    owner: Owner
    connection_id: str


async def managed_connection(request: web.Request, viewer: Viewer) -> Managed:
    """The connection in the URL, if the viewer manages it (another scope's is a 404, a team
    member's read-only view a 403)."""
    connection_id = request.match_info["connection_id"]
    owner = await owner_connections.authorize(
        services_of(request), viewer.human_id, connection_id, manage=True
    )
    return Managed(owner, connection_id)


connection_change = changes(connections_page, "/ui/connections", managed_connection)


async def _described(request: web.Request, viewer: Viewer) -> tuple[Managed, dict[str, Any]]:
    found = await managed_connection(request, viewer)
    return found, await owner_connections.get_connection(
        services_of(request), found.owner, found.connection_id
    )


async def rotate_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The rotation's confirmation is the page with the new secret's field."""
    found, c = await _described(request, viewer)
    return confirm_page(
        viewer,
        question=f"Rotate connection {c.get('name')}?",
        explain=h(
            "<p>Replies through <strong>{name}</strong> ({kind}, {account}) use the new secret from now on; "
            "the current one is forgotten. Test it afterwards.</p>",
            name=c.get("name", ""),
            kind=c.get("kind", ""),
            account=c.get("account_key", ""),
        ),
        action=f"/ui/connections/{path_part(found.connection_id)}/rotate",
        button="Rotate",
        back="/ui/connections",
        active="connections",
        fields=secret_field("secret", "New secret", required=True),
        cls="",
    )


async def delete_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    found, c = await _described(request, viewer)
    return confirm_page(
        viewer,
        question=f"Delete connection {c.get('name')}?",
        explain=h(
            "<p><strong>{name}</strong> ({kind}, {account}) is deleted with its secret. Replies that would "
            "use it are refused until another connection matches. This cannot be undone.</p>",
            name=c.get("name", ""),
            kind=c.get("kind", ""),
            account=c.get("account_key", ""),
        ),
        action=f"/ui/connections/{path_part(found.connection_id)}/delete",
        button="Yes, delete it",
        back="/ui/connections",
        active="connections",
    )


@changes(connections_page, "/ui/connections", managed_connection, confirm=())
async def connection_rotate(request: web.Request, viewer: Viewer, found: Managed) -> str:
    secret = viewer.form.get("secret", "")
    await owner_connections.rotate_connection(services_of(request), found.owner, found.connection_id, secret)
    log.info("web: %s rotated connection %s", viewer.handle, found.connection_id)
    return "connection_rotated"


@changes(connections_page, "/ui/connections", managed_connection, confirm=())
async def connection_delete(request: web.Request, viewer: Viewer, found: Managed) -> str:
    await owner_connections.delete_connection(services_of(request), found.owner, found.connection_id)
    log.info("web: %s deleted connection %s", viewer.handle, found.connection_id)
    return "connection_deleted"


@connection_change
async def connection_test(request: web.Request, viewer: Viewer, found: Managed) -> str:
    verdict = await owner_connections.test_connection(services_of(request), found.owner, found.connection_id)
    return "connection_test_ok" if verdict.get("ok") else "connection_test_failed"
