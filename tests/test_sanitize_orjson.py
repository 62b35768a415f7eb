"""Ingest's JSON through orjson (issue 12 item 3) means exactly what the standard library made of it.

``provider.json_object`` parses a body with orjson only where the answer is the standard library's
(NaN, lone surrogates, integers past 64 bits, a byte order mark, UTF-16 and deep nesting go to the
standard library), and ``sanitize.storable_encoded`` writes the stored payload with orjson only
where the bytes mean what the standard library would have written: the same characters except
a float's digits, the same depth bound, NaN and Infinity still kept as text, and a value JSON cannot
carry still refused. Each case is compared with the standard library itself, never with a constant.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import math
import time
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from switchboard.provider import _has_exponent, json_object
from switchboard.sanitize import (
    _FRESH,
    MAX_PAYLOAD_DEPTH,
    NOT_FINITE,
    TOO_DEEP,
    _deeper,
    _nests_deeper,
    _orjson_encoded,
    _within,
    read_from,
    storable_encoded,
)
from switchboard.todos import encode_payload

FIXTURES = Path(__file__).parent / "fixtures"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _typed(value: Any) -> list[Any]:
    """``value`` as a flat list of tokens with every scalar's type made visible, so 1, 1.0 and
    True never compare equal and NaN equals NaN (``==`` hides both). Iterative: some values here
    nest deeper than Python's recursion limit."""
    tokens: list[Any] = []
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            tokens.append(("dict", len(node)))
            for key, child in reversed(node.items()):
                stack.extend((child, ("key", key)))
        elif isinstance(node, list):
            tokens.append(("list", len(node)))
            stack.extend(reversed(node))
        elif isinstance(node, float) and math.isnan(node):
            tokens.append(("float", "nan"))
        elif isinstance(node, tuple) and node[:1] == ("key",):
            tokens.append(node)
        else:
            tokens.append((type(node).__name__, node))
    return tokens


def _stdlib_json_object(body: bytes) -> Any:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _nested(depth: int, inner: str = "1") -> str:
    return '{"a":' * depth + inner + "}" * depth


# ---------------------------------------------------------------------------------------------
# Parsing: json_object reads every body as the standard library does


@pytest.mark.parametrize(
    "body",
    [
        b'{"score": NaN, "range": [Infinity, -Infinity]}',
        b'{"big": 123456789012345678901234567890, "neg": -9223372036854775809}',
        b'{"edge": 18446744073709551615, "low": -9223372036854775808}',
        b'{"overflow": 1e400, "under": 1e-400, "tiny": 5e-324}',
        b'{"lone": "\\ud800", "pair": "\\ud83d\\ude00", "nul": "\\u0000"}',
        b'\xef\xbb\xbf{"bom": true}',
        '{"utf16": "é"}'.encode("utf-16"),
        '{"utf32": 1}'.encode("utf-32-le"),
        b'{"a": 1, "b": 2, "a": 3}',
        b' \t\r\n{"ws": []} \n',
        b'{"text": "digits 12345678901234567890 in a string"}',
        b'{"text": "e+ in a string, and 1e+5", "n": 5}',
        b'{"text": "e+ in a string", "deep": [1, {"n": 12345678901234567890123}]}',
        b'{"nested": [[{"n": 18446744073709551616}]], "float": 2.5}',
        b'{"exp": 1e+20, "big": 1.5E300, "int": 9223372036854775807}',
        b'{"float": 1.0, "int": 1, "neg0": -0, "negf": -0.0, "exp": 1E2}',
        _nested(1500).encode(),
        _nested(1000).encode(),
        _nested(700).encode(),
        _nested(400).encode(),
        _nested(300).encode(),
        _nested(255).encode(),
        _nested(MAX_PAYLOAD_DEPTH + 1).encode(),
        _nested(MAX_PAYLOAD_DEPTH).encode(),
        ("[" + ",".join(['{"a":[1]}'] * 1000) + "]").encode(),
        ("[" + ",".join(["{}"] * 600) + "]").encode(),
        b'[{"not": "an object"}]',
        b'{"bad": "\xff"}',
        b'{"trailing": 1,}',
        b"",
    ],
)
def test_json_object_reads_each_body_as_the_standard_library(body: bytes) -> None:
    assert _typed(json_object(body)) == _typed(_stdlib_json_object(body))


