"""A connection kind whose plain callables raise something other than the documented
``KeyError``/``TypeError``/``ValueError`` (an ``AttributeError`` from ``address.fields[...]``
being a number, say) is a provider fault handled as docs/plugins.md says for a failure of each:
``account_matches`` no match, ``target_of`` ``""``, ``instance_of`` no instance,
``normalize_account_key`` a refused account key. Before, the exception escaped: the agent's reply,
the owner's ``connection add`` and the kind's deliveries failed with an internal error."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from fixtures import memo_plugin

from switchboard import connections as conn
from switchboard import reply
from switchboard.errors import SwitchboardError
from switchboard.sdk import Address, ConnectionKind, Delivery, SourceKind, Verdict, hookimpl
from switchboard.services import Services
from switchboard.testing import claimed_todo, hexmac, human_and_endpoint, make_webhook, post, todo

BODY = json.dumps({"room": "acme.ops", "text": "Checkout button does nothing"}).encode()


def _broken(*args: object) -> Any:
    raise AttributeError("'int' object has no attribute 'lower'")


def _address(name: str) -> Address:
    return Address("memo_room", name, f"{name} acme.ops", {"room": "acme.ops"})


def _address_of(name: str) -> Callable[[Delivery, Verdict], Address]:
    return lambda delivery, verdict: _address(name)


class Raising:
    __name__ = "raising_plugin"

    @hookimpl
    def register_kinds(self, register: Callable[[SourceKind | ConnectionKind], None]) -> None:
        base = dataclasses.replace(memo_plugin.CONNECTION, settings=(), secret_rules=())
        register(dataclasses.replace(base, name="r_match", account_matches=_broken))
        register(dataclasses.replace(base, name="r_target", target_of=_broken))
        register(dataclasses.replace(base, name="r_key", normalize_account_key=_broken))
        register(dataclasses.replace(base, name="r_instance", instance_of=_broken))
        register(
            dataclasses.replace(
                memo_plugin.SOURCE, name="r_instance", derive_address=_address_of("r_instance")
            )
        )


@pytest.fixture
def extra_providers() -> list[object]:
    return [Raising()]


async def test_account_matches_that_raises_is_no_connection(services: Services, db: Any) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(services, owner, kind="r_match", name="m", account_key="acme", secret="tok")
    row = await claimed_todo(db, endpoint, _address("r_match"))
    with pytest.raises(SwitchboardError) as err:
        await reply.send_reply(services, endpoint, row.id, "On it.")
    assert err.value.code == "no_connection"


async def test_target_of_that_raises_is_not_allowed(services: Services, db: Any) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="r_target", name="m", account_key="acme", secret="tok", targets=["acme.*"]
    )
    row = await claimed_todo(db, endpoint, _address("r_target"))
    with pytest.raises(SwitchboardError) as err:
        await reply.send_reply(services, endpoint, row.id, "On it.")
    assert err.value.code == "target_not_allowed"


async def test_normalize_account_key_that_raises_refuses_the_key(
    services: Services, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    owner, _ = await human_and_endpoint(db)
    with caplog.at_level(logging.ERROR), pytest.raises(SwitchboardError) as err:
        await conn.create_connection(
            services, owner, kind="r_key", name="m", account_key="acme", secret="tok"
        )
    assert err.value.code == "invalid_argument"
    assert "account key for r_key" in err.value.message and "could not read it" in err.value.message
    assert (
        "plugin 'raising_plugin': connection kind 'r_key': normalize_account_key raised AttributeError"
        in (caplog.text)
    )


async def test_instance_of_that_raises_keeps_the_delivery_without_an_address(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "r_instance")
    assert secret is not None
    signed = {"Content-Type": "application/json", "Memo-Signature": "sha256=" + hexmac(secret, BODY)}
    status, answer, _ = await post(base_url, token, BODY, signed)
    assert status == 202 and answer["created"] == 1, answer
    # An unbound webhook and an address that names no instance: the address is kept, unbound.
    assert (await todo(services, answer["todos"][0]["id"])).reply_to == _address("r_instance").as_dict()
