"""Your account (``/ui/account``): rotate your own token, and see and end your web sessions.

Rotating asks for the current token once more, so a stolen session cookie cannot be turned into a
token of its own (and the human who lost their token asks the operator: ``switchboard human
rotate``). It ends every other web session of the human; this one is kept, because it is the one
that shows the new token.

The new token is shown once, and a reload cannot show it again: the POST stores it sealed on this
session's row and redirects (``303``) to ``/ui/account/token``, which takes it off the row in the
same transaction that reads it. The seal's key is derived from the session cookie, which the server
never stores, so the database alone cannot open it; an unopened reveal also expires after a few
minutes. The old token never reaches a page, a log line or the database.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from datetime import timedelta

from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import select

from switchboard import humans
from switchboard.db import utcnow
from switchboard.errors import SwitchboardError, invalid
from switchboard.models import Human, WebSession
from switchboard.services import services_of
from switchboard.web.forms import see_other, shows_refusals
from switchboard.web.html import (
    EMPTY,
    MUTED_DASH,
    FormRefusal,
    Safe,
    action_form,
    badge,
    card_form,
    h,
    kv,
    mono,
    page,
    path_part,
    reveal_page,
    secret_field,
    section,
    table,
    when,
)
from switchboard.web.session import Viewer, logout, session_cookie_name

log = logging.getLogger("switchboard.web")

REVEAL_TTL = timedelta(minutes=5)
_NONCE = 12

# ``?done=`` notices of this page (fixed texts: the URL never carries user text into the page).
NOTICES = {
    "session_ended": "Session ended. That browser is logged out.",
    "sessions_ended": "Every other session ended. Only this browser is still logged in.",
}


# ---------------------------------------------------------------------------------------------
# The one-time reveal, sealed to this session's cookie


def _cookie(request: web.Request) -> str:
    return request.cookies.get(session_cookie_name(services_of(request)), "")


def _key(cookie: str) -> bytes:
    return hmac.new(cookie.encode(), b"switchboard account reveal", hashlib.sha256).digest()


def _aad(session_hash: str) -> bytes:
    return f"switchboard:web_sessions:reveal:{session_hash}".encode()


def seal(cookie: str, session_hash: str, token: str) -> bytes:
    expires = int((utcnow() + REVEAL_TTL).timestamp())
    nonce = os.urandom(_NONCE)
    return nonce + AESGCM(_key(cookie)).encrypt(nonce, f"{expires}:{token}".encode(), _aad(session_hash))


def unseal(cookie: str, session_hash: str, blob: bytes) -> str | None:
    """The token, or None when it cannot be opened with this cookie or its few minutes are over."""
    try:
        plain = AESGCM(_key(cookie)).decrypt(blob[:_NONCE], blob[_NONCE:], _aad(session_hash)).decode()
    except (InvalidTag, ValueError):
        return None
    expires, _, token = plain.partition(":")
    return token if expires.isdigit() and int(expires) > utcnow().timestamp() else None


async def _take_reveal(request: web.Request, viewer: Viewer) -> str | None:
    """This session's waiting token, removed from its row as it is read: shown at most once."""
    async with services_of(request).db.write() as s:
        row = await s.scalar(
            select(WebSession).where(WebSession.id_hash == viewer.session_hash).with_for_update()
        )
        if row is None or row.reveal is None:
            return None
        blob, row.reveal = row.reveal, None
    return unseal(_cookie(request), viewer.session_hash, blob)


# ---------------------------------------------------------------------------------------------
# The page


def _session_row(viewer: Viewer, row: WebSession) -> Safe:
    current = hmac.compare_digest(row.id_hash, viewer.session_hash)
    end = action_form(viewer, f"/ui/account/sessions/{path_part(row.ref)}/end", "End", cls="danger")
    return h(
        '<tr><td class="mono">{ref}{this}</td><td>{created}</td><td>{seen}</td><td>{expires}</td>'
        "<td>{agent}</td><td>{end}</td></tr>",
        ref=row.ref,
        this=h(" {b}", b=badge("this session", "ok")) if current else EMPTY,
        created=when(row.created_at),
        seen=when(row.last_seen_at),
        expires=when(row.expires_at),
        agent=row.user_agent or MUTED_DASH,
        end=EMPTY if current else end,
    )


