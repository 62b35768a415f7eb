"""The fast paths of ingest's one-line cleaning (issue 12): ``clean_line`` returns an already clean
ASCII line almost as it is, and ``redact_headers`` decides each header name once. Both must store
exactly what the full rules store, which are written out here as the reference."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from switchboard.sanitize import (
    _CREDENTIAL_VALUE,
    _KEPT_HEADERS,
    _KEPT_SUFFIX,
    _SECRET_HEADER,
    REDACTED,
    clean_line,
    redact_headers,
)

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_SURROGATE = re.compile("[\ud800-\udfff]")


def _reference_line(text: object, limit: int) -> str:
    value = _SURROGATE.sub("\ufffd", str(text))
    if not value.isprintable():
        value = "".join(" " if unicodedata.category(c) == "Cc" else c for c in value)
    value = " ".join(value.split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _reference_headers(headers: list[tuple[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name = _reference_line(raw_name, 100)
        lower = name.lower()
        if _SECRET_HEADER.search(lower) or not (lower in _KEPT_HEADERS or _KEPT_SUFFIX.search(lower)):
            value = REDACTED
        else:
            kept = _reference_line(raw_value, 1000)
            value = REDACTED if _CREDENTIAL_VALUE.match(kept) else kept
        out[name] = f"{out[name]}, {value}" if name in out and value != REDACTED else value
    return out


# Mostly the ASCII a header or a title is made of (the fast path), with spaces in runs and at the
# ends, control characters, non-ASCII whitespace and lone surrogates mixed in.
line_text = st.text(
    st.sampled_from(list("ab Z-_.:/=9"))
    | st.sampled_from([" ", "\t", "\n", "\x7f", "\x1f", "\xa0"])
    | st.characters(codec=None, categories=None),
    max_size=40,
)


@SETTINGS
@given(text=line_text, limit=st.integers(1, 45))
def test_clean_line_is_the_full_rule(text: str, limit: int) -> None:
    assert clean_line(text, limit) == _reference_line(text, limit)


header_names = st.sampled_from(
    [
        "Host",
        "host",
        "X-GitHub-Event",
        "x-github-event",
        "X-Hub-Signature-256",
        "X-Webhook-Key",
        "X-Request-Id",
        "Authorization",
        "User-Agent",
        "X-Custom-Timestamp",
        "X-Token-Timestamp",
        "X-Secret-Delivery",
        " X-Padded-Event ",
        "X-Event\tName",
        "x" * 101 + "-event",
        "a" * 120,
    ]
) | st.text(min_size=1, max_size=30)
header_values = (
    st.sampled_from(["Bearer abc", "sha256=ff", "push", "  two  words ", "v1=x", "é", ""]) | line_text
)


@SETTINGS
@given(headers=st.lists(st.tuples(header_names, header_values), max_size=12), repeats=st.integers(1, 3))
def test_redact_headers_decides_each_name_as_the_full_rule(
    headers: list[tuple[str, str]], repeats: int
) -> None:
    # The same names again and again: a cached decision must be the one the rule makes.
    for _ in range(repeats):
        assert redact_headers(dict(headers)) == _reference_headers(list(dict(headers).items()))
