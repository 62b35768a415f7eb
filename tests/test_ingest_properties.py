"""Property tests: arbitrary headers and bodies never crash a verifier or an address parser, and a
generic or unverified delivery never yields a reply address."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from switchboard import plugins
from switchboard.ingest import address_for
from switchboard.provider import Address, Delivery, EchoClues, Verdict
from switchboard.sanitize import clean_line, delivery_key, redact_headers, storable, storable_encoded
from switchboard.todos import encode_payload

PROVIDERS = plugins.load()
SERVICES: Any = SimpleNamespace(providers=PROVIDERS)
KINDS = sorted(PROVIDERS.sources)
SIGNED = [k for k in KINDS if PROVIDERS.sources[k].secret != "none"]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HEADER_NAMES = [
    "X-Hub-Signature-256",
    "X-GitHub-Event",
    "X-GitHub-Delivery",
    "X-Gitea-Signature",
    "X-Forgejo-Signature",
    "X-Gitea-Event-Type",
    "X-Gitea-Event",
    "X-Gitea-Delivery",
    "X-Slack-Signature",
    "X-Slack-Request-Timestamp",
    "Stripe-Signature",
    "X-Cairn-Signature",
    "X-Cairn-Event-Id",
    "Content-Type",
    "webhook-id",
    "X-Delivery-Id",
]
header_values = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["", "sha256=", "v0=", "t=1,v1=", "application/x-www-form-urlencoded", "0" * 64]),
    st.builds(lambda h: "sha256=" + h, st.text("0123456789abcdef", max_size=70)),
    st.builds(lambda n: str(n), st.integers()),
)
headers_strategy = st.dictionaries(
    st.one_of(st.sampled_from(HEADER_NAMES), st.text(min_size=1, max_size=20)), header_values, max_size=8
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=25,
)
bodies = st.one_of(
    st.binary(max_size=400),
    st.builds(lambda v: json.dumps(v).encode(), json_values),
    st.builds(lambda v: b"payload=" + json.dumps(v).encode(), json_values),
)


def _delivery(kind: str, headers: dict[str, str], body: bytes, secret: str | None) -> Delivery:
    return Delivery(kind, CIMultiDict(headers), body, datetime.now(UTC), secret)


@SETTINGS
@given(kind=st.sampled_from(KINDS), headers=headers_strategy, body=bodies, secret=st.text(max_size=40))
def test_verifiers_never_raise_and_unverified_deliveries_get_no_address(
    kind: str, headers: dict[str, str], body: bytes, secret: str
) -> None:
    delivery = _delivery(kind, headers, body, secret or None)
    verdict = PROVIDERS.source(delivery.source).verify(delivery)
    assert isinstance(verdict, Verdict)
    assert verdict.error in ("signature_invalid", "invalid_body")
    verified = PROVIDERS.sources[kind].secret != "none" and verdict.ok
    if verdict.ok:
        # Whatever the verifier read is safe to store and show.
        clean_line(verdict.title, 300)
        clean_line(verdict.event, 100)
        delivery_key(verdict.delivery_key, body)
        storable(verdict.payload)
        assert isinstance(PROVIDERS.source(delivery.source).echo_clues(delivery, verdict), EchoClues)
    address = address_for(SERVICES, delivery, verdict, verified) if verdict.ok else None
    if kind == "generic" or not verified:
        assert address is None
    # Even asked directly, generic never derives an address.
    if kind == "generic" and verdict.ok:
        assert PROVIDERS.source(delivery.source).derive_address(delivery, verdict) is None


# Text as a JSON body can carry it: lone surrogates included (a "\ud800" escape decodes to one).
wild_text = st.text(st.characters(codec=None, categories=None), max_size=12) | st.text(
    st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=6
)
wild_json = st.recursive(
    st.none() | st.integers() | wild_text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(wild_text, children, max_size=3),
    max_leaves=12,
)


@SETTINGS
@given(payload=wild_json)
def test_a_storable_payload_encodes_as_utf8_and_as_the_todo_stores_it(payload: Any) -> None:
    cleaned, encoded = storable_encoded(payload)
    # Ingest hands these bytes to every todo of the delivery: they must be the todo's own encoding.
    assert encoded == encode_payload(cleaned)
    assert json.loads(encoded.decode("utf-8")) == cleaned
    if re.search("[\ud800-\udfff]", json.dumps(payload, ensure_ascii=False)) is None:
        assert cleaned == payload  # only lone surrogates are replaced


# ---------------------------------------------------------------------------------------------
# Address parsers over correctly signed deliveries with hostile field values

messy = st.one_of(
    json_values,
    st.sampled_from(
        [
            "acme/api",
            "acme/..",
            "../x",
            "a/b/c",
            "https://github.com/acme/api",
            "https://GITHUB.com/a/b",
            "https://x@github.com/a/b",
            "http://gitea.lan:3000/a/b",
            "https://h:0/a",
            "https://[::1]/a",
            "C0456EFGH",
            "c0456",
            "1726990000.000100",
            "1726990000",
            "T0123",
            "art_01",
            "art/../x",
            7,
            0,
            -3,
            True,
            2**40,
        ]
    ),
)


def _forge_payload(draw_values: dict[str, Any]) -> dict[str, Any]:
    return {
        "action": draw_values["action"],
        "repository": {"html_url": draw_values["url"], "full_name": draw_values["repo"]},
        "issue": {
            "number": draw_values["number"],
            "title": draw_values["title"],
            "pull_request": draw_values["pr"],
        },
        "pull_request": draw_values["pull"],
        "comment": {"id": draw_values["number"], "body": draw_values["title"]},
    }


forge_fields = st.fixed_dictionaries(
    {
        "action": messy,
        "url": messy,
        "repo": messy,
        "number": messy,
        "title": messy,
        "pr": messy,
        "pull": messy,
    }
)
REPO = re.compile(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+")
HOST = re.compile(r"[a-z0-9.-]+(:[0-9]{1,5})?")
SLACK_ID = re.compile(r"[A-Z0-9]+")
SLACK_TS = re.compile(r"\d+\.\d+")


def _sign(kind: str, secret: str, body: bytes, event: str) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if kind == "github":
        return {"X-Hub-Signature-256": "sha256=" + digest, "X-GitHub-Event": event}
    if kind == "gitea":
        return {"X-Gitea-Signature": digest, "X-Gitea-Event-Type": event}
    if kind == "cairn":
        return {"X-Cairn-Signature": "sha256=" + digest}
    ts = str(int(time.time()))
    mac = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Signature": "v0=" + mac, "X-Slack-Request-Timestamp": ts}


def _check_address(address: Address | None) -> None:
    if address is None:
        return
    assert "\n" not in address.display and "\r" not in address.display
    fields = address.fields
    if address.kind == "forge_comment":
        assert REPO.fullmatch(fields["repo"]) and ".." not in fields["repo"]
        assert HOST.fullmatch(fields["host"])
        assert isinstance(fields["number"], int) and not isinstance(fields["number"], bool)
        assert fields["number"] > 0
    elif address.kind == "slack_thread":
        assert SLACK_ID.fullmatch(fields["team_id"]) and SLACK_ID.fullmatch(fields["channel"])
        assert SLACK_TS.fullmatch(fields["thread_ts"])
    elif address.kind == "cairn_comment":
        assert re.fullmatch(r"https?://[a-z0-9.-]+(:[0-9]{1,5})?", fields["instance"])
        assert re.fullmatch(r"[A-Za-z0-9_-]+", fields["artifact_id"])
    else:
        pytest.fail(f"unexpected address kind {address.kind}")


@SETTINGS
@given(
    kind=st.sampled_from(["github", "gitea"]),
    fields=forge_fields,
    event=st.sampled_from(["issues", "issue_comment", "pull_request", "pull_request_review_comment", "push"]),
)
def test_forge_address_parsers_never_raise_and_only_return_strict_fields(
    kind: str, fields: dict[str, Any], event: str
) -> None:
    body = json.dumps(_forge_payload(fields)).encode()
    delivery = _delivery(kind, _sign(kind, "s3cret", body, event), body, "s3cret")
    verdict = PROVIDERS.source(delivery.source).verify(delivery)
    assert verdict.ok
    _check_address(address_for(SERVICES, delivery, verdict, True))
    PROVIDERS.source(delivery.source).echo_clues(delivery, verdict)


@SETTINGS
@given(
    team=messy,
    channel=messy,
    ts=messy,
    thread=messy,
    subtype=st.one_of(st.none(), st.sampled_from(["message_changed", "bot_message", "channel_join"]), messy),
    etype=st.sampled_from(["message", "app_mention", "reaction_added"]),
    metadata=messy,
)
def test_slack_address_parser_never_raises_and_only_returns_strict_fields(**f: Any) -> None:
    event: dict[str, Any] = {
        "type": f["etype"],
        "channel": f["channel"],
        "ts": f["ts"],
        "metadata": f["metadata"],
    }
    if f["thread"] is not None:
        event["thread_ts"] = f["thread"]
    if f["subtype"] is not None:
        event["subtype"] = f["subtype"]
    body = json.dumps(
        {"type": "event_callback", "team_id": f["team"], "event_id": "Ev1", "event": event}
    ).encode()
    delivery = _delivery("slack", _sign("slack", "s3cret", body, ""), body, "s3cret")
    verdict = PROVIDERS.source(delivery.source).verify(delivery)
    assert verdict.ok
    _check_address(address_for(SERVICES, delivery, verdict, True))
    PROVIDERS.source(delivery.source).echo_clues(delivery, verdict)


@SETTINGS
@given(artifact=messy, url=messy, comment=messy, event_id=messy, created_at=messy)
def test_cairn_parser_never_raises_and_only_returns_strict_fields(**f: Any) -> None:
    payload = {
        "event_id": f["event_id"],
        "type": "artifact.updated",
        "created_at": f["created_at"],
        "artifact": {"id": f["artifact"], "url": f["url"]},
        "comment": {"id": f["comment"], "body": f["comment"]},
    }
    for created_at in (f["created_at"], datetime.now(UTC).isoformat()):
        payload["created_at"] = created_at
        body = json.dumps(payload).encode()
        delivery = _delivery("cairn", _sign("cairn", "s3cret", body, ""), body, "s3cret")
        verdict = PROVIDERS.source(delivery.source).verify(delivery)
        assert isinstance(verdict, Verdict)
        if verdict.ok:
            _check_address(address_for(SERVICES, delivery, verdict, True))
            PROVIDERS.source(delivery.source).echo_clues(delivery, verdict)


@SETTINGS
@given(headers=st.dictionaries(st.text(min_size=1, max_size=30), st.text(max_size=50), max_size=10))
def test_redacted_headers_never_keep_a_signature_or_credential(headers: dict[str, str]) -> None:
    stored = redact_headers(headers)
    for name, value in stored.items():
        if re.search(r"signature|authorization|cookie|token|secret", name, re.I):
            assert value == "[redacted]"
        json.dumps(value).encode()
