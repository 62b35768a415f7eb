"""Ingest is provider-agnostic: a kind the core never heard of works end to end, and with several
providers installed every hook call reaches the provider that owns the delivery's kind."""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
from datetime import UTC, datetime

import pytest
from fixtures import linear_plugin
from fixtures.ingest_kit import cairn_body, fixture_bytes

from switchboard import plugins
from switchboard.provider import Address, Delivery, EchoClues, Verdict
from switchboard.services import Services
from switchboard.testing import (
    cairn_headers,
    counts,
    events,
    gitea_headers,
    github_headers,
    make_webhook,
    post,
    slack_headers,
    stripe_headers,
    todo,
)

LINEAR_BODY = json.dumps(
    {
        "action": "create",
        "type": "Issue",
        "data": {"id": "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9", "title": "Checkout button does nothing"},
        "url": "https://linear.app/acme/issue/ENG-42",
        "webhookTimestamp": 1732960800000,
    }
).encode()


@pytest.fixture
def extra_providers() -> list[object]:
    return [linear_plugin]


def _linear_headers(secret: str, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Linear-Delivery": "6c4c5f3e-1b8e-4b36-a1a5-000000000042",
        "Linear-Event": "Issue",
        "Linear-Signature": hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
    }


async def test_an_unknown_provider_ingests_end_to_end_with_no_core_change(
    services: Services, base_url: str
) -> None:
    assert "linear" in services.providers.sources
    token, secret, _ = await make_webhook(services, "linear")
    assert secret and secret.startswith("whsec_")

    status, answer, _ = await post(base_url, token, LINEAR_BODY, _linear_headers("wrong", LINEAR_BODY))
    assert status == 401 and await counts(services) == (0, 0)

    status, answer, _ = await post(base_url, token, LINEAR_BODY, _linear_headers(secret, LINEAR_BODY))
    assert status == 202 and answer["verified"] is True and answer["created"] == 1
    row = await todo(services, answer["todos"][0]["id"])
    assert row.source == "linear" and row.kind == "Issue.create"
    assert row.title == "Linear Issue.create — Checkout button does nothing"
    assert row.reply_to == {
        "kind": "linear_comment",
        "provider": "linear",
        "display": "linear issue 2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9",
        "issue_id": "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9",
    }
    (event,) = await events(services)
    assert event.delivery_key == "6c4c5f3e-1b8e-4b36-a1a5-000000000042"
    assert event.headers["Linear-Signature"] == "[redacted]"

    _, again, _ = await post(base_url, token, LINEAR_BODY, _linear_headers(secret, LINEAR_BODY))
    assert again["disposition"] == "duplicate" and again["todos"][0]["id"] == row.id


def _valid_deliveries() -> dict[str, Delivery]:
    """One well-signed delivery of every installed kind, as the verifiers receive them."""
    now = datetime.now(UTC)
    secret = "whsec_dispatch"
    out: dict[str, Delivery] = {}
    body = fixture_bytes("github/issue_comment/created.payload.json")
    out["github"] = Delivery("github", github_headers(secret, body, "issue_comment"), body, now, secret)
    body = fixture_bytes("gitea/issue_comment.created.json")
    out["gitea"] = Delivery("gitea", gitea_headers(secret, body, "issue_comment"), body, now, secret)
    body = fixture_bytes("slack/message.json")
    out["slack"] = Delivery("slack", slack_headers(secret, body), body, now, secret)
    body = cairn_body("comment.created.json")
    out["cairn"] = Delivery("cairn", cairn_headers(secret, body), body, now, secret)
    body = b'{"id": "evt_1", "type": "charge.refunded"}'
    out["stripe"] = Delivery("stripe", stripe_headers(secret, body), body, now, secret)
    out["generic"] = Delivery("generic", {}, b'{"title": "hi"}', now, None)
    out["linear"] = Delivery("linear", _linear_headers(secret, LINEAR_BODY), LINEAR_BODY, now, secret)
    return out


ADDRESS_KINDS = {
    "github": "forge_comment",
    "gitea": "forge_comment",
    "slack": "slack_thread",
    "cairn": "cairn_comment",
    "linear": "linear_comment",
    "stripe": None,
    "generic": None,
}


def test_each_hook_call_reaches_the_provider_that_owns_the_kind() -> None:
    providers = plugins.load(extra=[linear_plugin])
    assert set(ADDRESS_KINDS) <= set(providers.sources)
    details = set()
    for kind, delivery in _valid_deliveries().items():
        verdict = providers.hook.verify(delivery=delivery)
        assert isinstance(verdict, Verdict) and verdict.ok, (kind, verdict)
        details.add(verdict.detail)
        address = providers.hook.derive_address(delivery=delivery, verdict=verdict)
        expected = ADDRESS_KINDS[kind]
        if expected is None:
            assert address is None, kind
        else:
            assert isinstance(address, Address) and address.kind == expected and address.provider == kind
        assert isinstance(providers.hook.is_echo(delivery=delivery, verdict=verdict), EchoClues)
    # Different providers answered (each verifier names its own scheme).
    assert {
        "v1 signature ok",
        "v0 signature ok",
        "linear signature ok",
        "not verified (token trust)",
    } <= details


def test_two_providers_only_the_owner_answers_and_others_say_none_synchronously() -> None:
    providers = plugins.load(entrypoints=False, extra=[linear_plugin])
    deliveries = _valid_deliveries()
    # Built-ins (generic, stripe) plus linear: a github delivery has no owner here.
    assert providers.hook.verify(delivery=deliveries["github"]) is None
    assert providers.hook.verify(delivery=deliveries["linear"]).detail == "linear signature ok"
    assert providers.hook.verify(delivery=deliveries["stripe"]).detail == "v1 signature ok"

    # Every implementation of every first-result hook answers a foreign kind with a plain None,
    # never a coroutine (which pluggy would take as an answer and so win every kind).
    everything = plugins.load(extra=[linear_plugin])
    foreign = Delivery("nobody", {}, b"{}", datetime.now(UTC), None)
    verdict = Verdict(ok=True, detail="", payload={}, event="x")
    for name in ("verify", "derive_address", "is_echo"):
        for impl in getattr(everything.hook, name).get_hookimpls():
            assert not inspect.iscoroutinefunction(impl.function), (name, impl.plugin_name)
            kwargs = {"delivery": foreign} if name == "verify" else {"delivery": foreign, "verdict": verdict}
            assert impl.function(**kwargs) is None, (name, impl.plugin_name)
