"""generic: any sender. No signature; trust is the unguessable ingest URL (``trust_mode: token``).

A generic delivery never gets a reply address, even when it carries forge headers and a forge body:
its body is unverified, so an address parsed from it would let anyone holding the URL spend the
owner's credential on a target of their choosing (a confused deputy).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable

from switchboard.sdk import (
    ConnectionKind,
    Delivery,
    SourceKind,
    Verdict,
    header_value,
    hookimpl,
    json_object,
    no_address,
    no_echo_clues,
    one_line,
)

KIND = "generic"


# The character sets a sender may name (Python's names for them): Unicode's, ASCII, the ISO 8859,
# Windows, Mac and KOI8 single-byte sets and the CJK multi-byte ones, all decoded in linear time.
# Python's other codecs are not charsets a body is written in, and some cost far more than the
# body's length (punycode's decoding is quadratic: a 5 MiB body would hold the event loop for
# minutes; ``unicode_escape`` reads backslashes): a body naming one is read as UTF-8.
_CHARSETS = re.compile(
    r"utf-(?:8|16|32)(?:-(?:be|le|sig))?|ascii|iso8859-\d+|cp\d+|mac-[a-z]+|koi8-[a-z]+|kz1048"
    r"|ptcp154|tis-620|hp-roman8|shift_jis(?:x0213|_2004)?|euc_[a-z0-9_]+|gb2312|gbk|gb18030|hz"
    r"|big5(?:hkscs)?|johab|iso2022_[a-z0-9_]+"
)


def _text(delivery: Delivery) -> str:
    """A body that is not JSON as text: in the charset its ``Content-Type`` names (a Latin-1 or
    Windows-1252 body read as UTF-8 lost every accented letter), else, or when that is no charset
    of ``_CHARSETS``, as UTF-8; what does not decode is U+FFFD either way."""
    for param in delivery.headers.get("Content-Type", "").split(";")[1:]:
        name, _, value = param.partition("=")
        charset = value.strip().strip('"').strip()
        if name.strip().lower() != "charset" or not charset.isascii() or len(charset) > 40:
            continue
        try:
            if _CHARSETS.fullmatch(codecs.lookup(charset).name):
                return delivery.body.decode(charset, errors="replace")
        except (LookupError, UnicodeError, ValueError):
            pass  # no such codec
        break
    return delivery.body.decode("utf-8", errors="replace")


def verify(delivery: Delivery) -> Verdict:
    payload = json_object(delivery.body)
    if payload is None:
        # Any bytes are accepted; a non-JSON body is kept as text for the agent.
        payload = {"body": _text(delivery)}
    key = header_value(delivery.headers, "webhook-id", "X-Delivery-Id") or None
    event = delivery.headers.get("X-Event-Type") or "generic"
    title = payload.get("title") if isinstance(payload.get("title"), str) else None
    return Verdict(
        ok=True,
        detail="not verified (token trust)",
        payload=payload,
        event=one_line(event, 100),
        # As sent: the core keeps a short printable key and hashes any other. Cut here, two ids
        # sharing their first 199 characters (or differing only in spaces) were one delivery.
        delivery_key=key,
        title=one_line(title or f"Webhook delivery ({event})", 200),
    )


SOURCE = SourceKind(
    KIND,
    secret="none",
    verify=verify,
    # Never an address: see the module docstring.
    derive_address=no_address,
    echo_clues=no_echo_clues,
    description="Any sender; trusted by its unguessable URL.",
    # json_object's value is never edited: a body read as it came is not copied onto its todos.
    payload_is_body=True,
)


@hookimpl
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    register(SOURCE)
