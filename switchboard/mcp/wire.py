"""Whether a tool result can go on the wire, and what to send when it cannot.

The SDK serialises a result only after the tool has returned, and a value it cannot write (nesting
deeper than its serialiser's limit, about 250 levels; a lone surrogate) fails there as a JSON-RPC
internal error: the tool's effects stand, but the agent never learns them. A claim would then be
held behind the agent's back. Ingest keeps such payloads as text (``sanitize.storable``); these
checks cover what was stored before that, or by other paths, and an agent's own ``result``.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from pydantic_core import PydanticSerializationError

from switchboard.sanitize import kept_as_text

# The reason a payload or result sent as text carries (``kept_as_text``).
UNSENDABLE = "could not be sent over MCP as a structure (nested too deeply or not encodable)"
# The keys of a todo view that hold sender or agent data.
_DATA_KEYS = ("payload", "result")


def writable(answer: types.CallToolResult) -> bool:
    """Whether the SDK can write ``answer`` (serialised as it will be: this fails exactly when the
    SDK's own dump, or its JSON encoding of that dump, would) and what it writes is ``answer``: a
    NaN or Infinity (a todo stored before ingest kept those as text) the SDK writes as ``null``,
    silently, so such an answer is not writable either and its data goes as text."""
    try:
        answer.model_dump_json(by_alias=True, exclude_none=True)
        json.dumps(answer.structured_content, allow_nan=False, default=str)
    except (PydanticSerializationError, RecursionError, ValueError):
        return False
    return True


# Fewer opening brackets than this in a result's JSON text, and it cannot nest anywhere near as
# deep as the SDK's serialiser refuses (about 250 levels, counting the answer's own envelope).
_SHALLOW_BRACKETS = 200


def plainly_writable(text: str) -> bool:
    """Whether a result whose standard JSON text (no ``default``) is ``text`` is certainly
    writable, without the SDK's own dump (``writable``): it is shallow by its brackets and has no
    lone surrogate. The dump, on a tool's every answer, was most of the cost of checking; this
    answers for nearly every result, and ``writable`` decides the rest."""
    if text.count("{") + text.count("[") >= _SHALLOW_BRACKETS:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_view(value: dict[str, Any]) -> bool:
    return "id" in value and any(k in value for k in _DATA_KEYS)


def _todo_views(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The todo views a result carries: itself (``claim``, ``get_todo``), ``todo`` (``claim_next``)
    and each of ``todos`` (a batch)."""
    views = [result] if _is_view(result) else []
    if isinstance(result.get("todo"), dict):
        views.append(result["todo"])
    views += [t for t in result.get("todos") or () if isinstance(t, dict)]
    return views


def _sendable(view: dict[str, Any]) -> bool:
    # Checked where a view sits deepest in any result (an item of a batch's "todos"), so one that
    # passes here passes wherever it is.
    return writable(types.CallToolResult(content=[], structured_content={"todos": [view]}))


def data_as_text(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with the payload and result of each carried todo that cannot be sent as they are
    sent as text instead; the other todos of a batch, and everything else, as is."""

    def fix(view: dict[str, Any]) -> dict[str, Any]:
        if _sendable(view):
            return view
        sent = {k: kept_as_text(view[k], UNSENDABLE) for k in _DATA_KEYS if view.get(k) is not None}
        return {**view, **sent}

    out = fix(result) if _is_view(result) else dict(result)
    if isinstance(out.get("todo"), dict):
        out["todo"] = fix(out["todo"])
    if isinstance(out.get("todos"), list):
        out["todos"] = [fix(t) if isinstance(t, dict) else t for t in out["todos"]]
    return out


def claims_in(result: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(todo id, lease token) of every claimed todo a result carries."""
    return [
        (view["id"], view.get("lease_token"))
        for view in _todo_views(result)
        if isinstance(view.get("id"), str) and view.get("state") == "claimed"
    ]
