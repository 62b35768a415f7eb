"""A third-party kind's ``PostResult`` carries what its provider answered: an object id or error code
holding a NUL (PostgreSQL text cannot store one) or a lone surrogate (neither engine can encode one),
or an error class that is none of the documented ones (longer than the row's column, and nothing
the agent can act on), failed the record of the dial: ``reply`` was an internal error and its row
stayed ``pending`` until the sweeper called it ``unknown``. An id or code the row cannot hold is
dropped (the outcome is kept); an unknown class is a provider fault, recorded ``unknown`` as
docs/plugins.md says of an answer the core cannot use."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import pytest
from fixtures import memo_plugin

from switchboard import connections as conn
from switchboard import reply
from switchboard.sdk import Address, ConnectionKind, PostResult, SourceKind, hookimpl
from switchboard.services import Services
from switchboard.testing import claimed_todo, human_and_endpoint

KEPT: dict[str, PostResult] = {
    "t_id_nul": PostResult(state="sent", object_id="m\x00001"),
    "t_id_surrogate": PostResult(state="sent", object_id="m\ud800"),
    "t_code_nul": PostResult(state="failed", error_class="invalid", error_code="bad\x00code"),
    "t_code_surrogate": PostResult(state="failed", error_class="invalid", error_code="bad\udcffcode"),
}
FAULTS: dict[str, PostResult] = {
    "t_class_long": PostResult(state="failed", error_class="upstream_gateway_timed_out"),  # type: ignore[arg-type]
    "t_class_unknown": PostResult(state="failed", error_class="timeout"),  # type: ignore[arg-type]
}


def _connection(name: str, answer: PostResult) -> ConnectionKind:
    async def post_reply(reply: Any) -> Any:
        return answer

    return dataclasses.replace(
        memo_plugin.CONNECTION, name=name, settings=(), secret_rules=(), post=post_reply
    )


class OddPostText:
    __name__ = "odd_post_text"

    @hookimpl
    def register_kinds(self, register: Callable[[SourceKind | ConnectionKind], None]) -> None:
        for name, result in {**KEPT, **FAULTS}.items():
            register(_connection(name, result))


@pytest.fixture
def extra_providers() -> list[object]:
    return [memo_plugin, OddPostText()]


async def _reply(services: Services, db: Any, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(services, owner, kind=name, name="odd", account_key="acme", secret="tok")
    row = await claimed_todo(db, endpoint, Address("memo_room", name, "memo acme.ops", {"room": "acme.ops"}))
    answer = await asyncio.wait_for(reply.send_reply(services, endpoint, row.id, "On it."), 30)
    return answer, await reply.replies_of(services, row.id)


@pytest.mark.parametrize("name", list(KEPT))
async def test_an_id_or_code_the_row_cannot_hold_is_dropped_and_the_outcome_kept(
    services: Services, db: Any, name: str
) -> None:
    answer, [row] = await _reply(services, db, name)
    expected = KEPT[name]
    assert answer["state"] == expected.state, answer
    assert (row["state"], row["error_class"]) == (expected.state, expected.error_class)
    assert (row["provider_object_id"], row["error_code"]) == (None, None)


@pytest.mark.parametrize("name", list(FAULTS))
async def test_an_unknown_error_class_is_a_provider_fault(
    services: Services, db: Any, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        answer, [row] = await _reply(services, db, name)
    assert (answer["state"], answer["error_class"]) == ("unknown", "server"), answer
    assert (row["state"], row["error_code"]) == ("unknown", "provider_error")
    assert f"connection kind '{name}': post answered a PostResult whose error_class is" in caplog.text
