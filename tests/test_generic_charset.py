"""A generic delivery whose body is not JSON is kept as text for the agent (docs/sources/generic.md):
decoded in the charset its ``Content-Type`` names, as the sender wrote it. It was always read as
UTF-8, so a Latin-1 or Windows-1252 body (what many older senders post) reached the agent with
every accented letter and curly quote replaced by U+FFFD."""

from __future__ import annotations

import pytest

from switchboard.services import Services
from switchboard.testing import make_webhook, post, todo_payload

QUOTED = "“Deploy” failed — 5 €"
EURO = "msg=5 €"


@pytest.mark.parametrize(
    ("content_type", "body", "text"),
    [
        ("text/plain; charset=iso-8859-1", "Café fermé à 18h".encode("latin-1"), "Café fermé à 18h"),
        (
            'text/plain; charset="windows-1252"',
            "“Deploy” failed — 5 €".encode("cp1252"),
            "“Deploy” failed — 5 €",
        ),
        (
            "application/x-www-form-urlencoded; Charset=ISO-8859-15",
            "msg=5 €".encode("iso-8859-15"),
            "msg=5 €",
        ),
        ("text/plain; charset=utf-8", "naïve".encode(), "naïve"),
        ("text/plain", "naïve".encode(), "naïve"),
        ("text/plain; charset=Shift_JIS", "受付完了".encode("shift_jis"), "受付完了"),
        ("text/plain; charset=utf-16", "naïve".encode("utf-16"), "naïve"),
    ],
)
async def test_a_text_body_is_read_in_the_charset_it_names(
    services: Services, base_url: str, content_type: str, body: bytes, text: str
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    status, answer, _ = await post(base_url, token, body, {"Content-Type": content_type})
    assert status == 202, answer
    assert await todo_payload(services, answer["todos"][0]["id"]) == {"body": text}


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain; charset=x-no-such-charset",
        "text/plain; charset=base64",  # a codec, but not a text encoding
        "text/plain; charset=idna",  # refuses the replacement of what it cannot decode
        # Codecs that are no charset a body is written in; punycode's decoding is quadratic (a
        # 5 MiB body would hold the server for minutes), unicode_escape reads backslashes.
        "text/plain; charset=punycode",
        "text/plain; charset=unicode_escape",
        "text/plain; charset=utf-7",
        "text/plain; charset=",
    ],
)
async def test_a_charset_that_cannot_be_used_falls_back_to_utf_8(
    services: Services, base_url: str, content_type: str
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    body = "ok ✓ ".encode() + b"\xff"
    status, answer, _ = await post(base_url, token, body, {"Content-Type": content_type})
    assert status == 202, answer
    assert await todo_payload(services, answer["todos"][0]["id"]) == {"body": "ok ✓ \ufffd"}