@SETTINGS
@given(
    number=st.one_of(st.integers(max_value=-(2**63) - 1), st.integers(min_value=2**64)).filter(
        lambda n: len(str(n)) < 300
    )
)
def test_orjson_writes_an_integer_it_read_as_a_float_with_an_exponent(number: int) -> None:
    """What ``provider._json_value`` rests on: an integer past 64 bits comes back from orjson as
    a float, and orjson writes that float with ``e+`` (so a reading without ``e+`` is exact)."""
    value = orjson.loads(f'{{"n": [{number}]}}')
    assert isinstance(value["n"][0], float)
    assert b"e+" in orjson.dumps(value, option=orjson.OPT_INDENT_2)


@pytest.mark.parametrize(
    ("written", "found"),
    [
        (b"", False),
        (b"+", False),
        (b"e+", True),
        (b'{"a": "x+y", "b": "a+", "c": 1}', False),
        (b'{"a": "x+y", "b": 1.8446744073709552e+19}', True),
        (b'{"a": "one+", "b": "time+"}', True),
        (b'{"a": "++e", "b": "+e+"}', True),
        (b'{"a": "' + b"x+" * 16 + b'"}', False),
    ],
)
def test_the_exponent_search_finds_e_plus_wherever_it_is(written: bytes, found: bool) -> None:
    assert _has_exponent(written) is found
    assert _has_exponent(written) is (b"e+" in written)


def test_many_plus_signs_go_to_the_digit_check_rather_than_a_python_loop() -> None:
    """Past 16 ``+`` the search gives up (True: maybe) and the one C pass of the digit check decides:
    5 MiB of ``+`` in a string took a second of the event loop one ``+`` at a time."""
    assert _has_exponent(b'{"a": "' + b"x+" * 17 + b'"}') is True
    body = b'{"a": "' + b"+" * (5 * 1024 * 1024 - 20) + b'", "n": 12345678901234567890123}'
    started = time.process_time()
    value = json_object(body)
    assert time.process_time() - started < 0.5
    assert _typed(value) == _typed(_stdlib_json_object(body))
    plain = b'{"a": "' + b"+" * 100_000 + b'", "n": 1}'
    assert _typed(json_object(plain)) == _typed(_stdlib_json_object(plain))


json_texts = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=25,
).map(lambda v: json.dumps({"v": v}, ensure_ascii=False))


@SETTINGS
@given(text=json_texts, ascii_only=st.booleans())
def test_json_object_agrees_with_the_standard_library_on_any_json(text: str, ascii_only: bool) -> None:
    body = (json.dumps(json.loads(text)) if ascii_only else text).encode("utf-8", "surrogatepass")
    assert _typed(json_object(body)) == _typed(_stdlib_json_object(body))


# ---------------------------------------------------------------------------------------------
# Storing: the orjson bytes where they mean the same, the standard library's path otherwise


def _fixture_payloads() -> list[Any]:
    return [json.loads(p.read_bytes()) for p in sorted((FIXTURES / "github").glob("*/*.json"))]


def test_real_payloads_are_stored_as_the_same_bytes_through_orjson() -> None:
    payloads = _fixture_payloads()
    assert payloads
    for payload in payloads:
        fast = _orjson_encoded(payload)
        assert fast is not None, "a webhook payload takes the fast path"
        assert storable_encoded(payload) == (payload, encode_payload(payload))


@SETTINGS
@given(text=json_texts)
def test_a_payload_just_read_from_its_body_is_stored_as_the_checked_path_stores_it(text: str) -> None:
    """A payload orjson has just read is not read back (``sanitize.read_by_orjson``): its stored
    form is still what the checked path makes of an equal copy, NaN, depth and all."""
    value = json_object(text.encode("utf-8", "surrogatepass"))
    if value is None:
        return
    copied = copy.deepcopy(value)
    kept, encoded = storable_encoded(value)
    checked_kept, checked = storable_encoded(copied)
    assert _typed(kept) == _typed(checked_kept)
    assert _typed(json.loads(encoded)) == _typed(json.loads(checked))


