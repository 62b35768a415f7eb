"""The gitea provider's inbound hooks (Gitea and Forgejo), called directly."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import switchboard_gitea as gitea

from switchboard.sdk import Delivery, EchoClues, reply_marker
from switchboard.testing import hexmac

FIXTURES = Path(__file__).parents[3] / "tests" / "fixtures" / "gitea"
SECRET = "whsec_gitea_test"


def _body(name: str) -> bytes:
    return (FIXTURES / f"{name}.json").read_bytes()


def _sig(body: bytes, secret: str = SECRET) -> str:
    return hexmac(secret, body)


def _delivery(body: bytes, **headers: str) -> Delivery:
    return Delivery("gitea", headers, body, datetime.now(UTC), SECRET)


@pytest.mark.parametrize("header", ["X-Gitea-Signature", "X-Forgejo-Signature"])
def test_bare_hex_headers_verify(header: str) -> None:
    body = _body("issues.opened")
    verdict = gitea.verify(_delivery(body, **{header: _sig(body), "X-Gitea-Event-Type": "issues"}))
    assert verdict.ok and verdict.event == "issues.opened"


def test_github_style_header_verifies() -> None:
    body = _body("issues.opened")
    verdict = gitea.verify(_delivery(body, **{"X-Hub-Signature-256": "sha256=" + _sig(body)}))
    assert verdict.ok


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Gitea-Signature": ""},
        {"X-Gitea-Signature": "  ", "X-Forgejo-Signature": ""},
        {"X-Gitea-Signature": "00" * 32},
        {"X-Hub-Signature-256": "sha1=" + "00" * 20},
        {"X-Hub-Signature-256": "sha256"},
        {"X-Gitea-Signature": "GOOD", "X-Forgejo-Signature": "00" * 32},
    ],
)
def test_missing_empty_or_any_wrong_signature_refuses(headers: dict[str, str]) -> None:
    body = _body("issues.opened")
    headers = {k: (_sig(body) if v == "GOOD" else v) for k, v in headers.items()}
    verdict = gitea.verify(_delivery(body, **headers))
    assert verdict is not None and not verdict.ok and verdict.error == "signature_invalid"


def test_delivery_key_from_gitea_or_forgejo_header() -> None:
    body = _body("issues.opened")
    assert (
        gitea.verify(
            _delivery(body, **{"X-Gitea-Signature": _sig(body), "X-Gitea-Delivery": "g-1"})
        ).delivery_key
        == "g-1"
    )
    assert (
        gitea.verify(
            _delivery(body, **{"X-Forgejo-Signature": _sig(body), "X-Forgejo-Delivery": "f-1"})
        ).delivery_key
        == "f-1"
    )


@pytest.mark.parametrize(
    ("fine", "coarse", "family"),
    [
        ("pull_request_comment", "issue_comment", "issue_comment"),
        (None, "pull_request_comment", "pull_request_review_comment"),
        ("pull_request_review_rejected", "pull_request_rejected", "pull_request_review"),
        (None, "pull_request_approved", "pull_request_review"),
        ("issue_label", "issues", "issues"),
        ("pull_request_sync", "pull_request", "pull_request"),
    ],
)
def test_event_type_header_is_finer_than_event(fine: str | None, coarse: str, family: str) -> None:
    body = _body("pull_request_comment.created")
    headers = {"X-Gitea-Signature": _sig(body), "X-Gitea-Event": coarse}
    if fine:
        headers["X-Gitea-Event-Type"] = fine
    assert gitea.verify(_delivery(body, **headers)).event == f"{family}.created"


def test_address_echo_and_strictness() -> None:
    payload = json.loads(_body("pull_request_comment.created"))
    payload["comment"]["body"] += reply_marker("rp_01jdq9a0b1c2d3e4f5g6h7j8k9")
    body = json.dumps(payload).encode()
    delivery = _delivery(
        body, **{"X-Gitea-Signature": _sig(body), "X-Gitea-Event-Type": "pull_request_comment"}
    )
    verdict = gitea.verify(delivery)
    address = gitea.derive_address(delivery, verdict)
    assert address.as_dict() == {
        "kind": "forge_comment",
        "provider": "gitea",
        "display": "gitea gitea.example.com/acme/api#7",
        "host": "gitea.example.com",
        "base": "https://gitea.example.com",
        "repo": "acme/api",
        "number": 7,
    }
    assert gitea.echo_clues(delivery, verdict) == EchoClues(
        object_ids=("1206",), marker="rp_01jdq9a0b1c2d3e4f5g6h7j8k9"
    )
    for change in (
        "https://gitea.example.com:99999/acme/api",
        "https://gitea example.com/acme/api",
        "",
        # The base is the html_url before /{owner}/{repo}: a URL of another repository is no address.
        "https://gitea.example.com/acme/other",
        "https://gitea.example.com/acme/api/",
        "https://gitea.example.com/../acme/api",
        "https://gitea.example.com//acme/api",
        "https://gitea.example.com/x%2Fy/acme/api",
        "https://gitea.example.com/acme/api?x=1",
    ):
        payload["repository"]["html_url"] = change
        body = json.dumps(payload).encode()
        d = _delivery(body, **{"X-Gitea-Signature": _sig(body), "X-Gitea-Event-Type": "pull_request_comment"})
        assert gitea.derive_address(d, gitea.verify(d)) is None


def test_self_hosted_port_is_part_of_the_host() -> None:
    payload = json.loads(_body("issues.opened"))
    payload["repository"]["html_url"] = "http://git.lan:3000/acme/api"
    body = json.dumps(payload).encode()
    d = _delivery(body, **{"X-Gitea-Signature": _sig(body), "X-Gitea-Event-Type": "issues"})
    assert gitea.derive_address(d, gitea.verify(d)).display == "gitea git.lan:3000/acme/api#3"


def test_a_gitea_under_a_path_is_its_own_instance() -> None:
    """Two Gitea instances under one host name are two instances: the address carries the base
    (the html_url before /{owner}/{repo}), and only the connection with that base URL matches."""
    payload = json.loads(_body("issues.opened"))
    payload["repository"]["html_url"] = "http://git.lan:3000/gitea-b/acme/api"
    body = json.dumps(payload).encode()
    d = _delivery(body, **{"X-Gitea-Signature": _sig(body), "X-Gitea-Event-Type": "issues"})
    address = gitea.derive_address(d, gitea.verify(d))
    assert address.fields["base"] == "http://git.lan:3000/gitea-b"
    assert address.fields["host"] == "git.lan:3000"
    assert address.display == "gitea git.lan:3000/gitea-b/acme/api#3"
    assert gitea.CONNECTION.instance_of(address) == "https://git.lan:3000/gitea-b"
    # The scheme is not part of the comparison: the dial goes to the connection's https URL.
    assert gitea.CONNECTION.account_matches("https://git.lan:3000/gitea-b", address)
    for other in ("https://git.lan:3000/gitea-a", "https://git.lan:3000", "https://git.lan/gitea-b"):
        assert not gitea.CONNECTION.account_matches(other, address)
