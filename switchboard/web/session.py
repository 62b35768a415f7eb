"""Who is asking: login, the session cookie, CSRF, and the ``Viewer`` every handler receives.

Login takes a human's ``sbo_`` token once and trades it for a session cookie; only the cookie's
hash is stored (``web_sessions``), with a per-session CSRF token. The login form has its own CSRF
token bound to a short-lived ``sb_login`` cookie, against login CSRF. ``authed`` wraps every other
handler: no live session → the login page (GET) or 401 (POST); a POST without the session's CSRF
token → 403 with nothing changed; any error a handler did not render itself → an error page.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import wraps
from typing import TypeVar
from urllib.parse import unquote, urlencode, urlsplit

from aiohttp import web
from sqlalchemy import ColumnElement, delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard import tenancy
from switchboard.db import is_unavailable, utcnow
from switchboard.errors import SwitchboardError, not_found
from switchboard.ids import new_id, new_token, token_hash
from switchboard.models import Endpoint, Human, Membership, Team, Todo, Webhook, WebSession
from switchboard.services import Services, services_of
from switchboard.tenancy import Owner, scope_filter
from switchboard.web.forms import Handler, check_request_text, read_form
from switchboard.web.html import NOTICES, TAKEN_NOTICE, error_page, h, hidden, page, secret_field
from switchboard.web.once import Redirect, put_flash, take_flash

log = logging.getLogger("switchboard.web")

SESSION_TTL = timedelta(hours=12)
# "Last seen" on the account page is this fresh: refreshing it on every page view would be a write each.
LAST_SEEN_EVERY = timedelta(minutes=5)
USER_AGENT_MAX = 200
LOGIN_COOKIE = "sb_login"
# Set by Log out for the login page it leads to (the one notice shown to someone not logged in).
LOGGED_OUT_COOKIE = "sb_logged_out"
NEXT_MAX = 2000

# Rows that belong to an endpoint, and so to its owner scope.
EndpointOwned = TypeVar("EndpointOwned", Todo, Webhook)


def forbidden(message: str) -> SwitchboardError:
    return SwitchboardError("forbidden", message)


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
    # The raw session cookie (never stored: one-time reveals are sealed under a key derived from it).
    cookie: str = ""
    # The notice an action left for this session's next page (a ``NOTICES`` key), as read.
    flash: str | None = None

    def scope_of(self, owner: Owner) -> Scope | None:
        return next((s for s in self.scopes if s.owner == owner), None)

    def scope_by_key(self, key: str) -> Scope | None:
        return next((s for s in self.scopes if s.key == key), None)

    @property
    def managed(self) -> list[Scope]:
        return [s for s in self.scopes if s.manage]

    def managed_scope(self, key: str) -> Scope:
        """The scope a form's owner picker named, if the viewer manages it (another human's or an
        unknown team is a 404, a team they only belong to a 403)."""
        scope = self.scope_by_key(key)
        if scope is None:
            raise not_found(f"owner {key!r}")
        if not scope.manage:
            raise forbidden(f"only the owners and admins of {scope.label} may do that")
        return scope

    def managing(self, owner: Owner, what: str) -> Scope:
        """The scope of a resource the viewer can see, if they may change it; else ``forbidden``
        naming ``what`` they tried."""
        scope = self.scope_of(owner)
        if scope is None or not scope.manage:
            label = scope.label if scope else "its scope"
            raise forbidden(f"only the owners and admins of {label} may {what}")
        return scope

    def sees(self) -> ColumnElement[bool]:
        """SQL filter: endpoints in a scope the viewer can see."""
        return scope_filter([scope.owner for scope in self.scopes])

    # Lookups by an id from a URL or a form. Another scope's row is a 404 exactly like a missing
    # one, so a viewer cannot learn that it exists.

    async def endpoint(self, s: AsyncSession, slug: str) -> Endpoint:
        endpoint = await s.scalar(select(Endpoint).where(Endpoint.slug == slug, self.sees()))
        if endpoint is None:
            raise not_found(f"endpoint {slug!r}")
        return endpoint

    async def owned(
        self, s: AsyncSession, model: type[EndpointOwned], row_id: str, what: str
    ) -> tuple[EndpointOwned, Endpoint]:
        """A todo or webhook by id, with its endpoint."""
        row = (
            await s.execute(
                select(model, Endpoint)
                .join(Endpoint, Endpoint.id == model.endpoint_id)
                .where(model.id == row_id, self.sees())
            )
        ).first()
        if row is None:
            raise not_found(f"{what} {row_id!r}")
        return row[0], row[1]


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
    # Our cookies are ASCII; one with other bytes (another program on this host: cookies are not
    # kept apart by port) is no session, not a 500 from hashing a lone surrogate.
    if not raw or len(raw) > 200 or not raw.isascii():
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
        now = utcnow()
        # Revoking ends the human's sessions; refusing a revoked human here too costs nothing.
        if session.expires_at <= now or human.revoked_at is not None:
            return None
        viewer = Viewer(
            human.id,
            human.handle,
            session.id_hash,
            session.csrf_token,
            await _scopes(s, human),
            cookie=raw,
            flash=session.flash,
        )
    if now - session.last_seen_at >= LAST_SEEN_EVERY:
        async with services.db.write() as s:
            await s.execute(
                update(WebSession).where(WebSession.id_hash == session.id_hash).values(last_seen_at=now)
            )
    return viewer


async def purge_expired_sessions(services: Services) -> None:
    async with services.db.write() as s:
        await s.execute(delete(WebSession).where(WebSession.expires_at <= utcnow()))


_TITLES = {
    "not_found": "Not found",
    "forbidden": "Not allowed",
    "invalid_argument": "Invalid input",
    "conflict": "Conflict",
    "encryption_required": "Encryption key required",
}


def authed(fn: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Require a live session; on POST also a form with the session's CSRF token.

    SwitchboardErrors a handler did not turn into a page of its own become an error page with the
    mapped status; anything unexpected is logged and answered with a plain page, never a traceback.
    """

    @wraps(fn)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        viewer: Viewer | None = None
        try:
            check_request_text(request)
            viewer = await load_viewer(request)
            if viewer is None:
                if request.method in ("GET", "HEAD"):
                    # After logging in, back to the page that was asked for.
                    raise web.HTTPSeeOther(f"/ui/login?{urlencode({'next': request.path_qs})}")
                return error_page(None, 401, "Your session has ended. Log in again.", "Logged out")
            notice = None
            if request.method == "GET" and viewer.flash and await take_flash(request, viewer, viewer.flash):
                notice = viewer.flash
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
            taken = TAKEN_NOTICE.set(notice)
            try:
                return await fn(request, viewer)
            finally:
                TAKEN_NOTICE.reset(taken)
        except Redirect as done:
            # The action has committed: now its notice may be shown, on the page it leads to.
            if viewer is not None and done.flash:
                await put_flash(request, viewer, done.flash)
            raise
        except web.HTTPException:
            raise
        except SwitchboardError as exc:
            return error_page(viewer, exc.http_status, exc.message, _TITLES.get(exc.code, "Error"))
        except IntegrityError:
            # tenancy and connections map the constraints they know; this is a concurrent change.
            log.warning("web UI: integrity conflict on %s %s", request.method, request.path)
            return error_page(
                viewer, 409, "That changed at the same time elsewhere. Reload and retry.", "Conflict"
            )
        except Exception as exc:
            # The database being away (``db.is_unavailable``) is a 503 page the viewer may retry;
            # anything else is a bug, logged with its traceback.
            if is_unavailable(exc):
                return _unavailable(request, viewer, exc)
            log.exception("web UI: unhandled error on %s %s", request.method, request.path)
            return error_page(viewer, 500, "Something went wrong on our side; it has been logged.", "Error")

    return wrapper