@SETTINGS
@given(text=json_texts)
def test_a_body_read_as_it_came_is_itself_the_payloads_stored_form(text: str) -> None:
    """When ``read_from`` says so, ingest stores the body's own bytes instead of writing the payload
    (``Todo.payload`` null): they must read back as the checked path's stored form would."""
    body = text.encode("utf-8", "surrogatepass")
    value = json_object(body)
    if value is None or not read_from(value, body):
        return
    kept, checked = storable_encoded(copy.deepcopy(value))
    assert kept == value, "a payload the body stores as it is needs no change to be stored"
    assert _typed(json.loads(body)) == _typed(json.loads(checked)) == _typed(orjson.loads(body))


@pytest.mark.parametrize(
    "body",
    [
        _nested(MAX_PAYLOAD_DEPTH + 1).encode(),  # kept as text
        b'{"n": 123456789012345678901234567890}',  # read by the standard library
        b'{"s": "\\ud800"}',  # a lone surrogate: the standard library's, then U+FFFD
        b"\xef\xbb\xbf{}",  # a byte order mark
    ],
)
def test_a_body_that_is_not_stored_as_it_came_is_not_read_from(body: bytes) -> None:
    value = json_object(body)
    assert value is not None and not read_from(value, body)


@pytest.mark.parametrize("depth", [MAX_PAYLOAD_DEPTH, MAX_PAYLOAD_DEPTH + 1])
def test_a_payload_just_read_is_still_kept_as_text_when_too_deep(depth: int) -> None:
    value = json_object(_nested(depth).encode())
    kept, _ = storable_encoded(value)
    assert (kept.get("kept_as_text") == TOO_DEEP) is (depth > MAX_PAYLOAD_DEPTH)


@pytest.mark.parametrize("depth", [1, MAX_PAYLOAD_DEPTH, MAX_PAYLOAD_DEPTH + 1, 254, 255, 300, 499])
def test_a_body_just_read_is_stored_by_its_depth(depth: int) -> None:
    """Whether the reader judged its depth (orjson's writing refuses 255 levels) or left it to
    ``storable_encoded``, a payload within the limit is stored as it came and a deeper one as text."""
    body = _nested(depth).encode()
    value = json_object(body)
    kept, encoded = storable_encoded(value)
    if depth <= MAX_PAYLOAD_DEPTH:
        assert kept is value and encoded == encode_payload(json.loads(body))
    else:
        assert kept["kept_as_text"] == TOO_DEEP and json.loads(kept["body"]) == json.loads(body)


def test_a_wide_shallow_body_is_read_by_orjson_however_many_brackets_it_has() -> None:
    """Two thousand brackets, three levels: read by orjson (noted as such, so it is stored without
    being read back) and equal to the standard library's reading."""
    body = ('{"items":[' + ",".join(['{"a":[1]}'] * 1000) + "]}").encode()
    value = json_object(body)
    assert _FRESH.get() == (value, True, body)
    assert read_from(value, body) and not read_from(value, bytes(bytearray(body)))
    assert value == json.loads(body)
    kept, encoded = storable_encoded(value)
    assert kept is value and encoded == encode_payload(value)


def test_real_payloads_just_read_are_stored_as_the_standard_library_writes_them() -> None:
    for path in sorted((FIXTURES / "github").glob("*/*.json")):
        value = json_object(path.read_bytes())
        assert value is not None
        kept, encoded = storable_encoded(value)
        assert kept is value and encoded == encode_payload(json.loads(path.read_bytes()))


