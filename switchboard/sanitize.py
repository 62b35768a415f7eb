"""Sender-controlled delivery data made safe to store (docs/architecture.md, "What ingest
stores"): one-line columns, payloads that encode as UTF-8 on both engines, bounded delivery keys and
headers with credentials redacted.

Pure functions, no I/O and no project imports: ingest calls them for every delivery and the
property tests call them directly.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

# Header names whose values are credentials or signatures: kept on the event as "[redacted]".
_SECRET_HEADER = re.compile(r"signature|authorization|cookie|token|secret|api-?key|password|auth", re.I)
_PRINTABLE_KEY = re.compile(r"[\x21-\x7e]{1,200}")
# Lone surrogates (from JSON "\ud800" escapes or undecodable header bytes) cannot be encoded as UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_line(text: object, limit: int) -> str:
    """One printable line for a column: no control characters, no lone surrogates, cut to ``limit``."""
    value = _SURROGATE.sub("\ufffd", str(text))
    if not value.isprintable():
        # Only then can it hold a control character (most header values are plain printable text).
        value = "".join(" " if unicodedata.category(c) == "Cc" else c for c in value)
    value = " ".join(value.split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def storable(payload: Any) -> Any:
    """The payload with lone surrogates replaced, so it encodes as UTF-8 on both engines."""
    return storable_encoded(payload)[0]


def storable_encoded(payload: Any) -> tuple[Any, bytes]:
    """``storable(payload)`` and its stored encoding (compact UTF-8 JSON, the bytes
    ``todos.encode_payload`` makes), from one JSON encoding in the usual case (no lone surrogates):
    every todo of a delivery shares the bytes."""
    text = _compact_json(payload)
    if _SURROGATE.search(text) is None:
        return payload, text.encode()
    cleaned = json.loads(_SURROGATE.sub("\ufffd", text))
    return cleaned, _compact_json(cleaned).encode()


def _compact_json(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


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


def _kept_value(name: str, value: str) -> str:
    lower = name.lower()
    if _SECRET_HEADER.search(lower) or not (lower in _KEPT_HEADERS or _KEPT_SUFFIX.search(lower)):
        return REDACTED
    kept = clean_line(value, 1000)
    return REDACTED if _CREDENTIAL_VALUE.match(kept) else kept


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The request headers as stored on the event: every name, but only the values of an allowlist
    of transport and delivery-metadata headers; the rest (signatures, credentials, cookies and
    anything unknown) are stored as ``[redacted]``."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        name = clean_line(name, 100)
        value = _kept_value(name, value)
        out[name] = f"{out[name]}, {value}" if name in out and value != REDACTED else value
    return out
