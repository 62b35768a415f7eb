"""A plugin whose ``post`` or ``test`` never answers (an ``await`` on something that never comes) is
a provider fault after a bound (``plugin_checks.CALL_TIMEOUT``): the reply is recorded ``unknown``
and the test failed, instead of the agent's ``reply`` and the owner's ``connection test`` hanging
for ever with the reply row pending and one of the owner's outbound slots held."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import pytest
from fixtures import memo_plugin

from switchboard import connections as conn
from switchboard import plugin_checks, reply
from switchboard.sdk import Address, ConnectionKind, SourceKind, hookimpl
from switchboard.services import Services
from switchboard.testing import claimed_todo, human_and_endpoint


async def _never(_: Any) -> Any:
    await asyncio.Event().wait()


class Stuck:
    __name__ = "stuck_plugin"

    @hookimpl
    def register_kinds(self, register: Callable[[SourceKind | ConnectionKind], None]) -> None:
        register(
            dataclasses.replace(
                memo_plugin.CONNECTION, name="stuck", settings=(), secret_rules=(), post=_never, test=_never
            )
        )


@pytest.fixture
def extra_providers() -> list[object]:
    return [Stuck()]


@pytest.fixture(autouse=True)
def short_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugin_checks, "CALL_TIMEOUT", 0.5)


async def test_a_post_that_never_answers_is_recorded_unknown(
    services: Services, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="stuck", name="stuck", account_key="acme", secret="tok"
    )
    row = await claimed_todo(
        db, endpoint, Address("memo_room", "stuck", "memo acme.ops", {"room": "acme.ops"})
    )
    with caplog.at_level(logging.ERROR):
        answer = await asyncio.wait_for(reply.send_reply(services, endpoint, row.id, "On it."), 20)
    assert (answer["state"], answer["error_class"]) == ("unknown", "server"), answer
    assert "plugin 'stuck_plugin': connection kind 'stuck': post did not answer within 0.5 s" in caplog.text


async def test_a_connection_test_that_never_answers_fails(
    services: Services, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    owner, _ = await human_and_endpoint(db)
    made = await conn.create_connection(
        services, owner, kind="stuck", name="stuck", account_key="acme", secret="tok"
    )
    with caplog.at_level(logging.ERROR):
        answer = await asyncio.wait_for(conn.test_connection(services, owner, made["id"]), 20)
    assert (answer["ok"], answer["error_class"]) == (False, "server"), answer
    assert "plugin 'stuck_plugin': connection kind 'stuck': test did not answer within 0.5 s" in caplog.text