def test_values_orjson_would_write_otherwise_take_the_standard_path() -> None:
    class Colour(enum.Enum):
        RED = "red"

    class Size(enum.IntEnum):
        ONE = 1

    class Name(str):
        pass

    @dataclasses.dataclass
    class Point:
        x: int

    # orjson writes NaN as null and these as something; the standard path keeps NaN as text.
    nan = {"x": float("nan"), "y": [float("inf")]}
    assert _orjson_encoded(nan) is None
    assert storable_encoded(nan)[0]["kept_as_text"] == NOT_FINITE
    for refused in ({"u": uuid.uuid4()}, {"c": Colour.RED}, {"d": datetime.now(UTC)}, {"p": Point(1)}):
        assert _orjson_encoded(refused) is None
        with pytest.raises(TypeError):
            storable_encoded(refused)
    # What the standard library writes, it still writes: int and str subclasses, tuples, int keys,
    # big integers and lone surrogates (replaced).
    for odd in (
        {"s": Size.ONE, "n": Name("ada")},
        {"t": (1, 2)},
        {1: "one"},
        {"big": 2**80},
        OrderedDict(a=1),
        ["\ud800"],
    ):
        assert _orjson_encoded(odd) is None
        cleaned, encoded = storable_encoded(odd)
        assert encoded == encode_payload(cleaned)
    assert storable_encoded(["\ud800"])[0] == ["\ufffd"]


def test_floats_keep_their_value_though_their_digits_may_be_written_otherwise() -> None:
    payload = {"small": 1e-7, "big": 1e16, "plain": 0.5, "neg0": -0.0, "max": 1.7976931348623157e308}
    kept, encoded = storable_encoded(payload)
    assert kept is payload
    assert _typed(json.loads(encoded)) == _typed(json.loads(encode_payload(payload)))


@pytest.mark.parametrize("depth", [MAX_PAYLOAD_DEPTH - 1, MAX_PAYLOAD_DEPTH, MAX_PAYLOAD_DEPTH + 1, 200, 300])
def test_the_depth_bound_is_the_same_on_both_paths(depth: int) -> None:
    payload = json.loads(_nested(depth))
    kept, encoded = storable_encoded(payload)
    if depth <= MAX_PAYLOAD_DEPTH:
        assert kept is payload and encoded == encode_payload(payload)
    else:
        assert kept == {"body": _nested(depth), "kept_as_text": TOO_DEEP}


# Strings that look like structure: brackets, quotes and backslashes, escaped in the JSON text.
# A raw line break too: indented output must not mistake one in a string for a line of its own.
tricky_text = st.text(st.sampled_from([*'[]{}"\\\\n ab', "\n"]), max_size=8)


def _nesting_strategy() -> st.SearchStrategy[Any]:
    leaves = st.none() | st.integers(-5, 5) | tricky_text
    return st.recursive(
        leaves,
        lambda children: st.lists(children, max_size=3) | st.dictionaries(tricky_text, children, max_size=3),
        max_leaves=30,
    )


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@SETTINGS
@given(value=_nesting_strategy(), limit=st.integers(0, 8), wrap=st.integers(0, 70))
def test_nesting_read_from_the_bytes_is_the_structures_own(value: Any, limit: int, wrap: int) -> None:
    for _ in range(wrap):
        value = [value] if wrap % 2 else {'k[{"': value}
    encoded = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    assert _nests_deeper(encoded, limit) == (_depth(value) > limit)
    if isinstance(value, dict | list):
        assert _deeper(value, limit=limit) == (_depth(value) > limit)
        if limit >= 1:
            assert _within(value, orjson.dumps(value), limit) == (_depth(value) <= limit)


@pytest.mark.parametrize("limit", [1, 2, 64])
@pytest.mark.parametrize("shape", ["list", "dict", "empty", "keyed"])
def test_the_indented_bound_holds_right_at_the_limit(limit: int, shape: str) -> None:
    """At ``limit`` levels and one more, for every way a level can open: an array element, an
    object member, an empty container, a key that is itself bracket-shaped."""
    for depth in (limit - 1, limit, limit + 1):
        value: Any = {} if shape == "empty" else 1
        for level in range(depth - (1 if shape == "empty" else 0)):
            value = {"k{": value} if shape == "keyed" or (shape == "dict" and level % 2) else [value]
        if not isinstance(value, dict | list):
            continue
        assert _within(value, orjson.dumps(value), limit) == (_depth(value) <= limit)