async def account_page(request: web.Request, viewer: Viewer, refusal: FormRefusal | None) -> web.Response:
    services = services_of(request)
    async with services.db.read() as s:
        human = await s.get(Human, viewer.human_id)
    if human is None:  # removed since this request's session was read
        raise web.HTTPSeeOther("/ui/login")
    sessions = await humans.list_sessions(services.db, viewer.human_id)
    facts = kv(
        [
            ("handle", mono(human.handle)),
            ("email", human.email or MUTED_DASH),
            ("token", mono(human.token_display)),
            ("token issued", when(human.token_rotated_at or human.created_at)),
        ]
    )
    rotate = card_form(
        viewer,
        "/ui/account/rotate",
        h(
            "<h3>Rotate your token</h3>"
            "<p>You get a new <code>sbo_</code> token, shown once on the next page. The current one stops "
            "working at once, and every other browser logged in as you is logged out.</p>{field}",
            field=secret_field(
                "token",
                "Your current token",
                required=True,
                placeholder="sbo_…",
                note="Asked again so that a stolen session cannot mint a token of its own. Lost it? "
                "The operator can issue a new one (switchboard human rotate).",
            ),
        ),
        "Rotate my token",
    )
    others = any(not hmac.compare_digest(r.id_hash, viewer.session_hash) for r in sessions)
    end_others = (
        action_form(viewer, "/ui/account/sessions/end-others", "End all other sessions", cls="danger")
        if others
        else EMPTY
    )
    body = h(
        '<h1>Your account</h1><section class="card">{facts}</section>{rotate}{sessions}',
        facts=facts,
        rotate=rotate,
        sessions=section(
            "Web sessions",
            h('<p class="hint">Browsers logged in as you. Last seen is refreshed every few minutes.</p>'),
            table(
                ("Session", "Logged in", "Last seen", "Expires", "Browser", ""),
                (_session_row(viewer, row) for row in sessions),
                empty="No sessions.",
            ),
            end_others,
        ),
    )
    return page(
        "Account",
        body,
        viewer,
        active="account",
        status=refusal.status if refusal else 200,
        error=refusal.message if refusal else None,
        notice=NOTICES.get(request.query.get("done", "")),
    )


async def account_view(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await account_page(request, viewer, None)


# ---------------------------------------------------------------------------------------------
# Changes


@shows_refusals(account_page)
async def rotate(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    current = viewer.form.get("token", "").strip()
    if not current:
        raise invalid("type your current token to rotate it")
    cookie = _cookie(request)
    try:
        rotated = await humans.rotate_token(
            services_of(request).db,
            human_id=viewer.human_id,
            current_token=current,
            keep_session=viewer.session_hash,
            seal_for_session=lambda token: seal(cookie, viewer.session_hash, token),
        )
    except SwitchboardError as exc:
        if exc.code != "unauthorized":
            raise
        # Never echo what was typed, right or wrong.
        raise SwitchboardError("forbidden", "That is not your current token. Nothing was changed.") from None
    log.info("web: %s rotated their token (%d other sessions ended)", viewer.handle, rotated.sessions_ended)
    raise web.HTTPSeeOther("/ui/account/token")


async def reveal(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    token = await _take_reveal(request, viewer)
    if token is None:
        body = h(
            "<h1>Nothing to show</h1><p>A new token is shown once, right after you rotate it, and not "
            "again: reloading this page cannot bring it back. If you did not copy it, rotate again from "
            '<a href="/ui/account">your account</a> (you need the token you have now), or ask the '
            "operator.</p>"
        )
        return page("Token", body, viewer, active="account", status=410)
    response = reveal_page(
        viewer,
        title="New token",
        heading="Your new token",
        active="account",
        lead="Copy this now. It is shown only this once",
        detail="Switchboard keeps only its hash. Your previous token no longer works, and your other "
        "sessions were logged out.",
        content=h('<code class="secret">{t}</code>', t=token),
        facts=[("handle", viewer.handle)],
    )
    response.set_status(200)
    return response


async def end_session(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    services = services_of(request)
    ended = await humans.end_session(services.db, viewer.human_id, request.match_info["ref"])
    if hmac.compare_digest(ended.id_hash, viewer.session_hash):
        # Not offered on the page (that is Log out), but a hand-made POST means the same.
        return await logout(request, viewer)
    raise see_other("/ui/account", "session_ended")


async def end_other_sessions(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    count = await humans.end_sessions(services_of(request).db, viewer.human_id, keep=viewer.session_hash)
    log.info("web: %s ended %d other sessions", viewer.handle, count)
    raise see_other("/ui/account", "sessions_ended")
