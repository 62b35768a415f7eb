"""Every bundled verifier, given garbage where a signature header belongs (non-ASCII, undecodable
bytes, lone surrogates, truncated schemes), refuses with 401 and never faults with 503: called
directly with any text, and over real HTTP with raw bytes written to a socket."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest
from fixtures.ingest_kit import cairn_body, fixture_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from switchboard import plugins
from switchboard.provider import Delivery
from switchboard.services import Services
from switchboard.testing import cairn_headers, make_webhook

SECRET = "whsec_hostile"
GITHUB_BODY = fixture_bytes("github/issues/opened.payload.json")
# Header bytes an HTTP parser lets through (no CR, LF, NUL or other controls), high bytes included:
# aiohttp hands those to the verifier as lone surrogates ('\udcff').
HEADER_BYTES = st.binary(max_size=80).map(lambda b: bytes(c for c in b if c >= 0x20 and c != 0x7F))
HEADER_TEXT = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), max_size=40),
    HEADER_BYTES.map(lambda b: b.decode("utf-8", errors="surrogateescape")),
)


def _now_header() -> str:
    return str(int(time.time()))


# For each bundled kind: a body, the headers of a delivery that is right except for the header
# under test, and the headers to fill with garbage.
KINDS: dict[str, tuple[Callable[[], bytes], Callable[[bytes, str], dict[str, str]], tuple[str, ...]]] = {
    "github": (
        lambda: GITHUB_BODY,
        lambda body, secret: {"X-GitHub-Event": "issues"},
        ("X-Hub-Signature-256",),
    ),
    "gitea": (
        lambda: GITHUB_BODY,
        lambda body, secret: {"X-Gitea-Event-Type": "issues"},
        ("X-Gitea-Signature", "X-Forgejo-Signature", "X-Hub-Signature-256"),
    ),
    "slack": (
        lambda: b'{"type": "event_callback", "event": {"type": "message"}}',
        lambda body, secret: {"X-Slack-Request-Timestamp": _now_header()},
        ("X-Slack-Signature",),
    ),
    "stripe": (lambda: b'{"id": "evt_1"}', lambda body, secret: {}, ("Stripe-Signature",)),
    "cairn": (
        lambda: cairn_body("comment.created.json"),
        # A good signature: the garbage goes into the event id header, which must equal the body's.
        lambda body, secret: cairn_headers(secret, body),
        ("X-Cairn-Event-Id",),
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=HEADER_TEXT, prefixed=st.booleans())
def test_a_verifier_refuses_any_garbage_header(kind: str, value: str, prefixed: bool) -> None:
    providers = _providers()
    make_body, base, names = KINDS[kind]
    body = make_body()
    for name in names:
        garbage = (
            ("sha256=" if "Hub" in name or "Cairn-Sig" in name else "v0=") + value if prefixed else value
        )
        headers = {**base(body, SECRET), name: garbage}
        delivery = Delivery(kind, headers, body, datetime.now(UTC), SECRET)
        verdict = providers.source(kind).verify(delivery)
        assert not verdict.ok and verdict.error == "signature_invalid", (name, verdict)


_LOADED: list[plugins.Providers] = []


def _providers() -> plugins.Providers:
    if not _LOADED:
        _LOADED.append(plugins.load())
    return _LOADED[0]


def raw_post(base_url: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> int:
    """POST over a plain socket, header values as raw bytes; the answer's status code."""
    where = urlsplit(base_url)
    lines = [f"POST {path} HTTP/1.1".encode(), f"Host: {where.netloc}".encode()]
    lines += [name + b": " + value for name, value in headers]
    lines += [
        b"Content-Type: application/json",
        f"Content-Length: {len(body)}".encode(),
        b"Connection: close",
    ]
    request = b"\r\n".join(lines) + b"\r\n\r\n" + body
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return int(answer.split(b" ", 2)[1])


async def _webhooks(services: Services) -> dict[str, tuple[str, str]]:
    """Each kind's (ingest token, signing secret): minted, or pasted for slack and stripe."""
    made = {}
    for kind in sorted(KINDS):
        pasted = SECRET if kind in ("slack", "stripe") else None
        token, secret, _ = await make_webhook(services, kind, secret=pasted)
        assert secret is not None
        made[kind] = (token, secret)
    return made


def _headers_for(kind: str, body: bytes, secret: str, name: str, value: bytes) -> list[tuple[bytes, bytes]]:
    _, base, _ = KINDS[kind]
    skip = {name.lower(), "content-type"}  # raw_post sends its own Content-Type
    fixed = [(k.encode(), v.encode()) for k, v in base(body, secret).items() if k.lower() not in skip]
    return [*fixed, (name.encode(), value)]


async def test_githubs_non_ascii_signature_over_http_is_401(services: Services, base_url: str) -> None:
    """The header that made github answer 503 and log an ERROR: ``sha256=\\xff\\xfe``."""
    tokens = await _webhooks(services)
    for value in (
        b"sha256=\xff\xfe",
        b"\xff\xfe",
        b"sha256=\xc3\xbc" + b"0" * 62,
        b"sha256=" + bytes(range(0x80, 0xC0)),
    ):
        token, secret = tokens["github"]
        headers = _headers_for("github", GITHUB_BODY, secret, "X-Hub-Signature-256", value)
        status = await asyncio.to_thread(raw_post, base_url, f"/webhooks/{token}", headers, GITHUB_BODY)
        assert status == 401, value


async def test_every_bundled_verifier_over_http_answers_401_to_garbage_bytes(
    services: Services, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    tokens = await _webhooks(services)
    statuses: list[tuple[str, bytes, int]] = []

    # Hypothesis draws in a worker thread and writes each case to the socket; the app answers on
    # this test's event loop meanwhile.
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(
        kind=st.sampled_from(sorted(KINDS)),
        value=HEADER_BYTES,
        prefix=st.sampled_from([b"", b"sha256=", b"v0="]),
    )
    def property_holds(kind: str, value: bytes, prefix: bytes) -> None:
        make_body, _, names = KINDS[kind]
        body = make_body()
        token, secret = tokens[kind]
        for name in names:
            headers = _headers_for(kind, body, secret, name, prefix + value)
            status = raw_post(base_url, f"/webhooks/{token}", headers, body)
            statuses.append((kind, prefix + value, status))
            assert status == 401, (kind, name, prefix + value, status)

    await asyncio.to_thread(property_holds)
    assert {kind for kind, _, _ in statuses} == set(KINDS)
    assert "raised" not in caplog.text and "could not check" not in caplog.text
