"""A plugin whose callable answers with the right class but unusable contents (a ``Verdict`` whose
delivery key is a number, an ``Address`` without a display, a ``PostResult`` with an unknown state or
a NaN wait, a ``CheckResult`` whose facts are a list) is a provider fault for that kind only, handled
as documented for a raise (docs/plugins.md): never a 500, a traceback, a hang or a reply left
pending."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from fixtures import memo_plugin

from switchboard import connections as conn
from switchboard import reply
from switchboard.sdk import (
    Address,
    CheckResult,
    ConnectionKind,
    Delivery,
    PostResult,
    SourceKind,
    Verdict,
    hookimpl,
)
from switchboard.services import Services
from switchboard.testing import claimed_todo, counts, hexmac, human_and_endpoint, make_webhook, post, todo

BODY = json.dumps({"room": "acme.ops", "text": "Checkout button does nothing"}).encode()
ODD: Any = 5  # what a plugin passes where a string is due

VERDICTS: dict[str, Verdict] = {
    "v_key": Verdict(ok=True, detail="ok", payload={}, delivery_key=ODD),
    "v_second": Verdict(ok=True, detail="ok", payload={}, secondary_key=ODD),
    "v_set": Verdict(ok=True, detail="ok", payload={"labels": {"bug"}}),
    "v_bytes": Verdict(ok=True, detail="ok", payload=b"{}"),
    "v_respond": Verdict(ok=True, detail="ok", respond={"challenge": {"x"}}),
    "v_respond_str": Verdict(ok=True, detail="ok", respond=ODD),
}
ADDRESSES: dict[str, Address] = {
    "a_display": Address("memo_room", "memo", ODD, {"room": "acme.ops"}),
    "a_fields_none": Address("memo_room", "memo", "memo acme.ops", ODD),
    "a_fields_list": Address("memo_room", "memo", "memo acme.ops", [("room", "acme.ops")]),  # type: ignore[arg-type]
    "a_fields_provider": Address("memo_room", "memo", "memo acme.ops", {"provider": "github"}),
    "a_fields_set": Address("memo_room", "memo", "memo acme.ops", {"room": {"acme.ops"}}),
}
POSTS: dict[str, PostResult] = {
    "p_state": PostResult(state=ODD),
    "p_permalink": PostResult(state="sent", permalink=ODD),
    "p_wait_text": PostResult(state="failed", error_class="rate_limited", retry_after="10", retryable=True),  # type: ignore[arg-type]
    "p_wait_nan": PostResult(
        state="failed", error_class="rate_limited", retry_after=float("nan"), retryable=True
    ),
}
CHECKS: dict[str, CheckResult] = {
    "t_facts_list": CheckResult(ok=True, facts=[("bot_id", "B1")]),  # type: ignore[arg-type]
    "t_facts_none": CheckResult(ok=True, facts=ODD),
    "t_ok_text": CheckResult(ok="no"),  # type: ignore[arg-type]
}


def _verify_with(verdict: Verdict) -> Callable[[Delivery], Verdict]:
    return lambda delivery: verdict


def _address_of(address: Address) -> Callable[[Delivery, Verdict], Address]:
    return lambda delivery, verdict: address


def _connection(
    name: str, post_answer: PostResult | None = None, test_answer: CheckResult | None = None
) -> ConnectionKind:
    async def post_reply(reply: Any) -> Any:
        return post_answer

    async def check(check: Any) -> Any:
        return test_answer

    return dataclasses.replace(
        memo_plugin.CONNECTION, name=name, settings=(), secret_rules=(), post=post_reply, test=check
    )


class OddAnswers:
    __name__ = "odd_answers"

    @hookimpl
    def register_kinds(self, register: Callable[[SourceKind | ConnectionKind], None]) -> None:
        for name, verdict in VERDICTS.items():
            register(SourceKind(name, secret="none", verify=_verify_with(verdict)))
        for name, address in ADDRESSES.items():
            register(
                SourceKind(
                    name, secret="minted", verify=memo_plugin.verify, derive_address=_address_of(address)
                )
            )
        for name, result in POSTS.items():
            register(_connection(name, post_answer=result))
        for name, checked in CHECKS.items():
            register(_connection(name, test_answer=checked))


@pytest.fixture
def extra_providers() -> list[object]:
    return [memo_plugin, OddAnswers()]


@pytest.mark.parametrize("name", list(VERDICTS))
async def test_a_verdict_with_unusable_fields_is_a_503_not_a_500(
    services: Services, base_url: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    token, _, _ = await make_webhook(services, name)
    with caplog.at_level(logging.ERROR):
        status, answer, _ = await post(base_url, token, BODY, {"Content-Type": "application/json"})
    assert (status, answer["error"]) == (503, "unavailable"), answer
    assert answer["message"] == f"the {name} provider could not check this delivery"
    assert await counts(services) == (0, 0)
    assert "Traceback" not in caplog.text
    assert f"plugin 'odd_answers': source kind '{name}': verify returned a Verdict whose " in caplog.text
    # The other kinds still work.
    token, secret, _ = await make_webhook(services, "memo")
    assert secret is not None
    signed = {"Content-Type": "application/json", "Memo-Signature": "sha256=" + hexmac(secret, BODY)}
    status, answer, _ = await post(base_url, token, BODY, signed)
    assert status == 202 and answer["created"] == 1, answer


@pytest.mark.parametrize("name", list(ADDRESSES))
async def test_an_address_with_unusable_fields_is_no_address_and_the_todo_is_made(
    services: Services, base_url: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    token, secret, _ = await make_webhook(services, name)
    assert secret is not None
    signed = {"Content-Type": "application/json", "Memo-Signature": "sha256=" + hexmac(secret, BODY)}
    with caplog.at_level(logging.ERROR):
        status, answer, _ = await post(base_url, token, BODY, signed)
    assert status == 202 and answer["created"] == 1, answer
    assert (await todo(services, answer["todos"][0]["id"])).reply_to is None
    assert "Traceback" not in caplog.text
    assert (
        f"plugin 'odd_answers': source kind '{name}': derive_address returned an Address whose "
        in caplog.text
    )


@pytest.mark.parametrize("name", list(POSTS))
async def test_a_post_result_with_unusable_fields_is_recorded_unknown(
    services: Services, db: Any, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(services, owner, kind=name, name="odd", account_key="acme", secret="tok")
    address = Address("memo_room", name, "memo acme.ops", {"room": "acme.ops"})
    row = await claimed_todo(db, endpoint, address)
    with caplog.at_level(logging.ERROR):
        answer = await asyncio.wait_for(reply.send_reply(services, endpoint, row.id, "On it."), 30)
    assert (answer["state"], answer["error_class"]) == ("unknown", "server"), answer
    assert f"plugin 'odd_answers': connection kind '{name}': post answered a PostResult whose " in caplog.text


@pytest.mark.parametrize("name", list(CHECKS))
async def test_a_check_result_with_unusable_fields_is_a_failed_test(
    services: Services, db: Any, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    owner, _ = await human_and_endpoint(db)
    made = await conn.create_connection(
        services, owner, kind=name, name="odd", account_key="acme", secret="tok"
    )
    with caplog.at_level(logging.ERROR):
        answer = await conn.test_connection(services, owner, made["id"])
    assert (answer["ok"], answer["error_class"]) == (False, "server"), answer
    assert answer["detail"] == "the test call failed unexpectedly"
    assert (
        f"plugin 'odd_answers': connection kind '{name}': test answered a CheckResult whose " in caplog.text
    )
