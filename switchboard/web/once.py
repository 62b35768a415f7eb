"""What a page shows once and a reload cannot bring back: a new secret (reveal), and the notice an
action leaves for the next page (flash). Both live on the session's row, never in a URL.

A reveal: the POST that makes a token or secret (vend an endpoint, create a webhook, rotate its
secret, rotate your own token) seals what the next page shows onto this session's row and answers
``303``; the GET it points to takes it off the row in the same transaction that reads it and shows
it once. A reload, the back button or any later visit finds nothing (``410``), and cannot repeat the
action either: the action was the POST, which the browser does not send again after a redirect.
The seal's key is derived from the session cookie, which the server never stores, so the database
alone cannot open it; an unopened reveal also expires after a few minutes.

A flash: a handler that redirects names a fixed notice (``forms.see_other(location, "key")``);
``session.authed`` stores the key on the session's row once the action has committed, and the next
page this session loads takes it (``html.notice_of``). A ``?done=`` in a hand-made URL shows nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import select, update

from switchboard.db import utcnow
from switchboard.models import WebSession
from switchboard.services import services_of
from switchboard.web.html import NOTICES

if TYPE_CHECKING:
    from switchboard.web.session import Viewer

REVEAL_TTL = timedelta(minutes=5)
_NONCE = 12


# ---------------------------------------------------------------------------------------------
# Reveals, sealed to this session's cookie


def _key(cookie: str) -> bytes:
    return hmac.new(cookie.encode(), b"switchboard account reveal", hashlib.sha256).digest()


def _aad(session_hash: str) -> bytes:
    return f"switchboard:web_sessions:reveal:{session_hash}".encode()


def seal(cookie: str, session_hash: str, what: str, shown: dict[str, Any]) -> bytes:
    """``shown`` (what the reveal page needs, JSON) sealed for this session, marked ``what`` it is."""
    plain = json.dumps({"what": what, "expires": int((utcnow() + REVEAL_TTL).timestamp()), "shown": shown})
    nonce = os.urandom(_NONCE)
    return nonce + AESGCM(_key(cookie)).encrypt(nonce, plain.encode(), _aad(session_hash))


def unseal(cookie: str, session_hash: str, blob: bytes) -> tuple[str, dict[str, Any]] | None:
    """``(what, shown)``, or None when it cannot be opened with this cookie or its minutes are over."""
    try:
        plain = AESGCM(_key(cookie)).decrypt(blob[:_NONCE], blob[_NONCE:], _aad(session_hash))
        data = json.loads(plain)
    except (InvalidTag, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("shown"), dict):
        return None
    if not isinstance(data.get("expires"), int) or data["expires"] <= utcnow().timestamp():
        return None
    return str(data.get("what")), data["shown"]


async def put_reveal(request: web.Request, viewer: Viewer, what: str, shown: dict[str, Any]) -> None:
    """Keep ``shown`` for this session's next reveal page (replacing any unopened one)."""
    blob = seal(viewer.cookie, viewer.session_hash, what, shown)
    async with services_of(request).db.write() as s:
        await s.execute(
            update(WebSession).where(WebSession.id_hash == viewer.session_hash).values(reveal=blob)
        )


async def take_reveal(request: web.Request, viewer: Viewer, what: str) -> dict[str, Any] | None:
    """This session's waiting reveal of kind ``what``, removed from its row as it is read: shown at
    most once. One of another kind stays for its own page."""
    if request.method != "GET":
        # A HEAD (aiohttp answers it with the GET handler) must not use up the one showing: a
        # prefetcher or link checker would take the secret and show it to nobody.
        return None
    async with services_of(request).db.write() as s:
        row = await s.scalar(
            select(WebSession).where(WebSession.id_hash == viewer.session_hash).with_for_update()
        )
        if row is None or row.reveal is None:
            return None
        opened = unseal(viewer.cookie, viewer.session_hash, row.reveal)
        if opened is not None and opened[0] != what:
            return None
        # Opened, expired or unreadable: either way it is gone now.
        row.reveal = None
    return opened[1] if opened is not None else None


def gone_page_text(what: str, again: str) -> str:
    """What the reveal page says on a reload: nothing to show, and how to get a new one."""
    return (
        f"A new {what} is shown once, right after it is made, and not again: reloading this page cannot "
        f"bring it back, and did not repeat what made it. If you did not copy it, {again}."
    )


# ---------------------------------------------------------------------------------------------
# Flash: the notice an action leaves for the next page


class Redirect(web.HTTPSeeOther):
    """A 303 after a POST, carrying the notice (a ``NOTICES`` key) for the page it leads to."""

    def __init__(self, location: str, flash: str | None = None) -> None:
        super().__init__(location)
        self.flash = flash if flash in NOTICES else None


async def put_flash(request: web.Request, viewer: Viewer, key: str) -> None:
    async with services_of(request).db.write() as s:
        await s.execute(update(WebSession).where(WebSession.id_hash == viewer.session_hash).values(flash=key))


async def take_flash(request: web.Request, viewer: Viewer, key: str) -> bool:
    """Take this session's waiting notice (read with the session): True when this request took it,
    so two pages loading at once do not both show it."""
    async with services_of(request).db.write() as s:
        taken = await s.execute(
            update(WebSession)
            .where(WebSession.id_hash == viewer.session_hash, WebSession.flash == key)
            .values(flash=None)
        )
    return bool(getattr(taken, "rowcount", 0))
