"""The web UI: server-rendered pages under ``/ui`` on the one aiohttp app.

Where things are:

* this module — ``setup(app)``: the route table, the security headers on every ``/ui`` response,
  the stylesheet, the HTML 404 (expired sessions are purged by ``app.background_jobs``);
* ``html`` — the escaping rule (``h``/``Safe``), widgets and page skeletons;
* ``session`` — login, the session cookie, CSRF, ``Viewer`` and ``authed``;
* ``forms`` — reading forms, and ``shows_refusals``: how a refused POST comes back;
* ``once`` — what a page shows once: a new secret (reveal) and the notice an action leaves (flash);
* ``confirm`` — the confirmation page every destructive action has (no JavaScript needed);
* one module per page family: ``board`` (and ``todo_page``: one todo, its actions and raw
  payload), ``endpoints``, ``webhooks`` (and ``webhook_actions``; ``webhook_intake``: one webhook's
  page with its trusted actors and routing rules), ``quarantine`` (held todos and what a person
  decides), ``connections``, ``teams``, ``account`` (your token and web sessions);
* ``intake_views`` and ``trust_form``: how routing traces, actor verdicts and dry runs read, and the
  trusted-actors fields.

Every handler but login is wrapped by ``authed`` here, in the route table, so no page can forget
its session or CSRF check. Pages are built by ``h()``, which HTML-escapes every interpolated value
unless it is ``Safe`` markup this package wrote, so payload-derived text (todo titles, reply
displays) cannot become markup; a strict CSP (no scripts at all, styles from ``'self'``) backs
that up.

Every POST that works answers 303. Secrets: an endpoint token, a webhook's ingest URL and minted
signing secret are rendered exactly once, on the page the POST that made them redirects to (sealed
on the session meanwhile, ``Cache-Control: no-store``): a reload shows nothing and repeats nothing.
Connection secrets are never rendered: only fingerprints. Secret form fields are never refilled
when a form comes back with an error.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from switchboard.db import is_unavailable
from switchboard.web import (
    account,
    board,
    connections,
    deliveries,
    endpoints,
    quarantine,
    routes,
    session,
    teams,
    todo_page,
    webhook_actions,
    webhook_intake,
    webhooks,
)
from switchboard.web.forms import page_view
from switchboard.web.html import error_page
from switchboard.web.session import authed, load_viewer

STYLESHEET = Path(__file__).parent / "static" / "app.css"
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


def is_ui_path(path: str) -> bool:
    return path == "/" or path == "/ui" or path.startswith("/ui/")


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every UI response, including errors raised by aiohttp itself."""
    if not is_ui_path(request.path):
        return
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Cross-Origin-Opener-Policy"] = "same-origin"
    # Pages carry private data and one-time secrets: never cached. The stylesheet sets its own.
    response.headers.setdefault("Cache-Control", "no-store")


async def root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui")


async def stylesheet(request: web.Request) -> web.StreamResponse:
    return web.Response(
        body=STYLESHEET.read_bytes(),
        content_type="text/css",
        charset="utf-8",
        headers={"Cache-Control": "public, max-age=3600"},
    )


async def not_found_page(request: web.Request) -> web.StreamResponse:
    try:
        viewer = await load_viewer(request)
    except Exception as exc:
        # With the database away the 404 page still answers, without the viewer's navigation.
        if not is_unavailable(exc):
            raise
        viewer = None
    return error_page(viewer, 404, "There is no such page.", "Not found")


