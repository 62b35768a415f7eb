"""The hooks a provider implements. Each is called for every provider; answer only for your kinds.

pluggy calls hooks synchronously. The first-result hooks stop at the first answer that is not None,
so a provider must return None *synchronously* for kinds it does not own: an ``async def`` hook
would hand back a coroutine (not None) for every kind and win them all. Hooks that do I/O
(``post_reply``) are plain functions that return an awaitable for their own kind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pluggy

from switchboard.provider import (
    Address,
    ConnectionKind,
    Delivery,
    EchoClues,
    PostResult,
    ReplyPost,
    SourceKind,
    Verdict,
)

hookspec = pluggy.HookspecMarker("switchboard")
hookimpl = pluggy.HookimplMarker("switchboard")


@hookspec
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    """Describe your kinds: call ``register`` with a ``SourceKind`` for each webhook source you verify
    and a ``ConnectionKind`` for each outbound credential you post with."""


@hookspec(firstresult=True)
def verify(delivery: Delivery) -> Verdict | None:
    """Check ``delivery`` (raw bytes, headers, secret) for ``delivery.source`` in constant time and
    read it into a ``Verdict``; None if the source is not yours. Never raise on bad input."""


@hookspec(firstresult=True)
def derive_address(delivery: Delivery, verdict: Verdict) -> Address | None:
    """The reply address of a *verified* delivery of your source, or None (not yours, not a
    conversation, or any field outside its strict charset: never a cleaned-up address)."""


@hookspec(firstresult=True)
def is_echo(delivery: Delivery, verdict: Verdict) -> EchoClues | None:
    """What in this verified delivery could make it Switchboard's own reply (posted object ids, a
    reply marker, the posting bot); the core matches the clues against recorded replies. Return
    ``EchoClues()`` for your source when there is nothing, None for other sources."""


@hookspec(firstresult=True)
def post_reply(post: ReplyPost) -> Awaitable[PostResult] | None:
    """For ``post.kind`` yours: an awaitable that posts ``post.text`` once to ``post.address`` through
    ``post.http`` and reports the outcome. Add the invisible marker naming ``post.reply_id``. Never
    put a provider response body in the result. None for other kinds."""
