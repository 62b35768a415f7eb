"""The web UI: server-rendered pages under ``/ui`` on the one aiohttp app.

Login takes a human's ``sbo_`` token once and trades it for a session cookie (only the cookie's
hash is stored, in ``web_sessions``). Every form carries the session's CSRF token and every POST is
refused (403, nothing changed) without it. Pages are built by ``h()``, which HTML-escapes every
interpolated value unless it is ``Safe`` markup we wrote, so payload-derived text (todo titles,
reply displays) cannot become markup. A strict CSP (no scripts at all, styles from ``'self'``)
backs that up.

Secrets: an endpoint token, a webhook's ingest URL and minted signing secret are rendered exactly
once, on the response to the POST that created them (``Cache-Control: no-store``); they are not
stored in a form we could show again. Connection secrets are never rendered: only fingerprints.
Secret form fields are never refilled when a form comes back with an error.
"""

from __future__ import annotations

import hmac
import html
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from sqlalchemy import delete, select
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard import connections, tenancy
from switchboard.app import Services, periodic, services_of
from switchboard.db import DatabaseUnavailable, utcnow
from switchboard.errors import SwitchboardError, invalid, not_found
from switchboard.ids import new_token, token_hash
from switchboard.models import Attempt, Endpoint, Human, Membership, Team, Todo, Webhook, WebSession
from switchboard.reply import replies_of
from switchboard.tenancy import Owner, scope_filter
from switchboard.todos import BOARD_STATES, payload_of, replies_summary, rfc3339, scoped_rows

log = logging.getLogger("switchboard.web")

SESSION_TTL = timedelta(hours=12)
LOGIN_COOKIE = "sb_login"
STATIC_DIR = Path(__file__).parent / "web_templates"
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
BOARD_LIMIT_DEFAULT = 100
BOARD_LIMIT_MAX = 500
PAYLOAD_SHOWN_MAX = 64 * 1024
FIELD_MAX = 16 * 1024

# Fixed notices for ``?done=…`` after a redirect: the URL never carries user text into the page.
NOTICES = {
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
    "connection_test_failed": "Connection test failed; its row shows the error class.",
    "logged_out": "You are logged out.",
}


# ---------------------------------------------------------------------------------------------
# HTML building: everything interpolated is escaped unless it is Safe markup we built.


class Safe(str):
    """Markup written by this module (or already escaped): interpolated as is."""

    __slots__ = ()


EMPTY = Safe("")


def esc(value: object) -> Safe:
    if isinstance(value, Safe):
        return value
    if value is None:
        return Safe("")
    return Safe(html.escape(str(value), quote=True))


def h(template: str, **values: object) -> Safe:
    """Fill ``{name}`` slots of a trusted template with escaped values."""
    return Safe(template.format_map({k: esc(v) for k, v in values.items()}))


def join(parts: Iterable[object]) -> Safe:
    return Safe("".join(esc(p) for p in parts))


def when(value: datetime | str | None) -> Safe:
    text = rfc3339(value) if isinstance(value, datetime) else value
    if not text:
        return Safe('<span class="muted">—</span>')
    return h('<time datetime="{t}">{short}</time>', t=text, short=str(text).replace("T", " ")[:19])


def badge(text: str, cls: str | None = None) -> Safe:
    return h('<span class="badge {cls}">{text}</span>', cls=cls or text, text=text)


def link_if_web(url: object, label: str = "permalink") -> Safe:
    """A link only for http(s) URLs: a provider-supplied ``javascript:`` URL stays inert text."""
    if not isinstance(url, str) or not url:
        return Safe("")
    try:
        scheme = urlsplit(url).scheme
    except ValueError:
        scheme = ""
    if scheme not in ("http", "https"):
        return h('<span class="mono">{u}</span>', u=url)
    return h('<a href="{u}" rel="noopener noreferrer">{label}</a>', u=url, label=label)


def path_part(value: str) -> str:
    return quote(value, safe="")


# ---------------------------------------------------------------------------------------------
# Sessions and the viewer


@dataclass(frozen=True)
class Scope:
    """An owner scope the viewer can see: their own, or one of their teams."""

    owner: Owner
    key: str  # form value: "me" or "team:<slug>"
    label: str
    role: str
    manage: bool


@dataclass
class Viewer:
    human_id: str
    handle: str
    session_hash: str
    csrf: str
    scopes: list[Scope] = field(default_factory=list)
    form: dict[str, str] = field(default_factory=dict)

    @property
    def team_ids(self) -> list[str]:
        return [s.owner.team_id for s in self.scopes if s.owner.team_id]

    def scope_of(self, owner: Owner) -> Scope | None:
        return next((s for s in self.scopes if s.owner == owner), None)

    def scope_by_key(self, key: str) -> Scope | None:
        return next((s for s in self.scopes if s.key == key), None)

    @property
    def managed(self) -> list[Scope]:
        return [s for s in self.scopes if s.manage]

    def sees(self) -> Any:
        """SQL filter: endpoints in a scope the viewer can see."""
        return scope_filter([scope.owner for scope in self.scopes])


def _secure(services: Services) -> bool:
    return services.settings.base_url.startswith("https://")


def session_cookie_name(services: Services) -> str:
    # The __Host- prefix makes the browser refuse the cookie unless Secure, host-only, path=/.
    return "__Host-sb_session" if _secure(services) else "sb_session"


async def _scopes(s: AsyncSession, human: Human) -> list[Scope]:
    scopes = [Scope(Owner(human_id=human.id), "me", f"you ({human.handle})", "owner", True)]
    rows = await s.execute(
        select(Team.id, Team.slug, Membership.role)
        .join(Membership, Membership.team_id == Team.id)
        .where(Membership.human_id == human.id)
        .order_by(Team.slug)
    )
    for team_id, slug, role in rows:
        scopes.append(Scope(Owner(team_id=team_id), f"team:{slug}", f"team {slug}", role, role != "member"))
    return scopes


async def load_viewer(request: web.Request) -> Viewer | None:
    services = services_of(request)
    raw = request.cookies.get(session_cookie_name(services))
    if not raw or len(raw) > 200:
        return None
    async with services.db.read() as s:
        row = (
            await s.execute(
                select(WebSession, Human)
                .join(Human, Human.id == WebSession.human_id)
                .where(WebSession.id_hash == token_hash(raw))
            )
        ).first()
        if row is None:
            return None
        session, human = row
        if session.expires_at <= utcnow():
            return None
        return Viewer(human.id, human.handle, session.id_hash, session.csrf_token, await _scopes(s, human))


async def purge_expired_sessions(services: Services) -> None:
    async with services.db.write() as s:
        await s.execute(delete(WebSession).where(WebSession.expires_at <= utcnow()))


# ---------------------------------------------------------------------------------------------
# Responses


def layout(title: str, body: Safe, viewer: Viewer | None, *, active: str = "", flash: Safe = EMPTY) -> Safe:
    nav = Safe("")
    if viewer is not None:
        links = join(
            h(
                '<a href="{href}" class="{cls}">{label}</a>',
                href=href,
                label=label,
                cls="active" if key == active else "",
            )
            for key, href, label in (
                ("board", "/ui", "Board"),
                ("endpoints", "/ui/endpoints", "Endpoints"),
                ("webhooks", "/ui/webhooks", "Webhooks"),
                ("connections", "/ui/connections", "Connections"),
                ("teams", "/ui/teams", "Teams"),
            )
        )
        nav = h(
            '<header class="top"><span class="brand">Switchboard</span>{links}'
            '<span class="who">{handle}<form method="post" action="/ui/logout">{csrf}'
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
    if error:
        return h('<div class="flash error" role="alert">{m}</div>', m=error)
    if notice:
        return h('<div class="flash notice" role="status">{m}</div>', m=notice)
    return Safe("")


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


def error_page(viewer: Viewer | None, status: int, message: str, title: str = "Error") -> web.Response:
    body = h(
        '<h1>{title}</h1><p>{message}</p><p><a href="/ui">Back to the board</a></p>',
        title=title,
        message=message,
    )
    return page(title, body, viewer, status=status)


def collapsible(summary: str, content: Safe, open_: bool) -> Safe:
    """A create form folded away under the page's lists (no script: <details> does it); open when
    it comes back with an error so the message and the kept values are in view."""
    return h(
        '<details class="create"{open}><summary>{summary}</summary>{content}</details>',
        open=Safe(" open") if open_ else EMPTY,
        summary=summary,
        content=content,
    )


def csrf_field(viewer: Viewer) -> Safe:
    return h('<input type="hidden" name="csrf" value="{t}">', t=viewer.csrf)


def see_other(location: str, done: str | None = None) -> web.HTTPSeeOther:
    if done:
        location += ("&" if "?" in location else "?") + urlencode({"done": done})
    return web.HTTPSeeOther(location)


def notice_of(request: web.Request) -> str | None:
    return NOTICES.get(request.query.get("done", ""))


async def read_form(request: web.Request) -> dict[str, str]:
    """The posted fields (first value of each, text only); a body that is not a form is empty."""
    try:
        data = await request.post()
    except web.HTTPRequestEntityTooLarge:
        raise SwitchboardError("payload_too_large", "the form is larger than the server accepts") from None
    except (ValueError, UnicodeDecodeError, HttpProcessingError):
        # A malformed urlencoded or multipart body (bad boundary, broken part headers, …).
        raise invalid("the form could not be read") from None
    out: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, str) and key not in out:
            if len(value) > FIELD_MAX:
                raise invalid(f"field {key!r} is longer than {FIELD_MAX} characters")
            out[key] = check_text(value, key)
    return out