def _unavailable(request: web.Request, viewer: Viewer | None, exc: Exception) -> web.Response:
    """The page for a database outage (``db.is_unavailable``): a 503 the viewer may retry."""
    log.warning("web UI: database unavailable on %s %s: %s", request.method, request.path, type(exc).__name__)
    return error_page(viewer, 503, "The database is unavailable. Try again shortly.", "Unavailable")


def outage_page(
    fn: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """For the login page and form, which run outside ``authed``: the database being away is the
    same 503 page as everywhere else in the UI, not the app's JSON ``500 internal`` (and a logged
    traceback) that any other exception gets."""

    @wraps(fn)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        try:
            return await fn(request)
        except web.HTTPException:
            raise
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            return _unavailable(request, None, exc)

    return wrapper


# ---------------------------------------------------------------------------------------------
# Login and logout


def safe_next(value: str | None) -> str:
    """Where to go after logging in: a page of this UI named by its path (and query), else the
    board. Anything that could leave the site (``//host``, ``https:…``, a backslash) is the board."""
    if not value or len(value) > NEXT_MAX or not value.startswith("/ui") or "\\" in value:
        return "/ui"
    if not value.isprintable() or any(c.isspace() for c in value):
        return "/ui"
    try:
        parts = urlsplit(value)
    except ValueError:
        return "/ui"
    if parts.scheme or parts.netloc or not (parts.path == "/ui" or parts.path.startswith("/ui/")):
        return "/ui"
    # A browser resolves dot segments in a Location, percent-encoded ones too: "/ui/../x" is "/x".
    path = unquote(parts.path)
    if "//" in path or any(segment in (".", "..") for segment in path.split("/")):
        return "/ui"
    if path in ("/ui/login", "/ui/logout"):
        return "/ui"
    return value


def _login_response(
    request: web.Request,
    *,
    error: str | None = None,
    notice: str | None = None,
    status: int = 200,
    next_: str = "/ui",
) -> web.Response:
    """The login page with a fresh login CSRF token, also set as the ``sb_login`` cookie."""
    csrf = secrets.token_urlsafe(32)
    body = h(
        '<section class="card login"><h1>Log in</h1>'
        '<form method="post" action="/ui/login">'
        '<input type="hidden" name="csrf" value="{csrf}">{next}{token}'
        '<p class="hint">The <code>sbo_</code> token printed by <code>switchboard human add</code>. '
        "It is exchanged for a session cookie and not kept by your browser.</p>"
        '<button type="submit">Log in</button></form></section>',
        csrf=csrf,
        next=hidden("next", next_) if next_ != "/ui" else "",
        token=secret_field("token", "Personal token", required=True, autofocus=True, placeholder="sbo_…"),
    )
    response = page("Log in", body, None, status=status, error=error, notice=notice)
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


def _user_agent(request: web.Request) -> str | None:
    """The browser's own description, for the session list: printable characters only, cut short."""
    text = "".join(c for c in request.headers.get("User-Agent", "") if c.isprintable())
    return text.strip()[:USER_AGENT_MAX] or None


@outage_page
async def login_form(request: web.Request) -> web.StreamResponse:
    next_ = safe_next(request.query.get("next"))
    if await load_viewer(request) is not None:
        raise web.HTTPSeeOther(next_)
    logged_out = request.cookies.get(LOGGED_OUT_COOKIE) == "1"
    response = _login_response(request, notice=NOTICES["logged_out"] if logged_out else None, next_=next_)
    if logged_out:
        response.del_cookie(LOGGED_OUT_COOKIE, path="/ui/login")
    return response


@outage_page
async def login(request: web.Request) -> web.StreamResponse:
    services = services_of(request)
    try:
        form = await read_form(request)
    except SwitchboardError as exc:
        return _login_response(request, error=exc.message, status=exc.http_status)
    next_ = safe_next(form.get("next"))
    expected = request.cookies.get(LOGIN_COOKIE, "")
    if (
        not expected
        or not expected.isascii()
        or not hmac.compare_digest(form.get("csrf", "").encode(), expected.encode())
    ):
        return _login_response(
            request,
            error="The login form expired or was not sent from this page. Try again.",
            status=403,
            next_=next_,
        )
    token = form.get("token", "").strip()
    human = await tenancy.human_by_token(services.db, token) if token else None
    if human is None:
        # Never echo the token back, not even a wrong one.
        return _login_response(request, error="That token is not valid.", status=401, next_=next_)
    raw = new_token("sbw")
    now = utcnow()
    async with services.db.write() as s:
        # Again under the human's row lock: a rotation or revocation that committed since the read
        # above has ended every session, and must not be outlived by one opened with the old token.
        still = await s.scalar(
            select(Human.id)
            .where(Human.id == human.id, Human.token_hash == token_hash(token), Human.revoked_at.is_(None))
            .with_for_update()
        )
        if still is None:
            return _login_response(request, error="That token is not valid.", status=401, next_=next_)
        s.add(
            WebSession(
                id_hash=token_hash(raw),
                ref=new_id("ws"),
                human_id=human.id,
                csrf_token=secrets.token_urlsafe(32),
                created_at=now,
                expires_at=now + SESSION_TTL,
                last_seen_at=now,
                user_agent=_user_agent(request),
            )
        )
    log.info("web login: human %s", human.handle)
    response = web.HTTPSeeOther(next_)
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


async def logout(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    async with services.db.write() as s:
        await s.execute(delete(WebSession).where(WebSession.id_hash == viewer.session_hash))
    response = web.HTTPSeeOther("/ui/login")
    response.set_cookie(
        LOGGED_OUT_COOKIE,
        "1",
        path="/ui/login",
        max_age=60,
        httponly=True,
        samesite="Strict",
        secure=_secure(services),
    )
    response.del_cookie(
        session_cookie_name(services), path="/", secure=_secure(services), httponly=True, samesite="Strict"
    )
    raise response
