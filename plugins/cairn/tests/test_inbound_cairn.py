"""The cairn source kind's callables, called directly, on Cairn's wire format (``data/``: the
artifact.created body as Cairn sends it) and on the shape Switchboard 0.1 read."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import switchboard_cairn as cairn
from hypothesis import given, settings
from hypothesis import strategies as st

from switchboard.sdk import Delivery, EchoClues, Verdict, reply_marker
from switchboard.testing import hexmac

WIRE = json.loads((Path(__file__).parent / "data" / "artifact.created.json").read_text())
SECRET = "whsec_cairn_test"
# The fixture's created_at: deliveries arrive at that moment unless a test says otherwise.
NOW = datetime(2026, 9, 11, 12, 0, 0, tzinfo=UTC)
REPLY_ID = "rp_01jdeeeeeeeeeeeeeeeeeeeeee"


def wire(**data: Any) -> dict[str, Any]:
    """The fixture, with ``data`` fields changed (None removes one)."""
    payload = copy.deepcopy(WIRE)
    for key, value in data.items():
        if value is None:
            payload["data"].pop(key, None)
        else:
            payload["data"][key] = value
    return payload


def deliver(payload: dict[str, Any], secret: str = SECRET, at: datetime = NOW, **headers: str) -> Delivery:
    body = json.dumps(payload).encode()
    sig = "sha256=" + hexmac(secret, body)
    return Delivery("cairn", {"X-Cairn-Signature": sig, **headers}, body, at, SECRET)


def verified(payload: dict[str, Any]) -> tuple[Delivery, Verdict]:
    delivery = deliver(payload)
    verdict = cairn.verify(delivery)
    assert verdict.ok, verdict.detail
    return delivery, verdict


def test_cairns_artifact_created_as_sent() -> None:
    delivery, verdict = verified(WIRE)
    assert (verdict.event, verdict.delivery_key) == ("artifact.created", "evt_7f3c9a12")
    assert verdict.title == "cairn artifact.created — Q3 audit notes (markdown)"
    assert not verdict.ignore
    address = cairn.derive_address(delivery, verdict)
    assert address is not None and address.as_dict() == {
        "kind": "cairn_comment",
        "provider": "cairn",
        "display": "cairn cairn.example artifact a1b2c3",
        "instance": "https://cairn.example",
        "base": "https://cairn.example",
        "artifact_id": "a1b2c3",
    }
    # The artifact event is nobody's echo.
    assert cairn.echo_clues(delivery, verdict) == EchoClues()
    assert cairn.CONNECTION.instance_of(address) == "https://cairn.example"
    assert cairn.CONNECTION.account_matches("https://cairn.example", address)


def test_the_event_id_header_must_name_the_body() -> None:
    assert cairn.verify(deliver(WIRE, **{"X-Cairn-Event-Id": "evt_7f3c9a12"})).ok
    refused = cairn.verify(deliver(WIRE, **{"X-Cairn-Event-Id": "evt_other"}))
    assert not refused.ok and "X-Cairn-Event-Id" in refused.detail


@pytest.mark.parametrize(
    ("data", "title"),
    [
        ({"share_type": None}, "cairn artifact.created — Q3 audit notes"),
        ({"title": None}, "cairn artifact.created"),
        ({"title": 7}, "cairn artifact.created"),
        (
            {"title": "Line one\nline   two", "share_type": "html"},
            "cairn artifact.created — Line one line two (html)",
        ),
    ],
)
def test_titles(data: dict[str, Any], title: str) -> None:
    assert cairn.verify(deliver(wire(**data))).title == title


def test_the_event_name_is_cairns_kind_or_unknown() -> None:
    updated = {**WIRE, "kind": "artifact.updated"}
    assert cairn.verify(deliver(updated)).event == "artifact.updated"
    odd = {**WIRE, "kind": "Artifact Created!"}
    assert cairn.verify(deliver(odd)).event == "unknown"
    assert cairn.verify(deliver({**WIRE, "kind": "ping"})).ignore


def test_a_body_from_another_source_is_not_a_cairn_event() -> None:
    verdict = cairn.verify(deliver({**WIRE, "source": "harness"}))
    assert not verdict.ok and verdict.error == "invalid_body"


@pytest.mark.parametrize(
    ("case", "detail"),
    [
        ("stale", "window"),
        ("future", "window"),
        ("no-event-id", "event_id"),
        ("no-created-at", "created_at"),
        ("naive-created-at", "created_at"),
        ("empty-header-id", "X-Cairn-Event-Id"),
        ("wrong-secret", "mismatch"),
        ("bare-hex", "malformed"),
        ("far-future-year", "window"),
    ],
)
def test_refusals(case: str, detail: str) -> None:
    payload = copy.deepcopy(WIRE)
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
        payload["created_at"] = "2026-09-11T12:00:00"
    elif case == "empty-header-id":
        headers["X-Cairn-Event-Id"] = ""
    elif case == "wrong-secret":
        secret = "whsec_other"
    elif case == "far-future-year":
        payload["created_at"] = "9999-12-31T23:59:59-23:59"
    delivery = deliver(payload, secret, at, **headers)
    if case == "bare-hex":
        sig = delivery.headers["X-Cairn-Signature"].removeprefix("sha256=")
        delivery = Delivery("cairn", {"X-Cairn-Signature": sig}, delivery.body, at, SECRET)
    verdict = cairn.verify(delivery)
    assert not verdict.ok and verdict.error == "signature_invalid" and detail in verdict.detail


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("url", "ftp://cairn.example/a/a1b2c3"),
        ("url", "https://user@cairn.example/a/a1b2c3"),
        ("url", "https://Cairn.Example/a/a1b2c3"),
        ("url", None),
        # The instance base is the URL before the artifact's own path: another path is no address.
        ("url", "https://cairn.example/a"),
        ("url", "https://cairn.example/a/other"),
        ("url", "https://cairn.example/b/a1b2c3"),
        ("url", "https://cairn.example/a/a1b2c3?x=1"),
        ("url", "https://cairn.example/a/a1b2c3#top"),
        ("url", "https://cairn.example/../a/a1b2c3"),
        ("url", "https://cairn.example//a/a1b2c3"),
        ("url", "https://cairn.example/c%2fd/a/a1b2c3"),
        ("id", "a1b2c3/../../admin"),
        ("id", ""),
        ("id", 12),
        ("id", None),
    ],
)
def test_no_address_unless_every_field_is_exact(field: str, value: Any) -> None:
    delivery, verdict = verified(wire(**{field: value}))
    assert cairn.derive_address(delivery, verdict) is None


def test_no_address_without_data() -> None:
    for data in (None, "a1b2c3", []):
        payload = {**WIRE, "data": data}
        delivery, verdict = verified(payload)
        assert cairn.derive_address(delivery, verdict) is None


@pytest.mark.parametrize("path", ["/a/", "/artifacts/"])
def test_a_cairn_under_a_path_is_its_own_instance(path: str) -> None:
    """Two Cairns under one host name are two instances: the address carries the base, path and all."""
    delivery, verdict = verified(wire(url=f"https://tools.example.com:8443/cairn-b{path}a1b2c3"))
    address = cairn.derive_address(delivery, verdict)
    assert address is not None
    assert address.fields["base"] == "https://tools.example.com:8443/cairn-b"
    assert address.fields["instance"] == "https://tools.example.com:8443"
    assert address.display == "cairn tools.example.com:8443/cairn-b artifact a1b2c3"
    assert cairn.CONNECTION.instance_of(address) == "https://tools.example.com:8443/cairn-b"
    assert cairn.CONNECTION.account_matches("https://tools.example.com:8443/cairn-b", address)
    for other in ("https://tools.example.com:8443/cairn-a", "https://tools.example.com:8443"):
        assert not cairn.CONNECTION.account_matches(other, address)
    # The default port is not part of the base.
    delivery, verdict = verified(wire(url="https://cairn.example:443/a/a1b2c3"))
    address = cairn.derive_address(delivery, verdict)
    assert address is not None and address.fields["base"] == "https://cairn.example"


def comment_event(comment_id: Any = "cm_1001", body: Any = "Looks right.") -> dict[str, Any]:
    """A comment event in the wire format: ``data`` is the comment, its artifact embedded."""
    return {
        "source": "cairn",
        "kind": "comment.created",
        "event_id": "evt_c0mment1",
        "created_at": WIRE["created_at"],
        "data": {
            "id": comment_id,
            "body": body,
            "actor_id": "switchboard",
            "artifact": {"id": "a1b2c3", "title": "Q3 audit notes", "url": "https://cairn.example/a/a1b2c3"},
        },
    }


def test_a_comment_event_is_on_its_artifacts_thread_with_its_clues() -> None:
    delivery, verdict = verified(comment_event(body="Done." + reply_marker(REPLY_ID)))
    assert verdict.title == "cairn comment.created — Q3 audit notes"
    address = cairn.derive_address(delivery, verdict)
    _, artifact_verdict = verified(WIRE)
    # One thread (the display) for the artifact and the comments on it.
    artifact_address = cairn.derive_address(delivery, artifact_verdict)
    assert (
        address is not None and artifact_address is not None and address.display == artifact_address.display
    )
    assert cairn.echo_clues(delivery, verdict) == EchoClues(object_ids=("cm_1001",), marker=REPLY_ID)


@pytest.mark.parametrize("comment_id", [12, "cm/1", "", None])
def test_a_comment_id_that_is_not_exact_is_no_clue(comment_id: Any) -> None:
    delivery, verdict = verified(comment_event(comment_id, body="hi"))
    assert cairn.echo_clues(delivery, verdict) == EchoClues()


def legacy(**changes: Any) -> dict[str, Any]:
    """The shape Switchboard 0.1 documented (``type``, ``artifact``, ``comment``)."""
    payload = {
        "event_id": "evt_01legacy",
        "type": "comment.created",
        "created_at": WIRE["created_at"],
        "artifact": {
            "id": "art_42",
            "title": "Q3 latency report",
            "url": "https://cairn.example.com/artifacts/art_42",
        },
        "comment": {"id": "cmt_7", "body": "Thanks" + reply_marker(REPLY_ID)},
    }
    return {**payload, **changes}


def test_the_0_1_shape_is_still_read() -> None:
    delivery, verdict = verified(legacy())
    assert (verdict.event, verdict.title) == (
        "comment.created",
        "Cairn comment.created on art_42 — Q3 latency report",
    )
    address = cairn.derive_address(delivery, verdict)
    assert address is not None and address.display == "cairn cairn.example.com artifact art_42"
    assert cairn.echo_clues(delivery, verdict) == EchoClues(object_ids=("cmt_7",), marker=REPLY_ID)
    assert cairn.verify(deliver(legacy(type="ping"))).ignore


MESSY = st.one_of(st.none(), st.integers(), st.text(max_size=60), st.lists(st.text(max_size=5), max_size=3))


@settings(max_examples=200, deadline=None)
@given(kind=MESSY, ident=MESSY, url=MESSY, title=MESSY, share=MESSY, comment=MESSY)
def test_any_verified_body_gives_strict_fields_or_none(
    kind: Any, ident: Any, url: Any, title: Any, share: Any, comment: Any
) -> None:
    payload = {**WIRE, "kind": kind, "data": {"id": ident, "url": url, "title": title, "share_type": share}}
    payload["data"]["artifact"] = {"id": ident, "url": url}
    payload["data"]["body"] = comment
    delivery = deliver(payload)
    verdict = cairn.verify(delivery)
    assert verdict.ok and "\n" not in verdict.title
    address = cairn.derive_address(delivery, verdict)
    if address is not None:
        assert address.fields["artifact_id"] == ident and isinstance(url, str)
        assert "\n" not in address.display
    assert isinstance(cairn.echo_clues(delivery, verdict), EchoClues)