def check_text(value: str, what: str) -> str:
    """Refuse NUL characters up front: PostgreSQL cannot store or compare them, and no name,
    slug, id or secret we accept contains one."""
    if "\x00" in value:
        raise invalid(f"{what} contains a NUL character")
    return value


def check_request_text(request: web.Request) -> None:
    for key, value in [*request.match_info.items(), *request.query.items()]:
        check_text(value, key)


Handler = Callable[[web.Request, Viewer], Awaitable[web.StreamResponse]]


def authed(fn: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Require a live session; on POST also a form with the session's CSRF token.

    SwitchboardErrors a handler did not turn into a page of its own become an error page with the
    mapped status; anything unexpected is logged and answered with a plain page, never a traceback.
    """

    async def wrapper(request: web.Request) -> web.StreamResponse:
        viewer: Viewer | None = None
        try:
            check_request_text(request)
            viewer = await load_viewer(request)
            if viewer is None:
                if request.method in ("GET", "HEAD"):
                    raise web.HTTPSeeOther("/ui/login")
                return error_page(None, 401, "Your session has ended. Log in again.", "Logged out")
            if request.method == "POST":
                viewer.form = await read_form(request)
                if not hmac.compare_digest(viewer.form.get("csrf", "").encode(), viewer.csrf.encode()):
                    return error_page(
                        viewer,
                        403,
                        "This form is missing its security token or it is stale. Reload the page and "
                        "try again; nothing was changed.",
                        "Request refused",
                    )
            return await fn(request, viewer)
        except web.HTTPException:
            raise
        except SwitchboardError as exc:
            return error_page(viewer, exc.http_status, exc.message, _title_of(exc.code))
        except IntegrityError:
            # tenancy and connections map the constraints they know; this is a concurrent change.
            log.warning("web UI: integrity conflict on %s %s", request.method, request.path)
            return error_page(
                viewer, 409, "That changed at the same time elsewhere. Reload and retry.", "Conflict"
            )
        except (DatabaseUnavailable, OperationalError, DBAPIError, OSError):
            log.exception("web UI: database unavailable on %s %s", request.method, request.path)
            return error_page(viewer, 503, "The database is unavailable. Try again shortly.", "Unavailable")
        except Exception:
            log.exception("web UI: unhandled error on %s %s", request.method, request.path)
            return error_page(viewer, 500, "Something went wrong on our side; it has been logged.", "Error")

    wrapper.__name__ = fn.__name__
    return wrapper


def _title_of(code: str) -> str:
    return {
        "not_found": "Not found",
        "forbidden": "Not allowed",
        "invalid_argument": "Invalid input",
        "conflict": "Conflict",
        "encryption_required": "Encryption key required",
    }.get(code, "Error")


def forbidden(message: str) -> SwitchboardError:
    return SwitchboardError("forbidden", message)


# ---------------------------------------------------------------------------------------------
# Security headers for every UI response (including errors raised by aiohttp itself)


def is_ui_path(path: str) -> bool:
    return path == "/" or path == "/ui" or path.startswith("/ui/")


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    if not is_ui_path(request.path):
        return
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Cross-Origin-Opener-Policy"] = "same-origin"
    # Pages carry private data and one-time secrets: never cached. The stylesheet sets its own.
    response.headers.setdefault("Cache-Control", "no-store")


# ---------------------------------------------------------------------------------------------
# Login and logout


async def root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui")


def login_page(
    csrf: str, *, error: str | None = None, notice: str | None = None, status: int = 200
) -> web.Response:
    body = h(
        '<section class="card login"><h1>Log in</h1>'
        '<form method="post" action="/ui/login">'
        '<input type="hidden" name="csrf" value="{csrf}">'
        '<label for="token">Personal token</label>'
        '<input type="password" id="token" name="token" autocomplete="off" required autofocus '
        'placeholder="sbo_…">'
        '<p class="hint">The <code>sbo_</code> token printed by <code>switchboard human add</code>. '
        "It is exchanged for a session cookie and not kept by your browser.</p>"
        '<button type="submit">Log in</button></form></section>',
        csrf=csrf,
    )
    return page("Log in", body, None, status=status, error=error, notice=notice)


def _login_response(
    request: web.Request, *, error: str | None = None, notice: str | None = None, status: int = 200
) -> web.Response:
    csrf = secrets.token_urlsafe(32)
    response = login_page(csrf, error=error, notice=notice, status=status)
    response.set_cookie(
        LOGIN_COOKIE,
        csrf,
        path="/ui/login",
        max_age=3600,
        httponly=True,
        samesite="Strict",
        secure=_secure(services_of(request)),
    )
    return response


async def login_form(request: web.Request) -> web.StreamResponse:
    if await load_viewer(request) is not None:
        raise web.HTTPSeeOther("/ui")
    return _login_response(request, notice=notice_of(request))


async def login(request: web.Request) -> web.StreamResponse:
    services = services_of(request)
    try:
        form = await read_form(request)
    except SwitchboardError as exc:
        return _login_response(request, error=exc.message, status=exc.http_status)
    expected = request.cookies.get(LOGIN_COOKIE, "")
    if not expected or not hmac.compare_digest(form.get("csrf", "").encode(), expected.encode()):
        return _login_response(
            request, error="The login form expired or was not sent from this page. Try again.", status=403
        )
    token = form.get("token", "").strip()
    human = await tenancy.human_by_token(services.db, token) if token else None
    if human is None:
        # Never echo the token back, not even a wrong one.
        return _login_response(request, error="That token is not valid.", status=401)
    raw = new_token("sbw")
    now = utcnow()
    async with services.db.write() as s:
        s.add(
            WebSession(
                id_hash=token_hash(raw),
                human_id=human.id,
                csrf_token=secrets.token_urlsafe(32),
                created_at=now,
                expires_at=now + SESSION_TTL,
            )
        )
    log.info("web login: human %s", human.handle)
    response = web.HTTPSeeOther("/ui")
    response.set_cookie(
        session_cookie_name(services),
        raw,
        path="/",
        max_age=int(SESSION_TTL.total_seconds()),
        httponly=True,
        samesite="Strict",
        secure=_secure(services),
    )
    response.del_cookie(LOGIN_COOKIE, path="/ui/login")
    raise response


@authed
async def logout(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    async with services.db.write() as s:
        await s.execute(delete(WebSession).where(WebSession.id_hash == viewer.session_hash))
    response = see_other("/ui/login", "logged_out")
    response.del_cookie(
        session_cookie_name(services), path="/", secure=_secure(services), httponly=True, samesite="Strict"
    )
    raise response


# ---------------------------------------------------------------------------------------------
# Board


def reply_to_cell(reply_to: Mapping[str, Any] | None) -> Safe:
    if not reply_to:
        return Safe('<span class="muted">—</span>')
    return h(
        '{kind} <span class="mono">{display}</span>',
        kind=badge(str(reply_to.get("kind", "?")), "reply"),
        display=reply_to.get("display", ""),
    )


def replies_cell(summary: Mapping[str, Any] | None) -> Safe:
    if not summary or not summary.get("count"):
        return Safe('<span class="muted">none</span>')
    return h(
        "{count} · last {state} {link}",
        count=summary["count"],
        state=badge(str(summary.get("last_state") or "?")),
        link=link_if_web(summary.get("last_permalink")),
    )


def state_cell(todo: Todo) -> Safe:
    cell = badge(todo.state)
    if todo.dead_letter:
        cell = join([cell, " ", badge("dead letter", "dead")])
    elif todo.state == "failed" and todo.next_retry_at is not None:
        cell = join([cell, h(' <span class="muted">retry {t}</span>', t=when(todo.next_retry_at))])
    return cell


@authed
async def board(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    state = request.query.get("state", "")
    endpoint_slug = request.query.get("endpoint", "")
    queue = request.query.get("queue", "")
    error = None
    status = 200
    if state and state not in BOARD_STATES:
        error, status, state = f"Unknown state {state!r}; choose one of {', '.join(BOARD_STATES)}.", 400, ""
    try:
        limit = int(request.query.get("limit", BOARD_LIMIT_DEFAULT))
        if not 1 <= limit <= BOARD_LIMIT_MAX:
            raise ValueError
    except ValueError:
        error, status, limit = (
            f"limit must be a number from 1 to {BOARD_LIMIT_MAX}.",
            400,
            BOARD_LIMIT_DEFAULT,
        )

    async with services.db.read() as s:
        endpoints = list(
            (await s.scalars(select(Endpoint).where(viewer.sees()).order_by(Endpoint.slug))).all()
        )
        filters: dict[str, Any] = {
            "scopes": [scope.owner for scope in viewer.scopes],
            "state": state or None,
            "endpoint_slug": endpoint_slug or None,
            "queue": queue or None,
            "limit": limit,
        }
        try:
            rows = await scoped_rows(s, **filters, before=request.query.get("before") or None)
        except SwitchboardError:
            # An unknown endpoint or a cursor past what the viewer can see: say so, show the newest.
            error, status = "That page of the board no longer exists; showing the newest todos.", 400
            rows = await scoped_rows(s, **{**filters, "endpoint_slug": None})
        summaries = await replies_summary(s, [t.id for t, _ in rows])

    options_state = join(
        h('<option value="{v}"{sel}>{v}</option>', v=v, sel=Safe(" selected") if v == state else Safe(""))
        for v in BOARD_STATES
    )
    options_endpoint = join(
        h(
            '<option value="{v}"{sel}>{v}</option>',
            v=e.slug,
            sel=Safe(" selected") if e.slug == endpoint_slug else Safe(""),
        )
        for e in endpoints
    )
    filters = h(
        '<form method="get" action="/ui" class="filters">'
        '<div><label for="f-state">State</label><select id="f-state" name="state">'
        '<option value="">any</option>{states}</select></div>'
        '<div><label for="f-endpoint">Endpoint</label><select id="f-endpoint" name="endpoint">'
        '<option value="">any</option>{endpoints}</select></div>'
        '<div><label for="f-queue">Queue</label>'
        '<input type="text" id="f-queue" name="queue" value="{queue}"></div>'
        '<div><button type="submit" class="secondary">Filter</button></div></form>',
        states=options_state,
        endpoints=options_endpoint,
        queue=queue,
    )
    if rows:
        body_rows = join(
            h(
                '<tr><td class="title"><a href="/ui/todos/{id}">{title}</a>'
                '<div class="muted mono">{id}</div></td>'
                '<td><span class="mono">{endpoint}</span><div class="muted">{queue}</div></td>'
                '<td>{source}<div class="muted">{kind}</div></td><td>{state}</td>'
                "<td>{attempt}/{max}</td><td>{reply_to}</td><td>{replies}</td><td>{created}</td></tr>",
                id=todo.id,
                title=todo.title,
                endpoint=endpoint.slug,
                queue=todo.queue,
                source=todo.source,
                kind=todo.kind,
                state=state_cell(todo),
                attempt=todo.attempt,
                max=todo.max_attempts,
                reply_to=reply_to_cell(todo.reply_to),
                replies=replies_cell(summaries.get(todo.id)),
                created=when(todo.created_at),
            )
            for todo, endpoint in rows
        )
        more = EMPTY
        if len(rows) == limit:
            params = {k: v for k, v in (("state", state), ("endpoint", endpoint_slug), ("queue", queue)) if v}
            params.update(limit=str(limit), before=rows[-1][0].id)
            more = h('<p><a href="/ui?{q}">Older todos →</a></p>', q=urlencode(params))
        table = h(
            "<table><thead><tr><th>Todo</th><th>Endpoint / queue</th><th>Source</th><th>State</th>"
            "<th>Attempts</th><th>Reply to</th><th>Replies</th><th>Created</th></tr></thead>"
            "<tbody>{rows}</tbody></table>{more}",
            rows=body_rows,
            more=more,
        )
    else:
        table = Safe(
            '<div class="empty">No todos here yet. They appear when a webhook delivers work to one of '
            "your endpoints.</div>"
        )
    body = h(
        '<h1>Board</h1><p class="hint">Todos of your endpoints and your teams\' endpoints, newest first '
        "(at most {limit}). Titles come from the senders' payloads: they are data, not instructions.</p>"
        "{filters}{table}",
        limit=limit,
        filters=filters,
        table=table,
    )
    return page("Board", body, viewer, active="board", status=status, error=error, notice=notice_of(request))


async def _visible_todo(s: AsyncSession, viewer: Viewer, todo_id: str) -> tuple[Todo, Endpoint]:
    row = (
        await s.execute(
            select(Todo, Endpoint)
            .join(Endpoint, Endpoint.id == Todo.endpoint_id)
            .where(Todo.id == todo_id, viewer.sees())
        )
    ).first()
    if row is None:
        raise not_found(f"todo {todo_id!r}")
    return row[0], row[1]


def kv(pairs: Iterable[tuple[str, object]]) -> Safe:
    return h(
        '<dl class="kv">{items}</dl>',
        items=join(h("<dt>{k}</dt><dd>{v}</dd>", k=k, v=v) for k, v in pairs),
    )


def replies_table(replies: list[dict[str, Any]]) -> Safe:
    if not replies:
        return Safe('<p class="muted">No replies yet.</p>')
    rows = join(
        h(
            '<tr><td class="mono">{id}</td><td>{state}</td><td class="mono">{display}</td>'
            '<td>{connection} <span class="muted mono">{fp}</span></td><td>{link}</td>'
            "<td>{error}</td><td>{created}</td></tr>",
            id=r.get("id", ""),
            state=badge(str(r.get("state", "?"))),
            display=r.get("display", ""),
            connection=(r.get("connection") or {}).get("name", ""),
            fp=(r.get("connection") or {}).get("fingerprint", ""),
            link=link_if_web(r.get("permalink")),
            error=r.get("error_class") or "",
            created=when(r.get("created_at")),
        )
        for r in replies
    )
    return h(
        "<table><thead><tr><th>Reply</th><th>State</th><th>Where</th><th>Connection</th><th>Link</th>"
        "<th>Error</th><th>Created</th></tr></thead><tbody>{rows}</tbody></table>",
        rows=rows,
    )


@authed
async def todo_detail(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    todo_id = request.match_info["todo_id"]
    async with services.db.read() as s:
        todo, endpoint = await _visible_todo(s, viewer, todo_id)
        attempts = list(
            (
                await s.scalars(select(Attempt).where(Attempt.todo_id == todo.id).order_by(Attempt.number))
            ).all()
        )
    replies = await replies_of(services, todo.id)
    payload = payload_of(todo)
    shown = payload if isinstance(payload, str) else json.dumps(payload, indent=2, ensure_ascii=False)
    truncated = len(shown) > PAYLOAD_SHOWN_MAX
    reply_to = todo.reply_to or {}
    address = (
        kv(
            [("kind", reply_to.get("kind", "")), ("display", reply_to.get("display", ""))]
            + [(k, v) for k, v in sorted(reply_to.items()) if k not in ("kind", "display")]
        )
        if reply_to
        else Safe('<p class="muted">This todo has no reply address (its source cannot be answered).</p>')
    )
    attempt_rows = (
        h(
            "<table><thead><tr><th>#</th><th>Claimed</th><th>Heartbeats</th><th>Outcome</th><th>Summary</th>"
            "<th>Error</th><th>Ended</th></tr></thead><tbody>{rows}</tbody></table>",
            rows=join(
                h(
                    "<tr><td>{n}</td><td>{claimed}</td><td>{hb}</td><td>{outcome}</td><td>{summary}</td>"
                    "<td>{error}</td><td>{ended}</td></tr>",
                    n=a.number,
                    claimed=when(a.claimed_at),
                    hb=a.heartbeats,
                    outcome=badge(a.outcome) if a.outcome else Safe('<span class="muted">open</span>'),
                    summary=a.summary or "",
                    error=a.error or "",
                    ended=when(a.ended_at),
                )
                for a in attempts
            ),
        )
        if attempts
        else Safe('<p class="muted">Not claimed yet.</p>')
    )
    body = h(
        '<p><a href="/ui">← Board</a></p><h1>{title}</h1>'
        '<section class="card">{facts}</section>'
        '<h2>Reply address</h2><section class="card">{address}</section>'
        "<h2>Replies</h2>{replies}<h2>Attempts</h2>{attempts}"
        "<h2>Payload</h2>{note}<pre>{payload}</pre>",
        title=todo.title,
        facts=kv(
            [
                ("id", h('<span class="mono">{v}</span>', v=todo.id)),
                ("endpoint", endpoint.slug),
                ("queue", todo.queue),
                ("source / kind", f"{todo.source} / {todo.kind}"),
                ("state", state_cell(todo)),
                ("attempts", f"{todo.attempt} of {todo.max_attempts}"),
                ("lease expires", when(todo.lease_expires_at)),
                ("created", when(todo.created_at)),
                ("updated", when(todo.updated_at)),
                ("payload size", f"{todo.payload_size} bytes"),
            ]
        ),
        address=address,
        replies=replies_table(replies),
        attempts=attempt_rows,
        note=h('<p class="hint">Showing the first {n} characters.</p>', n=PAYLOAD_SHOWN_MAX)
        if truncated
        else "",
        payload=shown[:PAYLOAD_SHOWN_MAX],
    )
    return page(todo.title, body, viewer, active="board")


# ---------------------------------------------------------------------------------------------
# Endpoints


def owner_select(scopes: list[Scope], selected: str, name: str = "owner") -> Safe:
    return h(
        '<select id="{name}" name="{name}">{options}</select>',
        name=name,
        options=join(
            h(
                '<option value="{v}"{sel}>{label}</option>',
                v=s.key,
                label=s.label,
                sel=Safe(" selected") if s.key == selected else Safe(""),
            )
            for s in scopes
        ),
    )


def _managed_scope(viewer: Viewer, key: str) -> Scope:
    scope = viewer.scope_by_key(key)
    if scope is None:
        raise not_found(f"owner {key!r}")
    if not scope.manage:
        raise forbidden(f"only the owners and admins of {scope.label} may do that")
    return scope


def vend_form(viewer: Viewer, form: Mapping[str, str]) -> Safe:
    managed = viewer.managed
    return h(
        '<form method="post" action="/ui/endpoints" class="card">{csrf}'
        '<label for="name">Name</label><input type="text" id="name" name="name" required maxlength="200" '
        'value="{name}" placeholder="e.g. triage-bot">'
        '<label for="owner">Owner</label>{owner}'
        '<label for="queues">Queues</label><input type="text" id="queues" name="queues" value="{queues}">'
        '<p class="hint">Comma-separated; the first is the default queue.</p>'
        "<label>Verbs</label>"
        '<label class="check"><input type="checkbox" checked disabled> <span><strong>Basics</strong>: '
        "list, get, claim, heartbeat, complete, fail, release (always granted)</span></label>"
        '<label class="check"><input type="checkbox" name="reply" value="on"{reply}> <span>'
        "<strong>reply</strong>: post text publicly into the conversation a todo came from, "
        "with the owner's connection</span></label>"
        '<label class="check"><input type="checkbox" name="connection_verbs" value="on"{conn}> <span>'
        '<strong>Connection verbs</strong> (list, create, rotate, delete connections) — <span class="flag">'
        "⚠ hands the agent the owner's outbound credentials</span>: it can manage the credentials replies "
        "are posted with (it never sees a secret).</span></label>"
        '<label for="expires_in_days">Expires in days (optional)</label>'
        '<input type="number" id="expires_in_days" name="expires_in_days" min="1" max="3650" '
        'value="{expires}">'
        '<label for="default_lease_seconds">Default lease (seconds)</label>'
        '<input type="number" id="default_lease_seconds" name="default_lease_seconds" min="1" max="86400" '
        'value="{lease}"><p><button type="submit">Vend endpoint</button></p>'
        '<p class="hint">The token is shown once, on the next page. Grants never widen; to change them, '
        "vend a new endpoint.</p></form>",
        csrf=csrf_field(viewer),
        name=form.get("name", ""),
        owner=owner_select(managed, form.get("owner", "me")),
        queues=form.get("queues", "default"),
        # Both optional families start unchecked; a form coming back with an error keeps the choice.
        reply=Safe(" checked") if form.get("reply") == "on" else Safe(""),
        conn=Safe(" checked") if form.get("connection_verbs") == "on" else Safe(""),
        expires=form.get("expires_in_days", ""),
        lease=form.get("default_lease_seconds", "300"),
    )


async def endpoints_page(
    request: web.Request,
    viewer: Viewer,
    *,
    error: str | None = None,
    status: int = 200,
    form: Mapping[str, str] | None = None,
) -> web.Response:
    services = services_of(request)
    sections = []
    for scope in viewer.scopes:
        endpoints = await tenancy.list_endpoints(services.db, scope.owner)
        if not endpoints:
            rows = Safe('<tr><td colspan="7" class="muted">No endpoints.</td></tr>')
        else:
            rows = join(
                h(
                    '<tr><td><span class="mono">{slug}</span><div class="muted">{name}</div></td>'
                    '<td class="mono">{prefix}</td><td>{queues}</td><td>{families}</td><td>{state}</td>'
                    "<td>{expires}</td><td>{actions}</td></tr>",
                    slug=e.slug,
                    name=e.name,
                    prefix=e.token_display,
                    queues=", ".join(e.queues),
                    families=join(
                        [
                            h("{f} ", f=f)
                            if f != "connections"
                            else h(
                                '<span class="flag" title="holds the owner\'s outbound credentials">'
                                "{f}</span> ",
                                f=f,
                            )
                            for f in tenancy.families_of(e.verbs)
                        ]
                    ),
                    state=badge(e.state),
                    expires=when(e.expires_at),
                    actions=h(
                        '<form method="post" action="/ui/endpoints/{slug}/revoke" class="inline">{csrf}'
                        '<button type="submit" class="danger">Revoke</button></form>',
                        slug=path_part(e.slug),
                        csrf=csrf_field(viewer),
                    )
                    if scope.manage and e.state == "active"
                    else "",
                )
                for e in endpoints
            )
        sections.append(
            h(
                "<h2>{label}</h2><table><thead><tr><th>Endpoint</th><th>Token</th><th>Queues</th>"
                "<th>Verb families</th><th>State</th><th>Expires</th><th></th></tr></thead>"
                "<tbody>{rows}</tbody></table>",
                label=scope.label,
                rows=rows,
            )
        )
    body = h(
        "<h1>Endpoints</h1>"
        '<p class="hint">An endpoint is an agent\'s identity and grant. Revoking kills its token at once and '
        "dead-letters its open todos.</p>{form}{sections}",
        form=collapsible("Vend an endpoint", vend_form(viewer, form or {}), bool(form)),
        sections=join(sections),
    )
    return page(
        "Endpoints", body, viewer, active="endpoints", status=status, error=error, notice=notice_of(request)
    )


@authed
async def endpoints_view(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await endpoints_page(request, viewer)


def _int_field(form: Mapping[str, str], name: str, label: str, default: int | None) -> int | None:
    raw = form.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise invalid(f"{label} must be a whole number") from None


def _list_field(raw: str) -> list[str]:
    return [p.strip() for p in raw.replace("\n", ",").split(",") if p.strip()]


@authed
async def vend(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    form = viewer.form
    try:
        scope = _managed_scope(viewer, form.get("owner", "me"))
        families = [
            f for f, key in (("reply", "reply"), ("connections", "connection_verbs")) if form.get(key) == "on"
        ]
        endpoint, token = await tenancy.vend_endpoint(
            services.db,
            name=form.get("name", ""),
            owner=scope.owner,
            queues=_list_field(form.get("queues", "")) or None,
            families=families,
            expires_in_days=_int_field(form, "expires_in_days", "expires in days", None),
            default_lease_seconds=_int_field(form, "default_lease_seconds", "default lease", 300) or 0,
        )
    except SwitchboardError as exc:
        return await endpoints_page(request, viewer, error=exc.message, status=exc.http_status, form=form)
    log.info("web: %s vended endpoint %s", viewer.handle, endpoint.slug)
    mcp_url = f"{services.settings.base_url.rstrip('/')}/mcp"
    body = h(
        '<h1>Endpoint {slug} is ready</h1><section class="reveal">'
        "<p><strong>Copy this token now. It is shown only this once</strong>; Switchboard keeps only its "
        "hash. If you lose it, revoke the endpoint and vend a new one.</p>"
        '<code class="secret">{token}</code>'
        "<h3>Connect an agent</h3><pre>claude mcp add --transport http {slug} {mcp} \\\n"
        '  --header "Authorization: Bearer {token}"</pre></section>'
        '<section class="card">{facts}</section><p><a href="/ui/endpoints">Back to endpoints</a></p>',
        slug=endpoint.slug,
        token=token,
        mcp=mcp_url,
        facts=kv(
            [
                ("owner", scope.label),
                ("queues", ", ".join(endpoint.queues)),
                ("verbs", ", ".join(endpoint.verbs)),
                ("expires", when(endpoint.expires_at)),
            ]
        ),
    )
    return page("Endpoint token", body, viewer, active="endpoints", status=201)


async def _visible_endpoint(s: AsyncSession, viewer: Viewer, slug: str) -> Endpoint:
    endpoint = await s.scalar(select(Endpoint).where(Endpoint.slug == slug, viewer.sees()))
    if endpoint is None:
        raise not_found(f"endpoint {slug!r}")
    return endpoint


@authed
async def revoke(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    slug = request.match_info["slug"]
    async with services.db.read() as s:
        endpoint = await _visible_endpoint(s, viewer, slug)
    scope = viewer.scope_of(Owner.of(endpoint))
    if scope is None or not scope.manage:
        raise forbidden(
            f"only the owners and admins of {scope.label if scope else 'its scope'} may revoke it"
        )
    await tenancy.revoke_endpoint(services.db, slug)
    log.info("web: %s revoked endpoint %s", viewer.handle, slug)
    # Close its live MCP sessions now rather than at the next revocation sweep. The MCP service
    # registers itself in extras; every MCP request re-checks the token in any case.
    mcp_service = services.extras.get("mcp")
    sweep = getattr(mcp_service, "sweep_revoked", None)
    if sweep is not None:
        await sweep()
    raise see_other("/ui/endpoints", "revoked")


# ---------------------------------------------------------------------------------------------
# Webhooks


def webhook_actions(viewer: Viewer, w: Mapping[str, Any], secret_kind: str) -> Safe:
    wid = path_part(str(w["id"]))
    csrf = csrf_field(viewer)
    parts: list[Safe] = []
    if secret_kind == "minted":
        parts.append(
            h(
                '<form method="post" action="/ui/webhooks/{id}/rotate" class="inline">{csrf}'
                '<button type="submit" class="secondary">Rotate secret</button></form>',
                id=wid,
                csrf=csrf,
            )
        )
    elif secret_kind == "provider":
        parts.append(
            h(
                '<form method="post" action="/ui/webhooks/{id}/secret" class="inline">{csrf}'
                '<input type="password" name="secret" autocomplete="off" '
                'placeholder="provider\'s signing secret" '
                'aria-label="signing secret"><button type="submit" class="secondary">{verb}</button></form>',
                id=wid,
                csrf=csrf,
                verb="Set secret" if w.get("secret_state") == "awaiting" else "Replace secret",
            )
        )
    parts.append(
        h(
            '<form method="post" action="/ui/webhooks/{id}/routes" class="inline">{csrf}'
            '<input type="text" name="endpoint" placeholder="endpoint slug" aria-label="route to endpoint">'
            '<button type="submit" class="secondary">Add route</button></form>',
            id=wid,
            csrf=csrf,
        )
    )
    parts.append(
        h(
            '<form method="post" action="/ui/webhooks/{id}/delete" class="inline">{csrf}'
            '<button type="submit" class="danger">Delete</button></form>',
            id=wid,
            csrf=csrf,
        )
    )
    return h('<div class="actions">{p}</div>', p=join(parts))


def routes_cell(viewer: Viewer, w: Mapping[str, Any], manage: bool) -> Safe:
    routes = w.get("routes") or []
    if not routes:
        return Safe('<span class="muted">—</span>')
    return join(
        h(
            '<div><span class="mono">{slug}</span>{remove}</div>',
            slug=slug,
            remove=h(
                ' <form method="post" action="/ui/webhooks/{id}/routes/remove" class="inline">{csrf}'
                '<input type="hidden" name="endpoint" value="{slug}">'
                '<button type="submit" class="danger">remove</button></form>',
                id=path_part(str(w["id"])),
                csrf=csrf_field(viewer),
                slug=slug,
            )
            if manage
            else "",
        )
        for slug in routes
    )


async def webhooks_page(
    request: web.Request,
    viewer: Viewer,
    *,
    error: str | None = None,
    status: int = 200,
    form: Mapping[str, str] | None = None,
) -> web.Response:
    services = services_of(request)
    form = form or {}
    sources = services.providers.sources
    sections = []
    live_managed: list[Endpoint] = []
    for scope in viewer.scopes:
        if scope.manage:
            live_managed += [
                e
                for e in await tenancy.list_endpoints(services.db, scope.owner)
                if tenancy.endpoint_is_live(e)
            ]
        hooks = await tenancy.list_webhooks(services.db, owner=scope.owner)
        if not hooks:
            rows = Safe('<tr><td colspan="7" class="muted">No webhooks.</td></tr>')
        else:
            rows = join(
                h(
                    '<tr><td class="mono">{id}</td><td><span class="mono">{endpoint}</span>'
                    '<div class="muted">queue {queue}</div></td><td>{source}</td>'
                    '<td>{trust} {secret}</td><td class="mono">{prefix}</td><td>{routes}</td>'
                    "<td>{actions}</td></tr>",
                    id=w["id"],
                    endpoint=w["endpoint"],
                    queue=w["queue"],
                    source=w["source"],
                    trust=badge(str(w["trust_mode"]), "trust"),
                    secret=badge(
                        {"set": "secret set", "awaiting": "awaiting secret", "none": "no secret"}.get(
                            str(w["secret_state"]), str(w["secret_state"])
                        ),
                        {"set": "ok", "awaiting": "claimed", "none": "trust"}.get(str(w["secret_state"]), ""),
                    ),
                    prefix=w["ingest_token_prefix"],
                    routes=routes_cell(viewer, w, scope.manage),
                    actions=webhook_actions(
                        viewer, w, sources[w["source"]].secret if w["source"] in sources else "none"
                    )
                    if scope.manage
                    else "",
                )
                for w in hooks
            )
        sections.append(
            h(
                "<h2>{label}</h2><table><thead><tr><th>Webhook</th><th>Endpoint</th><th>Source</th>"
                "<th>Trust</th><th>Ingest URL</th><th>Routes</th><th></th></tr></thead>"
                "<tbody>{rows}</tbody></table>",
                label=scope.label,
                rows=rows,
            )
        )
    if live_managed:
        create = h(
            '<form method="post" action="/ui/webhooks" class="card">{csrf}'
            '<label for="endpoint">Endpoint</label><select id="endpoint" name="endpoint">{endpoints}</select>'
            '<label for="source">Source kind</label><select id="source" name="source">{sources}</select>'
            '<label for="queue">Queue (optional)</label>'
            '<input type="text" id="queue" name="queue" value="{queue}">'
            '<p class="hint">The ingest URL, and for GitHub, Gitea and Cairn the signing secret, are shown '
            "once on the next page. For Slack and Stripe, paste the provider's signing secret afterwards; "
            "until then deliveries are refused. Generic webhooks are unsigned: the URL is the only "
            'protection.</p><p><button type="submit">Create webhook</button></p></form>',
            csrf=csrf_field(viewer),
            endpoints=join(
                h(
                    '<option value="{v}"{sel}>{v}</option>',
                    v=e.slug,
                    sel=Safe(" selected") if e.slug == form.get("endpoint") else Safe(""),
                )
                for e in live_managed
            ),
            sources=join(
                h(
                    '<option value="{v}"{sel}>{v} ({how})</option>',
                    v=name,
                    how={
                        "minted": "signed, secret minted here",
                        "provider": "signed, provider's secret",
                        "none": "unsigned",
                    }.get(kind.secret, kind.secret),
                    sel=Safe(" selected") if name == form.get("source") else Safe(""),
                )
                for name, kind in sorted(sources.items())
            ),
            queue=form.get("queue", ""),
        )
    else:
        create = Safe(
            '<section class="card"><p class="muted">Vend an endpoint you manage first; a webhook delivers '
            "into one of its queues.</p></section>"
        )
    body = h(
        '<h1>Webhooks</h1><p class="hint">Each webhook is an ingest URL owned by one endpoint; '
        "routes fan its "
        "deliveries out to more endpoints. Secrets and ingest URLs are never shown again after creation.</p>"
        "{create}{sections}",
        create=collapsible("Create a webhook", create, bool(form)) if live_managed else create,
        sections=join(sections),
    )
    return page(
        "Webhooks", body, viewer, active="webhooks", status=status, error=error, notice=notice_of(request)
    )


@authed
async def webhooks_view(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await webhooks_page(request, viewer)


def webhook_reveal(
    viewer: Viewer,
    services: Services,
    *,
    heading: str,
    webhook: Webhook,
    endpoint_slug: str,
    ingest_token: str | None,
    secret: str | None,
) -> web.Response:
    kind = services.providers.sources.get(webhook.source)
    parts: list[Safe] = []
    if ingest_token is not None:
        parts.append(
            h(
                "<h3>Ingest URL</h3><p>Configure the provider to POST to:</p>"
                '<code class="secret">{url}</code>',
                url=tenancy.ingest_url(services.settings.base_url, ingest_token),
            )
        )
    if secret is not None:
        parts.append(
            h(
                "<h3>Signing secret</h3><p>Give the provider this secret; deliveries are verified "
                'against it.</p><code class="secret">{secret}</code>',
                secret=secret,
            )
        )
    elif kind is not None and kind.secret == "provider":
        parts.append(
            Safe(
                "<p>This kind's signing secret is issued by the provider. Paste it on the "
                '<a href="/ui/webhooks">webhooks page</a>; deliveries are refused until then.</p>'
            )
        )
    elif kind is not None and kind.secret == "none":
        parts.append(Safe("<p>Unsigned webhook: anyone holding the URL can deliver. Keep it private.</p>"))
    body = h(
        '<h1>{heading}</h1><section class="reveal"><p><strong>Copy this now. It is shown only this '
        "once</strong>; Switchboard keeps only a hash of the URL and an encrypted copy of the secret.</p>"
        "{parts}</section>"
        '<section class="card">{facts}</section><p><a href="/ui/webhooks">Back to webhooks</a></p>',
        heading=heading,
        parts=join(parts),
        facts=kv(
            [
                ("webhook", h('<span class="mono">{v}</span>', v=webhook.id)),
                ("endpoint", endpoint_slug),
                ("source", webhook.source),
                ("queue", webhook.queue),
            ]
        ),
    )
    return page(heading, body, viewer, active="webhooks", status=201)


@authed
async def webhook_create(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    form = viewer.form
    slug = form.get("endpoint", "")
    try:
        async with services.db.read() as s:
            endpoint = await _visible_endpoint(s, viewer, slug)
        scope = viewer.scope_of(Owner.of(endpoint))
        if scope is None or not scope.manage:
            raise forbidden("only the owners and admins of the endpoint's scope may add webhooks to it")
        created = await tenancy.create_webhook(
            services.db,
            services.vault,
            services.providers,
            endpoint_slug=slug,
            source=form.get("source", ""),
            queue=form.get("queue", "").strip() or None,
        )
    except SwitchboardError as exc:
        return await webhooks_page(request, viewer, error=exc.message, status=exc.http_status, form=form)
    log.info("web: %s created webhook %s on %s", viewer.handle, created.webhook.id, slug)
    return webhook_reveal(
        viewer,
        services,
        heading="Webhook created",
        webhook=created.webhook,
        endpoint_slug=slug,
        ingest_token=created.ingest_token,
        secret=created.secret,
    )


async def _managed_webhook(request: web.Request, viewer: Viewer) -> tuple[Webhook, Endpoint]:
    """The webhook in the URL, if the viewer may manage it: another scope's webhook is a 404."""
    services = services_of(request)
    async with services.db.read() as s:
        row = (
            await s.execute(
                select(Webhook, Endpoint)
                .join(Endpoint, Endpoint.id == Webhook.endpoint_id)
                .where(Webhook.id == request.match_info["webhook_id"], viewer.sees())
            )
        ).first()
    if row is None:
        raise not_found(f"webhook {request.match_info['webhook_id']!r}")
    webhook, endpoint = row
    scope = viewer.scope_of(Owner.of(endpoint))
    if scope is None or not scope.manage:
        raise forbidden("only the owners and admins of the webhook's scope may change it")
    return webhook, endpoint


async def _webhook_action(
    request: web.Request, viewer: Viewer, action: Callable[[Webhook, Endpoint], Awaitable[str]]
) -> web.StreamResponse:
    """Run a webhook change; a refusal comes back as the webhooks page with the message."""
    try:
        webhook, endpoint = await _managed_webhook(request, viewer)
        done = await action(webhook, endpoint)
    except SwitchboardError as exc:
        return await webhooks_page(request, viewer, error=exc.message, status=exc.http_status)
    raise see_other("/ui/webhooks", done)


@authed
async def webhook_rotate(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    try:
        webhook, endpoint = await _managed_webhook(request, viewer)
        secret = await tenancy.rotate_webhook_secret(
            services.db, services.vault, services.providers, webhook.id
        )
    except SwitchboardError as exc:
        return await webhooks_page(request, viewer, error=exc.message, status=exc.http_status)
    log.info("web: %s rotated webhook %s", viewer.handle, webhook.id)
    return webhook_reveal(
        viewer,
        services,
        heading="Webhook secret rotated",
        webhook=webhook,
        endpoint_slug=endpoint.slug,
        ingest_token=None,
        secret=secret,
    )


@authed
async def webhook_set_secret(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)

    async def action(webhook: Webhook, _: Endpoint) -> str:
        await tenancy.set_webhook_secret(
            services.db, services.vault, services.providers, webhook.id, viewer.form.get("secret", "")
        )
        log.info("web: %s set the secret of webhook %s", viewer.handle, webhook.id)
        return "secret_set"

    return await _webhook_action(request, viewer, action)


@authed
async def webhook_delete(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)

    async def action(webhook: Webhook, _: Endpoint) -> str:
        await tenancy.delete_webhook(services.db, webhook.id)
        log.info("web: %s deleted webhook %s", viewer.handle, webhook.id)
        return "webhook_deleted"

    return await _webhook_action(request, viewer, action)


@authed
async def route_add(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)

    async def action(webhook: Webhook, _: Endpoint) -> str:
        slug = viewer.form.get("endpoint", "").strip()
        if not slug:
            raise invalid("name the endpoint to route to")
        async with services.db.read() as s:
            # An endpoint the viewer cannot see does not exist, as far as they can tell.
            await _visible_endpoint(s, viewer, slug)
        await tenancy.add_route(services.db, webhook.id, slug, consenting_human_id=viewer.human_id)
        return "route_added"

    return await _webhook_action(request, viewer, action)


@authed
async def route_remove(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)

    async def action(webhook: Webhook, _: Endpoint) -> str:
        await tenancy.remove_route(services.db, webhook.id, viewer.form.get("endpoint", "").strip())
        return "route_removed"

    return await _webhook_action(request, viewer, action)


# ---------------------------------------------------------------------------------------------
# Teams


async def teams_page(
    request: web.Request,
    viewer: Viewer,
    *,
    error: str | None = None,
    status: int = 200,
    form: Mapping[str, str] | None = None,
) -> web.Response:
    services = services_of(request)
    form = form or {}
    teams = await tenancy.list_teams(services.db, viewer.human_id)
    sections = []
    for team in teams:
        scope = viewer.scope_by_key(f"team:{team['slug']}")
        my_role = scope.role if scope else "member"
        manage = my_role in ("owner", "admin")
        slug_part = path_part(team["slug"])
        member_rows = join(
            h(
                '<tr><td class="mono">{handle}</td><td>{role}</td><td>{actions}</td></tr>',
                handle=m["handle"],
                role=badge(m["role"], "role"),
                actions=h(
                    '<form method="post" action="/ui/teams/{slug}/members/remove" class="inline">{csrf}'
                    '<input type="hidden" name="handle" value="{handle}">'
                    '<button type="submit" class="danger">{label}</button></form>',
                    slug=slug_part,
                    csrf=csrf_field(viewer),
                    handle=m["handle"],
                    label="Leave" if m["handle"] == viewer.handle else "Remove",
                )
                if (manage and (m["role"] != "owner" or my_role == "owner")) or m["handle"] == viewer.handle
                else "",
            )
            for m in team["members"]
        )
        roles = ("owner", "admin", "member") if my_role == "owner" else ("admin", "member")
        add = (
            h(
                '<form method="post" action="/ui/teams/{slug}/members" class="inline">{csrf}'
                '<input type="text" name="handle" placeholder="handle" aria-label="handle">'
                '<select name="role" aria-label="role">{roles}</select>'
                '<button type="submit" class="secondary">Add or change member</button></form>',
                slug=slug_part,
                csrf=csrf_field(viewer),
                roles=join(
                    h(
                        '<option value="{r}"{sel}>{r}</option>',
                        r=r,
                        sel=Safe(" selected") if r == "member" else "",
                    )
                    for r in roles
                ),
            )
            if manage
            else Safe("")
        )
        sections.append(
            h(
                '<section class="card"><h2>{slug}</h2><p class="muted">Your role: {role}</p>'
                "<table><thead><tr><th>Member</th><th>Role</th><th></th></tr></thead>"
                "<tbody>{rows}</tbody></table><p>{add}</p></section>",
                slug=team["slug"],
                role=my_role,
                rows=member_rows,
                add=add,
            )
        )
    body = h(
        '<h1>Teams</h1><p class="hint">A team owns endpoints and connections together. Owners and admins '
        "manage them; members see them. Only owners can make or change owners.</p>"
        '<form method="post" action="/ui/teams" class="card"><h2>Create a team</h2>{csrf}'
        '<label for="slug">Slug</label><input type="text" id="slug" name="slug" value="{slug}" '
        'required maxlength="63" placeholder="e.g. platform"><p class="hint">You become its owner.</p>'
        '<p><button type="submit">Create team</button></p></form>{sections}',
        csrf=csrf_field(viewer),
        slug=form.get("slug", ""),
        sections=join(sections) if sections else Safe('<div class="empty">You are in no team yet.</div>'),
    )
    return page("Teams", body, viewer, active="teams", status=status, error=error, notice=notice_of(request))


@authed
async def teams_view(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await teams_page(request, viewer)


@authed
async def team_create(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    try:
        await tenancy.add_team(services.db, viewer.form.get("slug", "").strip(), viewer.handle)
    except SwitchboardError as exc:
        return await teams_page(request, viewer, error=exc.message, status=exc.http_status, form=viewer.form)
    raise see_other("/ui/teams", "team_created")


async def _team_role(request: web.Request, viewer: Viewer) -> tuple[str, str]:
    """The team in the URL and the viewer's role in it; a team they are not in is a 404."""
    slug = request.match_info["slug"]
    scope = viewer.scope_by_key(f"team:{slug}")
    if scope is None:
        raise not_found(f"team {slug!r}")
    return slug, scope.role


@authed
async def member_set(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    try:
        slug, my_role = await _team_role(request, viewer)
        handle = viewer.form.get("handle", "").strip()
        role = viewer.form.get("role", "member")
        if my_role not in ("owner", "admin"):
            raise forbidden(f"only owners and admins of team {slug!r} manage its members")
        tenancy.check_handle(handle)
        if role not in tenancy.ROLES:
            raise invalid(f"role must be one of {', '.join(tenancy.ROLES)}")
        current = next(
            (
                m["role"]
                for t in await tenancy.list_teams(services.db, viewer.human_id)
                if t["slug"] == slug
                for m in t["members"]
                if m["handle"] == handle
            ),
            None,
        )
        if my_role != "owner" and (role == "owner" or current == "owner"):
            raise forbidden("only a team owner can make or change an owner")
        await tenancy.set_member(services.db, slug, handle, role)
    except SwitchboardError as exc:
        return await teams_page(request, viewer, error=exc.message, status=exc.http_status)
    raise see_other("/ui/teams", "member_saved")


@authed
async def member_remove(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    try:
        slug, my_role = await _team_role(request, viewer)
        handle = viewer.form.get("handle", "").strip()
        leaving = handle == viewer.handle
        current = next(
            (
                m["role"]
                for t in await tenancy.list_teams(services.db, viewer.human_id)
                if t["slug"] == slug
                for m in t["members"]
                if m["handle"] == handle
            ),
            None,
        )
        if current is None:
            raise not_found(f"{handle!r} in team {slug!r}")
        if not leaving and (my_role not in ("owner", "admin") or (current == "owner" and my_role != "owner")):
            raise forbidden("only owners and admins remove members, and only owners remove owners")
        await tenancy.remove_member(services.db, slug, handle)
    except SwitchboardError as exc:
        return await teams_page(request, viewer, error=exc.message, status=exc.http_status)
    raise see_other("/ui/teams", "member_removed")


# ---------------------------------------------------------------------------------------------
# Connections (the owners' outbound credentials: shown by fingerprint, never by secret)


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
    cid = path_part(str(c["id"]))
    csrf = csrf_field(viewer)
    return h(
        '<div class="actions">'
        '<form method="post" action="/ui/connections/{id}/test" class="inline">{csrf}'
        '<button type="submit" class="secondary">Test</button></form>'
        '<form method="post" action="/ui/connections/{id}/rotate" class="inline">{csrf}'
        '<input type="password" name="secret" autocomplete="off" placeholder="new secret" '
        'aria-label="new secret"><button type="submit" class="secondary">Rotate</button></form>'
        '<form method="post" action="/ui/connections/{id}/delete" class="inline">{csrf}'
        '<button type="submit" class="danger">Delete</button></form></div>',
        id=cid,
        csrf=csrf,
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
    return h(
        '<form method="post" action="/ui/connections" class="card">{warning}{csrf}'
        '<label for="owner">Owner</label>{owner}'
        '<label for="kind">Kind</label><select id="kind" name="kind">{kinds}</select>'
        '<label for="name">Name</label><input type="text" id="name" name="name" maxlength="100" required '
        'value="{name}" placeholder="e.g. acme-bot">'
        '<label for="account_key">Account key</label>'
        '<input type="text" id="account_key" name="account_key" value="{account_key}">'
        '<p class="hint">{account_hint}</p>'
        '<label for="secret">Secret</label>'
        '<input type="password" id="secret" name="secret" autocomplete="off" required>'
        '<p class="hint">Write-only: it is encrypted at rest and never shown again, anywhere. Pages show a '
        "fingerprint so you can tell secrets apart.</p>"
        '<label for="targets">Targets (optional)</label>'
        '<input type="text" id="targets" name="targets" value="{targets}" placeholder="acme/*, C0123">'
        '<p class="hint">Comma-separated allowlist: repository globs, Slack channel ids or Cairn artifact '
        "ids. Empty allows every target of the account.</p>"
        '<label for="endpoints">Endpoints (optional)</label>'
        '<input type="text" id="endpoints" name="endpoints" value="{endpoints}">'
        '<p class="hint">Comma-separated endpoint slugs of the same owner that may reply with it. Empty '
        "allows all of the owner's endpoints.</p>"
        '<p><button type="submit">Add connection</button></p></form>',
        warning=warning,
        csrf=csrf_field(viewer),
        owner=owner_select(viewer.managed, form.get("owner", "me")),
        kinds=join(
            h(
                '<option value="{v}"{sel}>{v}</option>',
                v=name,
                sel=Safe(" selected") if name == form.get("kind") else EMPTY,
            )
            for name in sorted(kinds)
        ),
        name=form.get("name", ""),
        account_key=form.get("account_key", ""),
        account_hint="GitHub: the forge host (github.com when empty); Gitea and Cairn: the https base URL; "
        "Slack: the team id.",
        targets=form.get("targets", ""),
        endpoints=form.get("endpoints", ""),
    )


async def connections_page(
    request: web.Request,
    viewer: Viewer,
    *,
    error: str | None = None,
    status: int = 200,
    form: Mapping[str, str] | None = None,
) -> web.Response:
    services = services_of(request)
    rows = await connections.connections_for_human(services, viewer.human_id)
    sections = []
    for scope in viewer.scopes:
        mine = [c for c in rows if c.get("owner_id") == scope.owner.id]
        if not mine:
            body_rows = Safe('<tr><td colspan="7" class="muted">No connections.</td></tr>')
        else:
            body_rows = join(
                h(
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
                    if c.get("can_manage")
                    else Safe('<span class="muted">—</span>'),
                    test=last_test_cell(c.get("last_test")) if c.get("can_manage") else EMPTY,
                    actions=connection_actions(viewer, c) if c.get("can_manage") else EMPTY,
                )
                for c in mine
            )
        sections.append(
            h(
                "<h2>{label}</h2>{note}<table><thead><tr><th>Name</th><th>Kind</th><th>Account</th>"
                "<th>Fingerprint</th><th>Allowlists</th><th>Last test</th><th></th></tr></thead>"
                "<tbody>{rows}</tbody></table>",
                label=scope.label,
                note=EMPTY
                if scope.manage
                else h(
                    '<p class="hint">You are a member of {t}: you see its connections; its owners and '
                    "admins manage them.</p>",
                    t=scope.label,
                ),
                rows=body_rows,
            )
        )
    add = connection_form(services, viewer, form or {})
    body = h(
        '<h1>Connections</h1><p class="hint">A connection is the credential replies are posted with: '
        "always the todo owner's, matched by the reply address's provider and account. Agents never "
        "see it.</p>{form}{sections}",
        form=collapsible("Add a connection", add, bool(form)) if add else EMPTY,
        sections=join(sections),
    )
    return page(
        "Connections",
        body,
        viewer,
        active="connections",
        status=status,
        error=error,
        notice=notice_of(request),
    )


@authed
async def connections_view(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await connections_page(request, viewer)


@authed
async def connection_create(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    form = viewer.form
    try:
        scope = _managed_scope(viewer, form.get("owner", "me"))
        created = await connections.create_connection(
            services,
            scope.owner,
            kind=form.get("kind", ""),
            name=form.get("name", ""),
            account_key=form.get("account_key", "").strip() or None,
            secret=form.get("secret", ""),
            targets=_list_field(form.get("targets", "")) or None,
            endpoints=_list_field(form.get("endpoints", "")) or None,
        )
    except SwitchboardError as exc:
        # The secret field is never sent back: the page's form refills everything else.
        kept = {k: v for k, v in form.items() if k != "secret"}
        return await connections_page(request, viewer, error=exc.message, status=exc.http_status, form=kept)
    log.info("web: %s created connection %s", viewer.handle, created.get("id"))
    raise see_other("/ui/connections", "connection_created")


async def _connection_action(
    request: web.Request, viewer: Viewer, action: Callable[[Owner, str], Awaitable[str]]
) -> web.StreamResponse:
    services = services_of(request)
    connection_id = request.match_info["connection_id"]
    try:
        owner = await connections.authorize(services, viewer.human_id, connection_id, manage=True)
        done = await action(owner, connection_id)
    except SwitchboardError as exc:
        return await connections_page(request, viewer, error=exc.message, status=exc.http_status)
    raise see_other("/ui/connections", done)


@authed
async def connection_rotate(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)

    async def action(owner: Owner, connection_id: str) -> str:
        await connections.rotate_connection(services, owner, connection_id, viewer.form.get("secret", ""))
        log.info("web: %s rotated connection %s", viewer.handle, connection_id)
        return "connection_rotated"

    return await _connection_action(request, viewer, action)


@authed
async def connection_delete(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)

    async def action(owner: Owner, connection_id: str) -> str:
        await connections.delete_connection(services, owner, connection_id)
        log.info("web: %s deleted connection %s", viewer.handle, connection_id)
        return "connection_deleted"

    return await _connection_action(request, viewer, action)


@authed
async def connection_test(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)

    async def action(owner: Owner, connection_id: str) -> str:
        verdict = await connections.test_connection(services, owner, connection_id)
        return "connection_test_ok" if verdict.get("ok") else "connection_test_failed"

    return await _connection_action(request, viewer, action)


# ---------------------------------------------------------------------------------------------
# Static files, unknown pages, setup


async def stylesheet(request: web.Request) -> web.StreamResponse:
    return web.Response(
        body=(STATIC_DIR / "app.css").read_bytes(),
        content_type="text/css",
        charset="utf-8",
        headers={"Cache-Control": "public, max-age=3600"},
    )


async def not_found_page(request: web.Request) -> web.StreamResponse:
    viewer = None
    try:
        viewer = await load_viewer(request)
    except (DatabaseUnavailable, OperationalError, DBAPIError, OSError):
        viewer = None
    return error_page(viewer, 404, "There is no such page.", "Not found")


def setup(app: web.Application) -> None:
    """Add the UI routes, the security headers and the expired-session sweep to the app."""
    app.on_response_prepare.append(security_headers)
    app.cleanup_ctx.append(periodic("web-session-purge", 3600, purge_expired_sessions))
    r = app.router
    r.add_get("/", root)
    r.add_get("/ui", board)
    r.add_get("/ui/static/app.css", stylesheet)
    r.add_get("/ui/login", login_form)
    r.add_post("/ui/login", login)
    r.add_post("/ui/logout", logout)
    r.add_get("/ui/todos/{todo_id}", todo_detail)
    r.add_get("/ui/endpoints", endpoints_view)
    r.add_post("/ui/endpoints", vend)
    r.add_post("/ui/endpoints/{slug}/revoke", revoke)
    r.add_get("/ui/webhooks", webhooks_view)
    r.add_post("/ui/webhooks", webhook_create)
    r.add_post("/ui/webhooks/{webhook_id}/rotate", webhook_rotate)
    r.add_post("/ui/webhooks/{webhook_id}/secret", webhook_set_secret)
    r.add_post("/ui/webhooks/{webhook_id}/delete", webhook_delete)
    r.add_post("/ui/webhooks/{webhook_id}/routes", route_add)
    r.add_post("/ui/webhooks/{webhook_id}/routes/remove", route_remove)
    r.add_get("/ui/connections", connections_view)
    r.add_post("/ui/connections", connection_create)
    r.add_post("/ui/connections/{connection_id}/rotate", connection_rotate)
    r.add_post("/ui/connections/{connection_id}/delete", connection_delete)
    r.add_post("/ui/connections/{connection_id}/test", connection_test)
    r.add_get("/ui/teams", teams_view)
    r.add_post("/ui/teams", team_create)
    r.add_post("/ui/teams/{slug}/members", member_set)
    r.add_post("/ui/teams/{slug}/members/remove", member_remove)
    # Last: every other /ui path is an HTML 404 (with the security headers), not aiohttp's text page.
    r.add_route("*", "/ui/{tail:.*}", not_found_page)
