"""Sender-controlled delivery data made safe to store (docs/architecture.md, "What ingest
stores"): one-line columns, payloads that encode as UTF-8 on both engines, bounded delivery keys and
headers with credentials redacted.

Pure functions, no I/O and no project imports: ingest calls them for every delivery and the
property tests call them directly.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, NoReturn

import orjson

# Header names whose values are credentials or signatures: kept on the event as "[redacted]".
_SECRET_HEADER = re.compile(r"signature|authorization|cookie|token|secret|api-?key|password|auth", re.I)
_PRINTABLE_KEY = re.compile(r"[\x21-\x7e]{1,200}")
# Lone surrogates (from JSON "\ud800" escapes or undecodable header bytes) cannot be encoded as UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")
# Payloads nested deeper than this are kept as text (``kept_as_text``). The MCP SDK refuses to
# serialise results about 250 levels deep; no webhook sender's own format comes near this.
MAX_PAYLOAD_DEPTH = 64
TOO_DEEP = f"nested deeper than {MAX_PAYLOAD_DEPTH} levels"
NOT_FINITE = "holds NaN or Infinity, which standard JSON cannot carry"


def refuse_constant(name: str) -> NoReturn:
    """``json.loads``' ``parse_constant``: NaN and Infinity are not JSON (the standard library reads
    them by default)."""
    raise ValueError(f"{name} is not valid JSON")


def finite_float(text: str) -> float:
    """``json.loads``' ``parse_float``: 1e400 reads as infinity, which no JSON answer could carry."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def lone_surrogate(value: Any) -> bool:
    """Whether a string anywhere in ``value`` (lists and dicts, keys included) holds a lone
    surrogate: what a JSON ``\\ud800`` escape or bytes decoded with surrogate escapes (argv, a lenient
    stdin) make. No database and no UTF-8 answer can carry one. Walked without recursion: a parsed
    body may nest as deep as its parser allowed."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                return True
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
    return False


def clean_line(text: object, limit: int) -> str:
    """One printable line for a column: no control characters, no lone surrogates, cut to ``limit``."""
    value = str(text)
    if value.isascii() and value.isprintable() and "  " not in value:
        # Already one clean line (most header values, events and titles): no surrogate, no control
        # character, and no whitespace but single spaces, so only the ends can need trimming.
        value = value.strip(" ")
        return value if len(value) <= limit else value[: limit - 1] + "…"
    value = _SURROGATE.sub("\ufffd", value)
    if not value.isprintable():
        # Only then can it hold a control character (most header values are plain printable text).
        value = "".join(" " if unicodedata.category(c) == "Cc" else c for c in value)
    value = " ".join(value.split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


# The value orjson last read from a request body in this task (``provider.json_object`` marks it),
# the bytes it read it from, and whether it was then seen to nest at most ``MAX_PAYLOAD_DEPTH`` deep
# (``shallow``). A value orjson has just read holds only what JSON carries (no NaN or Infinity: it
# refuses to read them; no lone surrogate: it refuses those too; no integer past 64 bits:
# ``json_object`` leaves those to the standard library), so orjson writes it back exactly:
# ``storable_encoded`` of that very object skips the read-back check, a fifth of ingest's JSON work,
# and the depth check when it was already made (issue 12). Nor need those bytes be written again at
# all (``read_from``). A provider that edits the object in place keeps to JSON's values and depth
# (docs/plugins.md): one that put NaN into it would have it stored as null.
_FRESH: ContextVar[tuple[Any, bool, bytes | None]] = ContextVar(
    "switchboard_fresh_json", default=(None, False, None)
)


def read_by_orjson(value: Any, *, shallow: bool = False, source: bytes | None = None) -> None:
    """Note ``value`` as just read by orjson from ``source`` (``storable_encoded`` trusts it);
    ``shallow``: it was seen to nest at most ``MAX_PAYLOAD_DEPTH`` deep (``within``)."""
    _FRESH.set((value, shallow, source))


def read_from(value: Any, body: bytes) -> bool:
    """Whether ``value`` is what orjson has just read from exactly ``body`` and nests at most
    ``MAX_PAYLOAD_DEPTH`` deep. Then ``body`` itself is a stored encoding of it: JSON that every
    reader reads back as ``value`` (UTF-8, no lone surrogate, NaN or integer past 64 bits), in the
    sender's own whitespace, which ingest keeps instead of writing a copy (``Todo.payload``)."""
    fresh, shallow, source = _FRESH.get()
    return shallow and value is fresh and source is body


