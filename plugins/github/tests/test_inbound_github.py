"""The github provider's inbound hooks, called directly: signatures, events, addresses, echo clues."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import pytest
import switchboard_github as github

from switchboard.sdk import Address, Delivery, EchoClues, reply_marker
from switchboard.testing import hexmac

FIXTURES = Path(__file__).parents[3] / "tests" / "fixtures" / "github"
SECRET = "whsec_github_test"


def _fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.json").read_bytes()


def _delivery(body: bytes, event: str, secret: str = SECRET, **headers: str) -> Delivery:
    sig = "sha256=" + hexmac(secret, body)
    base = {"X-GitHub-Event": event, "X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": sig}
    return Delivery("github", {**base, **headers}, body, datetime.now(UTC), SECRET)


def test_githubs_published_test_vector_verifies() -> None:
    """docs.github.com: secret "It's a Secret to Everybody", body "Hello, World!"."""
    delivery = Delivery(
        "github",
        {"X-Hub-Signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"},
        b"Hello, World!",
        datetime.now(UTC),
        "It's a Secret to Everybody",
    )
    verdict = github.verify(delivery)
    # The signature is good; the body is not JSON, so it is an invalid body rather than a bad signature.
    assert verdict is not None and verdict.ok is False and verdict.error == "invalid_body"
    wrong = Delivery("github", delivery.headers, b"Hello, World?", delivery.received_at, delivery.secret)
    assert github.verify(wrong).error == "signature_invalid"


@pytest.mark.parametrize(
    "header",
    ["", "   ", "sha256", "sha256=", "sha1=abc", "SHA256=" + "0" * 64, "sha256=" + "0" * 64],
)
def test_bad_headers_refuse(header: str) -> None:
    verdict = github.verify(
        _delivery(_fixture("issues/opened.payload"), "issues", **{"X-Hub-Signature-256": header})
    )
    assert verdict is not None and not verdict.ok and verdict.error == "signature_invalid"
    assert header.strip() == "" or header not in verdict.detail


def test_ping_is_housekeeping_and_push_is_work() -> None:
    ping = github.verify(_delivery(_fixture("ping/payload"), "ping"))
    assert ping.ok and ping.ignore and ping.event == "ping"
    push = github.verify(_delivery(_fixture("push/payload"), "push"))
    assert push.ok and not push.ignore and github.derive_address(_delivery(b"", "push"), push) is None


def test_form_encoded_delivery() -> None:
    raw = _fixture("issues/opened.payload")
    body = b"payload=" + quote(raw.decode(), safe="").encode()
    verdict = github.verify(
        _delivery(body, "issues", **{"Content-Type": "application/x-www-form-urlencoded"})
    )
    assert verdict.ok and verdict.payload == json.loads(raw)
    bad = github.verify(
        _delivery(b"payload=%7Bnot", "issues", **{"Content-Type": "application/x-www-form-urlencoded"})
    )
    assert not bad.ok and bad.error == "invalid_body"


def _address(payload: dict, event: str = "issues") -> Address | None:
    body = json.dumps(payload).encode()
    delivery = _delivery(body, event)
    return github.derive_address(delivery, github.verify(delivery))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("full_name", "acme/../etc"),
        ("full_name", "acme/api/extra"),
        ("full_name", "acme api/x"),
        ("full_name", "acme"),
        ("html_url", "http://github.com/Codertocat/Hello-World"),
        ("html_url", "https://evil.example@github.com/x"),
        ("html_url", "https://GITHUB.com/x"),
        ("html_url", "javascript:alert(1)"),
        # GitHub serves a whole host: the html_url is https://{host}/{owner}/{repo}, exactly.
        ("html_url", "https://github.com/prefix/Codertocat/Hello-World"),
        ("html_url", "https://github.com/Codertocat/Other"),
        ("html_url", "https://github.com/Codertocat/Hello-World?x=1"),
        ("number", 0),
        ("number", -1),
        ("number", "1"),
        ("number", True),
        ("number", 1.5),
    ],
)
def test_any_invalid_field_means_no_address_never_a_cleaned_one(field: str, value: object) -> None:
    payload = json.loads(_fixture("issues/opened.payload"))
    if field == "number":
        payload["issue"]["number"] = value
    else:
        payload["repository"][field] = value
    assert _address(payload) is None


def test_enterprise_host_is_kept() -> None:
    payload = json.loads(_fixture("issues/opened.payload"))
    payload["repository"]["html_url"] = "https://ghe.acme.internal/Codertocat/Hello-World"
    address = _address(payload)
    assert address.fields["host"] == "ghe.acme.internal"
    assert address.display == "github ghe.acme.internal/Codertocat/Hello-World#1"
    # GitHub addresses keep their shape: the host is the instance (no base field).
    assert set(address.fields) == {"host", "repo", "number"}
    assert github.CONNECTION.instance_of(address) == "ghe.acme.internal"


def test_echo_clues_of_a_comment() -> None:
    payload = json.loads(_fixture("issue_comment/created.payload"))
    payload["comment"]["body"] = "Done." + reply_marker("rp_01jdq9a0b1c2d3e4f5g6h7j8k9")
    body = json.dumps(payload).encode()
    delivery = _delivery(body, "issue_comment")
    clues = github.echo_clues(delivery, github.verify(delivery))
    assert clues == EchoClues(object_ids=("492700400",), marker="rp_01jdq9a0b1c2d3e4f5g6h7j8k9")
    issue = _delivery(_fixture("issues/opened.payload"), "issues")
    assert github.echo_clues(issue, github.verify(issue)) == EchoClues()
