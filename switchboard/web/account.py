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

import hmac
import logging

from aiohttp import web

from switchboard import humans
from switchboard.errors import SwitchboardError, invalid
from switchboard.models import Human, WebSession
from switchboard.services import services_of
from switchboard.web.confirm import confirm_link, confirm_page
from switchboard.web.forms import ask_first, see_other, shows_refusals
from switchboard.web.html import (
    EMPTY,
    MUTED_DASH,
    FormRefusal,
    Safe,
    badge,
    card_form,
    h,
    kv,
    mono,
    notice_of,
    page,
    path_part,
    reveal_page,
    secret_field,
    section,
    table,
    when,
)
from switchboard.web.once import gone_page_text, seal, take_reveal
from switchboard.web.session import Viewer, logout

log = logging.getLogger("switchboard.web")


# ---------------------------------------------------------------------------------------------
# The page


def _session_row(viewer: Viewer, row: WebSession) -> Safe:
    current = hmac.compare_digest(row.id_hash, viewer.session_hash)
    end = confirm_link(f"/ui/account/sessions/{path_part(row.ref)}/end", "End")
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
        confirm_link("/ui/account/sessions/end-others", "End all other sessions") if others else EMPTY
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
        notice=notice_of(request),
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
    try:
        rotated = await humans.rotate_token(
            services_of(request).db,
            human_id=viewer.human_id,
            current_token=current,
            keep_session=viewer.session_hash,
            seal_for_session=lambda token: seal(
                viewer.cookie, viewer.session_hash, "token", {"token": token}
            ),
        )
    except SwitchboardError as exc:
        if exc.code != "unauthorized":
            raise
        # Never echo what was typed, right or wrong.
        raise SwitchboardError("forbidden", "That is not your current token. Nothing was changed.") from None
    log.info("web: %s rotated their token (%d other sessions ended)", viewer.handle, rotated.sessions_ended)
    raise web.HTTPSeeOther("/ui/account/token")


async def reveal(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    shown = await take_reveal(request, viewer, "token")
    token = shown.get("token") if shown else None
    if not isinstance(token, str):
        body = h(
            '<h1>Nothing to show</h1><p>{text}</p><p><a href="/ui/account">Your account</a></p>',
            text=gone_page_text(
                "token",
                "rotate again from your account (you need the token you have now), or ask the operator",
            ),
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


async def _own_session(request: web.Request, viewer: Viewer) -> WebSession:
    """The session in the URL, if it is one of the viewer's (another human's is a 404)."""
    ref = request.match_info["ref"]
    rows = await humans.list_sessions(services_of(request).db, viewer.human_id)
    session = next((r for r in rows if r.ref == ref), None)
    if session is None:
        raise SwitchboardError("not_found", f"session {ref!r} not found")
    return session


async def end_session_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    session = await _own_session(request, viewer)
    ref = session.ref
    return confirm_page(
        viewer,
        question="End this session?",
        explain=h(
            "<p>The browser logged in as you with session <code>{ref}</code> ({agent}, last seen {seen}) is "
            "logged out at once. It can log in again with your token.</p>",
            ref=ref,
            agent=session.user_agent or "unknown browser",
            seen=when(session.last_seen_at),
        ),
        action=f"/ui/account/sessions/{path_part(ref)}/end",
        button="Yes, end it",
        back="/ui/account",
        active="account",
    )


async def end_others_confirm(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return confirm_page(
        viewer,
        question="End every other session?",
        explain=Safe(
            "<p>Every browser logged in as you, except this one, is logged out at once. Your token keeps "
            "working; rotate it too if it may have leaked.</p>"
        ),
        action="/ui/account/sessions/end-others",
        button="Yes, end them",
        back="/ui/account",
        active="account",
    )


async def end_session(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    await _own_session(request, viewer)
    ask_first(request, viewer)
    services = services_of(request)
    ended = await humans.end_session(services.db, viewer.human_id, request.match_info["ref"])
    if hmac.compare_digest(ended.id_hash, viewer.session_hash):
        # Not offered on the page (that is Log out), but a hand-made POST means the same.
        return await logout(request, viewer)
    raise see_other("/ui/account", "session_ended")


async def end_other_sessions(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    ask_first(request, viewer)
    count = await humans.end_sessions(services_of(request).db, viewer.human_id, keep=viewer.session_hash)
    log.info("web: %s ended %d other sessions", viewer.handle, count)
    raise see_other("/ui/account", "sessions_ended")