def indented(value: Any) -> bytes | None:
    """orjson's writing of ``value`` with two spaces of indent per level (what ``within`` reads), or
    None when orjson cannot write it (it refuses 255 levels and more)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | ORJSON_REFUSES)
    except orjson.JSONEncodeError:
        return None


def within(indented: bytes, limit: int = MAX_PAYLOAD_DEPTH) -> bool:
    """Whether the value orjson wrote as ``indented`` surely nests at most ``limit`` deep.

    Written with two spaces of indent per level, a value inside n open arrays and objects starts
    its line with 2n spaces, and a string never holds a raw line break (JSON escapes it). So the
    bracket that opens level ``limit + 1`` starts, or follows the key of, a line indented by
    ``2 * limit`` spaces: without such a line the value is within the limit. Writing it again
    indented and searching it took 10 µs where ``_nests_deeper`` took 24 on a 28 KB GitHub payload
    (issue 12). False when there is such a line."""
    return b"\n" + b" " * (2 * limit) not in indented


def storable(payload: Any) -> Any:
    """The payload as it is stored: lone surrogates replaced, so it encodes as UTF-8 on both
    engines, and kept as text when too deep or not finite (``storable_encoded``)."""
    return storable_encoded(payload)[0]


def storable_encoded(payload: Any) -> tuple[Any, bytes]:
    """``storable(payload)`` and its stored encoding (compact UTF-8 JSON, what
    ``todos.encode_payload`` makes), from one JSON encoding in the usual case: every todo of a
    delivery shares the bytes.

    A payload nested deeper than ``MAX_PAYLOAD_DEPTH`` or holding NaN/Infinity is kept whole as
    text instead (``kept_as_text``): stored as a structure, it would be a todo that no agent can
    receive (MCP cannot serialise it) or that the API would answer as non-standard JSON.
    """
    fast = _orjson_encoded(payload)
    if fast is not None:
        return payload, fast
    try:
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        return _encoded(kept_as_text(payload, TOO_DEEP if _deeper(payload) else NOT_FINITE))
    except RecursionError:
        return _encoded(kept_as_text(payload, TOO_DEEP))
    if _deeper(payload, text):
        return _encoded(kept_as_text(payload, TOO_DEEP))
    if _SURROGATE.search(text) is None:
        return payload, text.encode()
    cleaned = json.loads(_SURROGATE.sub("\ufffd", text))
    return cleaned, _compact_json(cleaned).encode()


# orjson refuses, rather than writes differently, what the standard library path must handle:
# lone surrogates, integers past 64 bits, keys that are not strings, and (passed through to a
# ``default`` there is none of) datetimes, dataclasses and subclasses of the built-in types.
ORJSON_REFUSES = (
    orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def json_text(value: Any) -> str:
    """``json.dumps(value)`` in meaning, by orjson where it can (compact; non-ASCII as UTF-8): for
    the values Switchboard builds itself, such as ingest's JSON columns and its 202 body, where the
    standard library's ``dumps`` was 3-4% of ingest's CPU (issue 12). What orjson refuses (a
    subclass of str, an int past 64 bits, a non-string key, a lone surrogate, a datetime) the
    standard library writes, or refuses, as before. A NaN is written as null."""
    try:
        return orjson.dumps(value, option=ORJSON_REFUSES).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value)


def _orjson_encoded(payload: Any) -> bytes | None:
    """The stored encoding written by orjson (several times faster than the standard library on a
    30 KB webhook payload), or None when only the standard library path can decide it.

    The bytes are the standard library's, character for character, except a float's digits
    (orjson writes ``1e-7`` where Python writes ``1e-07``): the same value, which the API and MCP
    show alike. orjson writes NaN and Infinity as ``null`` and a UUID or an Enum as its value, so
    the bytes are read back and must equal the payload: anything else takes the standard path,
    which keeps a non-finite payload as text and refuses a value JSON cannot carry, as before. A
    payload orjson itself has just read from the body holds none of those, so it is not read back.
    """
    if not isinstance(payload, dict | list):
        return None
    try:
        encoded = orjson.dumps(payload, option=ORJSON_REFUSES)
    except orjson.JSONEncodeError:
        return None
    fresh, seen_shallow, _ = _FRESH.get()
    if not (payload is fresh and seen_shallow) and not _within(payload, encoded, MAX_PAYLOAD_DEPTH):
        return None
    if payload is fresh:
        return encoded
    try:
        same = orjson.loads(encoded) == payload
    except orjson.JSONDecodeError:
        return None
    return encoded if same else None


def _within(payload: dict[Any, Any] | list[Any], encoded: bytes, limit: int) -> bool:
    """Whether ``payload`` (which orjson wrote compactly as ``encoded``) nests at most ``limit``
    (1 or more) deep: ``_indented_within`` first, and a payload that has such a line (nesting
    ``limit`` deep, or close) judged by ``_nests_deeper``."""
    return _indented_within(payload, limit) or not _nests_deeper(encoded, limit)


def _indented_within(value: dict[Any, Any] | list[Any], limit: int) -> bool:
    """Whether ``value`` surely nests at most ``limit`` deep, from orjson's indented writing
    (``within``); False when orjson cannot write it."""
    written = indented(value)
    return written is not None and within(written, limit)


# For ``_nests_deeper``: every bracket kept (as ``{`` / ``}``), and quotes; everything else deleted.
_AS_BRACES = bytes.maketrans(b"[]", b"{}")
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"{}[]')
# A backslash and the character it escapes (``\uXXXX``'s hex digits are never structure).
_ESCAPE = re.compile(rb"\\.", re.DOTALL)


def _nests_deeper(encoded: bytes, limit: int) -> bool:
    """Whether the arrays and objects of compact JSON text nest more than ``limit`` deep, read
    from the bytes (a walk of the decoded structure costs more than encoding it).

    With every escape gone, every quote left opens or closes a string; only the quotes and
    brackets are kept, and the brackets between quotes (inside strings) dropped.
    Each pass that deletes every adjacent ``{}`` removes exactly one level (the innermost of every
    branch), so the brackets are gone after as many passes as the deepest nesting."""
    if b"\\" in encoded:
        # Only then can a quote be escaped. Every escape goes, read left to right as a JSON reader
        # reads it (in ``\\"`` an escaped backslash, then a real quote). The one-byte test is a
        # memchr; a search for the two bytes ``\"`` took as long as the rest of this function.
        encoded = _ESCAPE.sub(b"", encoded)
    marks = encoded.translate(_AS_BRACES, _NOT_STRUCTURE)
    if marks.count(b"{") <= limit:
        return False
    # An empty string, or two strings with nothing kept between them, is a pair of adjacent quotes:
    # dropping them first leaves only the (rare) strings that hold brackets for the split.
    marks = marks.replace(b'""', b"")
    brackets = b"".join(marks.split(b'"')[::2]) if b'"' in marks else marks
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"{}", b"")
    return bool(brackets)


def _compact_json(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def _encoded(kept: dict[str, str]) -> tuple[dict[str, str], bytes]:
    return kept, _compact_json(kept).encode()


def kept_as_text(value: Any, reason: str) -> dict[str, str]:
    """``{"body": <value as JSON text>, "kept_as_text": reason}``: a value that cannot travel as a
    structure, whole as one string (the shape a generic delivery's non-JSON body takes). NaN and
    Infinity stay in the text as their tokens; lone surrogates become U+FFFD."""
    try:
        text = _compact_json(value)
    except (RecursionError, TypeError, ValueError):
        # Not reached for parsed JSON (its parser has the same limit); the event keeps the raw body.
        text = ""
    return {"body": _SURROGATE.sub("\ufffd", text), "kept_as_text": reason}


def _deeper(payload: Any, text: str | None = None, limit: int = MAX_PAYLOAD_DEPTH) -> bool:
    """Whether arrays and objects nest more than ``limit`` deep. Counting brackets in the encoded
    text bounds the depth from above (brackets inside strings only add), so most payloads need no
    walk; the walk is iterative, since a recursive one could run out of stack on what it looks for."""
    if not isinstance(payload, dict | list):
        return False
    if text is not None and text.count("[") + text.count("{") <= limit:
        return False
    stack: list[tuple[Any, int]] = [(payload, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def delivery_key(key: str | None, body: bytes) -> str:
    """The provider's key when it is a short printable token, else a hash (of the key or the body).

    A long key is hashed rather than cut, so two keys that share a prefix never collide.
    """
    if key is None or key == "":
        return "sha256:" + hashlib.sha256(body).hexdigest()
    if _PRINTABLE_KEY.fullmatch(key):
        return key
    return "key-sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


# Headers whose values are stored (an allowlist: a sender's credential can hide under any name, e.g.
# X-Webhook-Key, X-Access-Key, X-Shopify-Hmac-Sha256). Every other header keeps its name only.
_KEPT_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "content-encoding",
        "content-length",
        "content-type",
        "host",
        "user-agent",
        "traceparent",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-real-ip",
        "x-github-api-version",
        "x-github-hook-installation-target-type",
        "x-slack-retry-reason",
        "webhook-id",
        "webhook-timestamp",
    }
)
# Metadata named by its last words, whatever the sender's prefix: X-GitHub-Event, X-Gitea-Delivery,
# X-Cairn-Event-Id, Linear-Delivery, X-Shopify-Topic, X-Slack-Request-Timestamp, X-Request-Id, …
_KEPT_SUFFIX = re.compile(
    r"(?:^|-)(?:event|event-type|event-id|event-uuid|topic|delivery|delivery-id|hook-id|webhook-id|"
    r"webhook-uuid|target-id|request-id|retry-num|timestamp|triggered-at|shop-domain|instance)$",
    re.I,
)
# A kept value that still reads like a credential (an auth scheme and a token) is not kept.
_CREDENTIAL_VALUE = re.compile(r"^\s*(?:bearer|basic|token|digest|hmac|sha\d+|v\d+)[\s=:]", re.I)
REDACTED = "[redacted]"


def _header_name(name: str) -> tuple[str, bool]:
    """A header's stored name, and whether its value may be stored: decided by the name alone."""
    clean = clean_line(name, 100)
    lower = clean.lower()
    secret = _SECRET_HEADER.search(lower) is not None
    return clean, not secret and (lower in _KEPT_HEADERS or _KEPT_SUFFIX.search(lower) is not None)


# A sender sends the same dozen names with every delivery, and the two case-insensitive
# alternations cost more than the rest of ingest's header work: each name is decided once. Bounded,
# and only for names of an ordinary length, since the names are the sender's to choose.
_known_header_name = functools.lru_cache(maxsize=256)(_header_name)


def _kept_value(value: str) -> str:
    kept = clean_line(value, 1000)
    return REDACTED if _CREDENTIAL_VALUE.match(kept) else kept


def body_key(body: bytes) -> str:
    """The second delivery key of a body whose delivery id travels outside its signature."""
    return "body-sha256:" + hashlib.sha256(body).hexdigest()


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The request headers as stored on the event: every name, but only the values of an allowlist
    of transport and delivery-metadata headers; the rest (signatures, credentials, cookies and
    anything unknown) are stored as ``[redacted]``."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        name, keep = _known_header_name(name) if len(name) <= 100 else _header_name(name)
        value = _kept_value(value) if keep else REDACTED
        out[name] = f"{out[name]}, {value}" if name in out and value != REDACTED else value
    return out


class DuplicateKey(ValueError):
    """A JSON object that names one key twice (``no_duplicate_keys``); ``str()`` is the key."""


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook`` for JSON a person or a client wrote (an API body, a
    rule set from the CLI's FILE or the web textarea): a key named twice is refused, since which
    of the two was meant is not ours to guess (the last would silently win)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise DuplicateKey(key)
        data[key] = value
    return data
