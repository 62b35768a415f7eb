"""``wire.plainly_writable``: the cheap proof that a tool result can be written, taken instead of
the SDK's own dump. It must never say yes where the dump would fail."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest

from switchboard.mcp import wire
from switchboard.mcp.tools import _writable


def _nested(depth: int) -> Any:
    value: list[Any] = []
    inner = value
    for _ in range(depth - 1):
        child: list[Any] = []
        inner.append(child)
        inner = child
    return value


def _answer(result: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
        structured_content=result,
    )


@pytest.mark.parametrize("depth", [1, 50, 150, 195, 196, 197, 198, 199, 200, 240, 250, 251, 260, 400])
def test_a_plain_yes_is_never_a_result_the_sdk_cannot_write(depth: int) -> None:
    for result in (
        {"todo": {"id": "td_1", "payload": _nested(depth)}},
        {"todos": [{"payload": _nested(depth)}]},
    ):
        text = json.dumps(result, ensure_ascii=False)
        if wire.plainly_writable(text):
            assert wire.writable(_answer(result)), depth
    # Shallow results are proved plainly; deep ones are left to the SDK's dump.
    assert wire.plainly_writable(json.dumps({"payload": _nested(depth)})) is (depth < 199)


def test_a_lone_surrogate_is_not_plainly_writable() -> None:
    result = {"todo": {"id": "td_1", "payload": {"text": "a\ud800b"}}}
    text = json.dumps(result, ensure_ascii=False)
    assert not wire.plainly_writable(text)
    assert not wire.writable(_answer(result))
    assert wire.plainly_writable(json.dumps({"text": "naïve ☃ \U0001f600"}, ensure_ascii=False))


def test_the_answer_is_the_same_whichever_check_decides() -> None:
    plain = {"todo": {"id": "td_1", "payload": {"n": 1, "s": "é"}, "state": "claimed"}}
    answer = _writable(plain)
    assert answer is not None and answer.structured_content == plain
    assert answer.content[0].text == json.dumps(plain, ensure_ascii=False, default=str)  # type: ignore[union-attr]
    # Not plain JSON (bytes): the general check still writes what the SDK can.
    odd = {"todo": {"id": "td_1", "payload": b"x"}}
    answer = _writable(odd)
    assert answer is not None and answer.content[0].text == json.dumps(odd, default=str)  # type: ignore[union-attr]
    deep = {"todo": {"id": "td_1", "payload": _nested(300), "state": "claimed"}}
    assert _writable(deep) is None