def setup(app: web.Application) -> None:
    """Add the UI routes and the security headers to the app."""
    app.on_response_prepare.append(security_headers)
    r = app.router
    r.add_get("/", root)
    r.add_get("/ui/static/app.css", stylesheet)
    r.add_get("/ui/login", session.login_form)
    r.add_post("/ui/login", session.login)
    for method, path, handler in (
        ("POST", "/ui/logout", session.logout),
        ("GET", "/ui/account", account.account_view),
        ("POST", "/ui/account/rotate", account.rotate),
        ("GET", "/ui/account/token", account.reveal),
        ("GET", "/ui/account/sessions/end-others", account.end_others_confirm),
        ("POST", "/ui/account/sessions/end-others", account.end_other_sessions),
        ("GET", "/ui/account/sessions/{ref}/end", account.end_session_confirm),
        ("POST", "/ui/account/sessions/{ref}/end", account.end_session),
        ("GET", "/ui", board.board),
        ("GET", "/ui/todos/requeue", board.bulk_confirm),
        ("POST", "/ui/todos/requeue", board.bulk_requeue),
        ("GET", "/ui/todos/{todo_id}", todo_page.todo_detail),
        ("GET", "/ui/todos/{todo_id}/payload", todo_page.raw_payload),
        ("POST", "/ui/todos/{todo_id}/requeue", todo_page.requeue),
        ("POST", "/ui/todos/{todo_id}/release", todo_page.release),
        ("GET", "/ui/todos/{todo_id}/cancel", todo_page.cancel_confirm),
        ("POST", "/ui/todos/{todo_id}/cancel", todo_page.cancel),
        ("GET", "/ui/endpoints", page_view(endpoints.endpoints_page)),
        ("POST", "/ui/endpoints", endpoints.vend),
        ("GET", "/ui/endpoints/token", endpoints.reveal),
        ("GET", "/ui/endpoints/{slug}/revoke", endpoints.revoke_confirm),
        ("POST", "/ui/endpoints/{slug}/revoke", endpoints.revoke),
        ("GET", "/ui/webhooks", page_view(webhooks.webhooks_page)),
        ("POST", "/ui/webhooks", webhooks.webhook_create),
        ("GET", "/ui/webhooks/new", webhooks.reveal),
        ("GET", "/ui/webhooks/{webhook_id}/rotate", webhook_actions.rotate_confirm),
        ("POST", "/ui/webhooks/{webhook_id}/rotate", webhook_actions.webhook_rotate),
        ("GET", "/ui/webhooks/{webhook_id}/secret", webhook_actions.secret_confirm),
        ("POST", "/ui/webhooks/{webhook_id}/secret", webhook_actions.webhook_set_secret),
        ("GET", "/ui/webhooks/{webhook_id}/expire-previous", webhook_actions.expire_confirm),
        ("POST", "/ui/webhooks/{webhook_id}/expire-previous", webhook_actions.webhook_expire_previous),
        ("GET", "/ui/webhooks/{webhook_id}/edit", webhook_actions.edit_page),
        ("POST", "/ui/webhooks/{webhook_id}/edit", webhook_actions.webhook_edit),
        ("POST", "/ui/webhooks/{webhook_id}/pause", webhook_actions.webhook_pause),
        ("POST", "/ui/webhooks/{webhook_id}/resume", webhook_actions.webhook_resume),
        ("GET", "/ui/webhooks/{webhook_id}/deliveries", deliveries.log_page),
        ("GET", "/ui/webhooks/{webhook_id}/deliveries/{delivery_id}", deliveries.detail_page),
        ("GET", "/ui/webhooks/{webhook_id}/deliveries/{delivery_id}/body", deliveries.raw_body),
        ("GET", "/ui/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver", deliveries.redeliver_confirm),
        ("POST", "/ui/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver", deliveries.redeliver),
        ("POST", "/ui/webhooks/{webhook_id}/test", deliveries.send_test),
        ("GET", "/ui/webhooks/{webhook_id}/delete", webhook_actions.delete_confirm),
        ("POST", "/ui/webhooks/{webhook_id}/delete", webhook_actions.webhook_delete),
        # After /ui/webhooks/new, which the router matches first.
        ("GET", "/ui/webhooks/{webhook_id}", webhook_intake.webhook_page),
        ("POST", "/ui/webhooks/{webhook_id}/trust", webhook_intake.trust_save),
        ("POST", "/ui/webhooks/{webhook_id}/rules", webhook_intake.rules_post),
        ("POST", "/ui/webhooks/{webhook_id}/routes", webhook_actions.route_add),
        ("GET", "/ui/webhooks/{webhook_id}/routes/remove", webhook_actions.route_remove_confirm),
        ("POST", "/ui/webhooks/{webhook_id}/routes/remove", webhook_actions.route_remove),
        ("GET", "/ui/quarantine", quarantine.quarantine_view),
        ("POST", "/ui/quarantine/{todo_id}/release", quarantine.release),
        ("GET", "/ui/quarantine/{todo_id}/discard", quarantine.discard_confirm),
        ("POST", "/ui/quarantine/{todo_id}/discard", quarantine.discard),
        ("GET", "/ui/routes/{route_id}/remove", routes.withdraw_confirm),
        ("POST", "/ui/routes/{route_id}/remove", routes.withdraw),
        ("GET", "/ui/connections", page_view(connections.connections_page)),
        ("POST", "/ui/connections", connections.connection_create),
        ("GET", "/ui/connections/{connection_id}/rotate", connections.rotate_confirm),
        ("POST", "/ui/connections/{connection_id}/rotate", connections.connection_rotate),
        ("GET", "/ui/connections/{connection_id}/delete", connections.delete_confirm),
        ("POST", "/ui/connections/{connection_id}/delete", connections.connection_delete),
        ("POST", "/ui/connections/{connection_id}/test", connections.connection_test),
        ("GET", "/ui/teams", page_view(teams.teams_page)),
        ("POST", "/ui/teams", teams.team_create),
        ("POST", "/ui/teams/{slug}/members", teams.member_set),
        ("GET", "/ui/teams/{slug}/members/remove", teams.member_remove_confirm),
        ("POST", "/ui/teams/{slug}/members/remove", teams.member_remove),
        ("GET", "/ui/teams/{slug}/delete", teams.team_delete_confirm),
        ("POST", "/ui/teams/{slug}/delete", teams.team_delete),
    ):
        add = r.add_get if method == "GET" else r.add_post  # add_get answers HEAD too
        add(path, authed(handler))
    # Last: every other /ui path is an HTML 404 (with the security headers), not aiohttp's text page.
    r.add_route("*", "/ui/{tail:.*}", not_found_page)
