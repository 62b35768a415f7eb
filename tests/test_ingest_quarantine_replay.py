"""A replay of a quarantined delivery is told it was a duplicate and never the held todo, whatever a
person has since decided on it: discarded, expired or released, the held todo is still the owner's
business, not the sender's (the first answer named no todo)."""

from __future__ import annotations

from fixtures.intake_kit import deliver, github_hook

from switchboard import quarantine
from switchboard.intake import HOLD_QUEUE
from switchboard.intake_config import Caller
from switchboard.services import Services


async def _held(services: Services) -> str:
    page = await quarantine.list_held(services.db, Caller.cli())
    [held] = page.rows
    return str(held["id"])


async def test_a_replay_after_the_hold_was_discarded_names_no_todo(services: Services, base_url: str) -> None:
    hook = await github_hook(services, trust={"logins": ["octocat"]})
    status, first = await deliver(base_url, hook, "issues/opened", delivery="d-1")
    assert status == 202 and first["disposition"] == "quarantined" and first["todos"] == []
    await quarantine.discard(services, Caller.cli(), await _held(services), "spam")

    status, again = await deliver(base_url, hook, "issues/opened", delivery="d-1")
    assert status == 202 and again["disposition"] == "duplicate" and again["created"] == 0
    assert again["todos"] == [], again


async def test_a_replay_after_a_release_names_the_work_only(services: Services, base_url: str) -> None:
    hook = await github_hook(services, trust={"logins": ["octocat"]})
    status, first = await deliver(base_url, hook, "issues/opened", delivery="d-2")
    assert status == 202 and first["disposition"] == "quarantined"
    released = await quarantine.release(services, Caller.cli(), await _held(services))
    [made] = released["todos"]

    status, again = await deliver(base_url, hook, "issues/opened", delivery="d-2")
    assert status == 202 and again["disposition"] == "duplicate"
    assert all(t["queue"] != HOLD_QUEUE for t in again["todos"]), again
    assert [t["id"] for t in again["todos"]] == [made["id"]], again
