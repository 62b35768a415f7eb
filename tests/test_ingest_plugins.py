"""Ingest is provider-agnostic: a kind the core never heard of works end to end, every call reaches
the kind that owns the delivery, and a provider whose callable answers with something unusable (an
awaitable where a verdict is due) is a provider fault: 503, logged once, never a verdict."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from fixtures import memo_plugin
from fixtures.ingest_kit import cairn_body, fixture_bytes

from switchboard import plugins
from switchboard.plugin_checks import ProviderFault
from switchboard.provider import Address, Delivery, EchoClues, Verdict
from switchboard.sdk import ConnectionKind, SourceKind, hookimpl
from switchboard.services import Services
from switchboard.testing import (
    cairn_headers,
    counts,
    events,
    gitea_headers,
    github_headers,
    hexmac,
    make_webhook,
    post,
    slack_headers,
    stripe_headers,
    todo,
)

MEMO_BODY = json.dumps({"room": "acme.ops", "text": "Checkout button does nothing"}).encode()


class Faulty:
    """A kind ``faulty`` whose verify is a plain function that returns a coroutine (the bug an
    ``async def`` hidden behind a plain wrapper makes), and ``halfway``, whose derive_address does."""

    __name__ = "faulty_plugin"

    @hookimpl
    def register_kinds(self, register: Callable[[SourceKind | ConnectionKind], None]) -> None:
        async def verdict_later(delivery: Delivery) -> Verdict:
            return Verdict(ok=True, detail="too late", payload={})

        async def address_later(delivery: Delivery, verdict: Verdict) -> Address | None:
            return None

        register(SourceKind("faulty", secret="none", verify=lambda delivery: verdict_later(delivery)))
        register(
            SourceKind(
                "halfway",
                secret="minted",
                verify=memo_plugin.verify,
                derive_address=lambda delivery, verdict: address_later(delivery, verdict),
            )
        )


@pytest.fixture
def extra_providers() -> list[object]:
    return [memo_plugin, Faulty()]


def _memo_headers(secret: str, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Memo-Delivery": "6c4c5f3e-1b8e-4b36-a1a5-000000000042",
        "Memo-Signature": "sha256=" + hexmac(secret, body),
    }


async def test_an_unknown_provider_ingests_end_to_end_with_no_core_change(
    services: Services, base_url: str
) -> None:
    assert "memo" in services.providers.sources
    token, secret, _ = await make_webhook(services, "memo")
    assert secret and secret.startswith("whsec_")

    status, answer, _ = await post(base_url, token, MEMO_BODY, _memo_headers("wrong", MEMO_BODY))
    assert status == 401 and await counts(services) == (0, 0)

    status, answer, _ = await post(base_url, token, MEMO_BODY, _memo_headers(secret, MEMO_BODY))
    assert status == 202 and answer["verified"] is True and answer["created"] == 1
    row = await todo(services, answer["todos"][0]["id"])
    assert row.source == "memo" and row.kind == "memo.message"
    assert row.title == "Memo: Checkout button does nothing"
    assert row.reply_to == {
        "kind": "memo_room",
        "provider": "memo",
        "display": "memo acme.ops",
        "room": "acme.ops",
    }
    (event,) = await events(services)
    assert event.delivery_key == "6c4c5f3e-1b8e-4b36-a1a5-000000000042"
    assert event.headers["Memo-Signature"] == "[redacted]"

    _, again, _ = await post(base_url, token, MEMO_BODY, _memo_headers(secret, MEMO_BODY))
    assert again["disposition"] == "duplicate" and again["todos"][0]["id"] == row.id


async def test_a_verifier_that_returns_a_coroutine_is_a_provider_fault_logged_once(
    services: Services, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    token, _, _ = await make_webhook(services, "faulty")
    with warnings.catch_warnings():
        # The coroutine is closed, never left to be reported as never awaited.
        warnings.simplefilter("error", RuntimeWarning)
        with caplog.at_level(logging.ERROR):
            for _ in range(3):
                status, answer, _ = await post(base_url, token, b"{}", {})
                assert (status, answer["error"]) == (503, "unavailable"), answer
    assert await counts(services) == (0, 0)
    faults = [r for r in caplog.records if "returned an awaitable where a value is due" in r.getMessage()]
    assert len(faults) == 1
    assert faults[0].getMessage() == (
        "plugin 'faulty_plugin': source kind 'faulty': verify returned an awaitable where a value is due; "
        "make it a plain def"
    )


async def test_an_address_that_comes_back_as_a_coroutine_is_no_address(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "halfway")
    assert secret is not None
    # A provider bug must not lose the delivery: the todo is made, without an address.
    status, answer, _ = await post(base_url, token, MEMO_BODY, _memo_headers(secret, MEMO_BODY))
    assert status == 202 and answer["verified"] is True, answer
    assert (await todo(services, answer["todos"][0]["id"])).reply_to is None
    kind = services.providers.source("halfway")
    delivery = Delivery("halfway", _memo_headers("s", MEMO_BODY), MEMO_BODY, datetime.now(UTC), "s")
    with pytest.raises(ProviderFault):
        kind.derive_address(delivery, kind.verify(delivery))


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
    out["memo"] = Delivery("memo", _memo_headers(secret, MEMO_BODY), MEMO_BODY, now, secret)
    return out


ADDRESS_KINDS = {
    "github": "forge_comment",
    "gitea": "forge_comment",
    "slack": "slack_thread",
    "cairn": "cairn_comment",
    "memo": "memo_room",
    "stripe": None,
    "generic": None,
}


def test_each_call_reaches_the_kind_that_owns_the_delivery() -> None:
    providers = plugins.load(extra=[memo_plugin])
    assert set(ADDRESS_KINDS) <= set(providers.sources)
    details = set()
    memo_plugin.CALLS.clear()
    for name, delivery in _valid_deliveries().items():
        kind = providers.source(name)
        verdict = kind.verify(delivery)
        assert verdict.ok, (name, verdict)
        details.add(verdict.detail)
        address = kind.derive_address(delivery, verdict)
        expected = ADDRESS_KINDS[name]
        if expected is None:
            assert address is None, name
        else:
            assert isinstance(address, Address) and address.kind == expected and address.provider == name
        assert isinstance(kind.echo_clues(delivery, verdict), EchoClues)
    # Different providers answered (each verifier names its own scheme); memo saw only its own.
    assert {
        "v1 signature ok",
        "v0 signature ok",
        "memo signature ok",
        "not verified (token trust)",
    } <= details
    assert {source for _, source in memo_plugin.CALLS} == {"memo"}
