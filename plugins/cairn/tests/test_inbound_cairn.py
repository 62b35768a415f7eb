"""The cairn provider's inbound hooks, called directly."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import switchboard_cairn as cairn

from switchboard.sdk import Delivery, EchoClues
from switchboard.testing import hexmac

FIXTURES = Path(__file__).parents[3] / "tests" / "fixtures" / "cairn"
SECRET = "whsec_cairn_test"
NOW = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def _payload(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _delivery(payload: dict[str, Any], secret: str = SECRET, at: datetime = NOW, **headers: str) -> Delivery:
    body = json.dumps(payload).encode()
    sig = "sha256=" + hexmac(secret, body)
    return Delivery("cairn", {"X-Cairn-Signature": sig, **headers}, body, at, SECRET)


def test_artifact_event_verifies_with_its_event_id_as_key() -> None:
    payload = _payload("artifact.created")
    verdict = cairn.verify(_delivery(payload, **{"X-Cairn-Event-Id": payload["event_id"]}))
    assert verdict.ok and verdict.delivery_key == payload["event_id"] and verdict.event == "artifact.created"


@pytest.mark.parametrize(
    ("case", "detail"),
    [
        ("stale", "window"),
        ("future", "window"),
        ("no-event-id", "event_id"),
        ("no-created-at", "created_at"),
        ("naive-created-at", "created_at"),
        ("header-mismatch", "X-Cairn-Event-Id"),
        ("empty-header-id", "X-Cairn-Event-Id"),
        ("wrong-secret", "mismatch"),
        ("far-future-year", "window"),
    ],
)
def test_refusals(case: str, detail: str) -> None:
    payload = _payload("artifact.created")
    at, secret, headers = NOW, SECRET, {}
    if case == "stale":
        at = NOW + timedelta(seconds=301)
    elif case == "future":
        at = NOW - timedelta(seconds=301)
    elif case == "no-event-id":
        del payload["event_id"]
    elif case == "no-created-at":
        del payload["created_at"]
    elif case == "naive-created-at":
        payload["created_at"] = "2026-11-30T10:00:00"
    elif case == "header-mismatch":
        headers["X-Cairn-Event-Id"] = "evt_other"
    elif case == "empty-header-id":
        headers["X-Cairn-Event-Id"] = ""
    elif case == "wrong-secret":
        secret = "whsec_other"
    elif case == "far-future-year":
        payload["created_at"] = "9999-12-31T23:59:59-23:59"
    verdict = cairn.verify(_delivery(payload, secret, at, **headers))
    assert not verdict.ok and verdict.error == "signature_invalid" and detail in verdict.detail


def test_address_and_its_strictness() -> None:
    payload = _payload("comment.created")
    delivery = _delivery(payload)
    verdict = cairn.verify(delivery)
    assert cairn.derive_address(delivery, verdict).as_dict() == {
        "kind": "cairn_comment",
        "provider": "cairn",
        "display": "cairn cairn.example.com artifact art_01jdq8v6k2m3n4p5q6r7s8t9",
        "instance": "https://cairn.example.com",
        "base": "https://cairn.example.com",
        "artifact_id": "art_01jdq8v6k2m3n4p5q6r7s8t9",
    }
    assert cairn.echo_clues(delivery, verdict) == EchoClues(object_ids=("cmt_01jdq9c0b1c2d3e4f5g6h7j8",))
    for field, value in [
        ("url", "ftp://cairn.example.com/a"),
        ("url", "https://user@cairn.example.com/a"),
        ("url", None),
        # The instance base is the URL before the artifact's own path: another path is no address.
        ("url", "https://cairn.example.com/a"),
        ("url", "https://cairn.example.com/artifacts/art_other"),
        ("url", "https://cairn.example.com/artifacts/art_01jdq8v6k2m3n4p5q6r7s8t9?x=1"),
        ("url", "https://cairn.example.com/../artifacts/art_01jdq8v6k2m3n4p5q6r7s8t9"),
        ("url", "https://cairn.example.com//artifacts/art_01jdq8v6k2m3n4p5q6r7s8t9"),
        ("url", "https://cairn.example.com/c%2fd/artifacts/art_01jdq8v6k2m3n4p5q6r7s8t9"),
        ("id", "art/../../admin"),
        ("id", ""),
        ("id", 12),
    ]:
        broken = _payload("artifact.created")
        broken["artifact"][field] = value
        d = _delivery(broken)
        assert cairn.derive_address(d, cairn.verify(d)) is None, (field, value)


def test_a_cairn_under_a_path_is_its_own_instance() -> None:
    """Two Cairns under one host name are two instances: the address carries the base, path and all."""
    payload = _payload("artifact.created")
    payload["artifact"]["url"] = (
        "https://tools.example.com:8443/cairn-b/artifacts/" + payload["artifact"]["id"]
    )
    d = _delivery(payload)
    address = cairn.derive_address(d, cairn.verify(d))
    assert address.fields["base"] == "https://tools.example.com:8443/cairn-b"
    assert address.fields["instance"] == "https://tools.example.com:8443"
    assert address.display == f"cairn tools.example.com:8443/cairn-b artifact {payload['artifact']['id']}"
    assert cairn.CONNECTION.instance_of(address) == "https://tools.example.com:8443/cairn-b"
    assert cairn.CONNECTION.account_matches("https://tools.example.com:8443/cairn-b", address)
    for other in ("https://tools.example.com:8443/cairn-a", "https://tools.example.com:8443"):
        assert not cairn.CONNECTION.account_matches(other, address)
    # The default port is not part of the base.
    payload["artifact"]["url"] = "https://cairn.example.com:443/artifacts/" + payload["artifact"]["id"]
    d = _delivery(payload)
    assert cairn.derive_address(d, cairn.verify(d)).fields["base"] == "https://cairn.example.com"


def test_ping_is_housekeeping() -> None:
    verdict = cairn.verify(_delivery(_payload("ping")))
    assert verdict.ok and verdict.ignore
