"""The one hook a provider implements: ``register_kinds(register)``.

As in llm's ``register_models``, the hook hands the host the objects that carry a kind's behaviour
(``SourceKind``: ``verify``, ``derive_address``, ``echo_clues``; ``ConnectionKind``: ``post``,
``test``, …). The core then calls those objects itself, only for their own kind, so a provider never
sees another kind's traffic and never checks ``delivery.source``.

Any other ``@hookimpl`` in a plugin is a misspelling or a hook of the 0.1 contract (``verify``,
``derive_address``, ``is_echo``, ``post_reply``): the loader refuses the plugin and says so.
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

from switchboard.provider import ConnectionKind, SourceKind

hookspec = pluggy.HookspecMarker("switchboard")
hookimpl = pluggy.HookimplMarker("switchboard")


@hookspec
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    """Describe your kinds: call ``register`` with a ``SourceKind`` for each webhook source you verify
    and a ``ConnectionKind`` for each outbound credential you post with."""
