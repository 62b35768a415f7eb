"""Echo matching is keyed and per target scope (issue 13, item 5).

A delivery is a scope's own reply only when the provider kind, the instance and thread (the derived
address's display) and the object id, the marker or the bot all agree with what that scope recorded.
A value alone never matches: a human's Gitea comment whose id equals a GitHub reply's id is work. And
the answer is per scope: a delivery fanned out to several scopes drops only the todos of the scopes
that made the reply.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from fixtures.ingest_kit import fixture
from sqlalchemy import select, update

from switchboard import connections as conn
from switchboard import reply, tenancy
from switchboard.db import Database, DatabaseUnavailable, utcnow
from switchboard.echo import Origin, SharedEchoReads, echo_scopes, origin_of, own_reply_scopes
from switchboard.ids import new_id
from switchboard.models import Connection, Endpoint, Reply, Todo
from switchboard.owners import Owner, resolve_owner
from switchboard.provider import Address, Delivery, EchoClues, Verdict
from switchboard.services import Services
from switchboard.testing import (
    FakeProvider,
    claimed_todo,
    forge_address,
    gitea_headers,
    github_headers,
    human_and_endpoint,
    make_webhook,
    post,
    slack_address,
)

GITHUB_THREAD = forge_address("github", "github.com")
GITEA_THREAD = forge_address("gitea", "git.example.com")


class Replies:
    """Humans (each with an endpoint) made on first use, and sent replies recorded in their scopes."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.people: dict[str, tuple[Owner, Endpoint]] = {}

    async def person(self, handle: str) -> tuple[Owner, Endpoint]:
        if handle not in self.people:
            self.people[handle] = await human_and_endpoint(self.db, handle)
        return self.people[handle]

    async def record(
        self, address: Address, object_id: str | None, *, handle: str = "ada", provider: Any = ...
    ) -> tuple[str, str]:
        """A sent reply of ``handle``'s scope to ``address`` with this provider object id: (scope,
        reply id). ``provider=None`` is a row made before the provider kind was kept."""
        owner, endpoint = await self.person(handle)
        todo = await claimed_todo(self.db, endpoint, address)
        now = utcnow()
        row = Reply(
            id=new_id("rp"),
            todo_id=todo.id,
            endpoint_id=endpoint.id,
            idempotency_key=new_id("k"),
            state="sent",
            connection_id=None,
            connection_name="c",
            connection_fingerprint="fp_x",
            owner_scope=owner.id,
            address_kind=address.kind,
            provider=address.provider if provider is ... else provider,
            display=address.display,
            thread_key=address.display,
            text_hash="0" * 64,
            provider_object_id=object_id,
            created_at=now,
            updated_at=now,
        )
        async with self.db.write() as s:
            s.add(row)
        return owner.id, row.id


@pytest.fixture
def replies(db: Database) -> Replies:
    return Replies(db)


def origin(address: Address, **clues: Any) -> Origin:
    return Origin.of(address, EchoClues(**clues))


ScopesOf = Callable[[list[str], Origin | None], Awaitable[frozenset[str]]]


@pytest.fixture(params=["alone", "shared"])
def scopes_of(request: pytest.FixtureRequest, db: Database) -> ScopesOf:
    """The echo scopes of one check: made alone, or (``shared``) with its object-id read shared
    with other checks waiting at the same time (ingest's ``SharedEchoReads``), decoys whose
    threads, providers and scopes differ. Every test below must read the same either way: a
    shared read never hands a check another check's rows."""
    if request.param == "alone":
        return lambda scopes, probe: echo_scopes(db, scopes, probe)
    shared = SharedEchoReads(db)

    async def shared_scopes_of(scopes: list[str], probe: Origin | None) -> frozenset[str]:
        decoys = []
        if probe is not None and probe.clues.object_ids:
            clues = EchoClues(object_ids=probe.clues.object_ids)
            decoys = [
                # The same ids on another thread and under another provider, for the same scopes.
                echo_scopes(
                    db, scopes, Origin.of(forge_address("github", "github.com", number=99), clues), shared
                ),
                echo_scopes(
                    db, scopes, Origin.of(forge_address("gitea", "decoy.example.com"), clues), shared
                ),
            ]
        reads = shared.reads
        answers = await asyncio.gather(echo_scopes(db, scopes, probe, shared), *decoys)
        assert shared.reads - reads <= 1, "the checks waiting together took one read"
        return answers[0]

    return shared_scopes_of


async def test_an_object_id_matches_only_with_its_provider_and_thread(
    db: Database, replies: Replies, scopes_of: ScopesOf
) -> None:
    ada, _ = await replies.record(GITHUB_THREAD, "1001")
    bob, _ = await replies.record(GITHUB_THREAD, "2002", handle="bob")
    both = [ada, bob]
    # The reply itself, delivered back: Ada's scope only.
    assert await scopes_of(both, origin(GITHUB_THREAD, object_ids=("1001",))) == {ada}
    # A human's Gitea comment whose id equals the GitHub reply's id: nobody's echo.
    assert await scopes_of(both, origin(GITEA_THREAD, object_ids=("1001",))) == set()
    # The same id on another GitHub thread, or on another instance: not ours either.
    other_issue = forge_address("github", "github.com", number=8)
    other_host = forge_address("github", "ghes.example.com")
    assert await scopes_of(both, origin(other_issue, object_ids=("1001",))) == set()
    assert await scopes_of(both, origin(other_host, object_ids=("1001",))) == set()
    # Only the scopes asked about count.
    assert await scopes_of([bob], origin(GITHUB_THREAD, object_ids=("1001",))) == set()
    assert await scopes_of(both, origin(GITHUB_THREAD, object_ids=("1001", "2002"))) == {ada, bob}


async def test_any_number_of_scopes_and_object_ids_match_exactly(
    db: Database, replies: Replies, scopes_of: ScopesOf
) -> None:
    # The reads take their lists as fixed placeholders, padded to a power of two: every length
    # from one to nine, with the replying scope and the reply's id anywhere in the lists.
    scopes = [(await replies.record(GITHUB_THREAD, f"{n}00", handle=f"h{n}"))[0] for n in range(1, 10)]
    for count in range(1, 10):
        asked = scopes[:count]
        for last in range(count):
            ids = (*(f"{n}00" for n in range(20, 20 + last)), f"{last + 1}00")
            assert await scopes_of(asked, origin(GITHUB_THREAD, object_ids=ids)) == {scopes[last]}
        # Ids that no scope asked about replied with: nobody's echo.
        assert await scopes_of(asked, origin(GITHUB_THREAD, object_ids=("900", "999"))) == (
            {scopes[8]} if count == 9 else set()
        )
    everyone = origin(GITHUB_THREAD, object_ids=tuple(f"{n}00" for n in range(1, 10)))
    assert await scopes_of(scopes[::-1] + scopes, everyone) == set(scopes)


async def test_checks_sharing_a_read_each_get_their_own_answer(db: Database, replies: Replies) -> None:
    ada, _ = await replies.record(GITHUB_THREAD, "1001")
    bob, _ = await replies.record(GITEA_THREAD, "2002", handle="bob")
    shared = SharedEchoReads(db)
    both_ids = EchoClues(object_ids=("1001", "2002"))
    checks = [
        ([ada, bob], Origin.of(GITHUB_THREAD, both_ids)),
        ([ada, bob], Origin.of(GITEA_THREAD, both_ids)),
        ([bob], Origin.of(GITHUB_THREAD, both_ids)),
        ([ada], Origin.of(GITEA_THREAD, both_ids)),
        ([ada, bob], Origin.of(GITHUB_THREAD, EchoClues(object_ids=("2002",)))),
    ]
    answers = await asyncio.gather(*(echo_scopes(db, scopes, probe, shared) for scopes, probe in checks))
    assert answers == [{ada}, {bob}, set(), set(), set()]
    assert shared.reads == 1


async def test_a_failed_or_stopped_shared_read_answers_each_check_and_skips_a_cancelled_one(
    db: Database, replies: Replies, monkeypatch: pytest.MonkeyPatch
) -> None:
    ada, _ = await replies.record(GITHUB_THREAD, "1001")
    shared = SharedEchoReads(db)
    probe = Origin.of(GITHUB_THREAD, EchoClues(object_ids=("1001",)))
    real = db.read_steps

    async def down(steps: Any) -> Any:
        raise DatabaseUnavailable("the database is down")

    monkeypatch.setattr(db, "read_steps", down)
    answers = await asyncio.gather(
        *(echo_scopes(db, [ada], probe, shared) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(answer, DatabaseUnavailable) for answer in answers)
    monkeypatch.setattr(db, "read_steps", real)
    # A check whose request went away gets no answer (its future is cancelled); the others do.
    gone = asyncio.ensure_future(echo_scopes(db, [ada], probe, shared))
    await asyncio.sleep(0)
    gone.cancel()
    assert await echo_scopes(db, [ada], probe, shared) == {ada}
    assert gone.cancelled()

    # Stopped in the middle of a read (the loop closing): its checks are answered, not left waiting.
    async def stuck(steps: Any) -> Any:
        await asyncio.Event().wait()

    monkeypatch.setattr(db, "read_steps", stuck)
    waiting = [asyncio.ensure_future(echo_scopes(db, [ada], probe, shared)) for _ in range(2)]
    await asyncio.sleep(0.05)
    assert shared._task is not None
    shared._task.cancel()
    answers = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 5)
    assert all(isinstance(answer, DatabaseUnavailable) for answer in answers)


async def test_replies_recorded_before_the_provider_was_kept_match_by_their_thread(
    db: Database, replies: Replies, scopes_of: ScopesOf
) -> None:
    ada, _ = await replies.record(GITHUB_THREAD, "1001", provider=None)
    assert await scopes_of([ada], origin(GITHUB_THREAD, object_ids=("1001",))) == {ada}
    assert await scopes_of([ada], origin(GITEA_THREAD, object_ids=("1001",))) == set()


async def test_a_marker_counts_for_its_own_scope_provider_and_thread(
    db: Database, replies: Replies, scopes_of: ScopesOf
) -> None:
    ada, reply_id = await replies.record(GITEA_THREAD, None)
    bob, _ = await replies.record(GITEA_THREAD, None, handle="bob")
    assert await scopes_of([ada, bob], origin(GITEA_THREAD, marker=reply_id)) == {ada}
    assert await scopes_of([bob], origin(GITEA_THREAD, marker=reply_id)) == set()
    other_thread = forge_address("gitea", "git.example.com", number=8)
    assert await scopes_of([ada, bob], origin(other_thread, marker=reply_id)) == set()
    github_same_path = forge_address("github", "git.example.com")
    assert await scopes_of([ada, bob], origin(github_same_path, marker=reply_id)) == set()


async def test_a_bot_id_counts_for_the_scope_whose_connection_serves_that_account(
    services: Services, db: Database, scopes_of: ScopesOf
) -> None:
    owner, _ = await human_and_endpoint(db, "ada")
    bob, _ = await human_and_endpoint(db, "bob")
    now = utcnow()
    async with db.write() as s:
        s.add(
            Connection(
                id=new_id("cn"),
                kind="slack",
                name="slack",
                account_key="T0TEST",
                account_key_lower="t0test",
                secret_ciphertext=b"x",
                secret_key_id="k",
                fingerprint="fp_x",
                targets=None,
                endpoints=None,
                config={},
                last_test={"ok": True, "facts": {"bot_id": "B0BOT", "team_id": "T0TEST"}},
                blocked_until=None,
                created_at=now,
                updated_at=now,
                **owner.columns(),
            )
        )
    slack = services.providers.connection("slack")
    thread = slack_address()
    in_team = Origin.of(thread, EchoClues(bot_id="B0BOT"), slack)
    assert await scopes_of([owner.id, bob.id], in_team) == {owner.id}
    # The same bot id in another workspace is not the bot of Ada's connection for T0TEST.
    elsewhere = Origin.of(slack_address(team="T0OTHER"), EchoClues(bot_id="B0BOT"), slack)
    assert await scopes_of([owner.id, bob.id], elsewhere) == set()
    # Without the kind's account rule, a bot id matches nothing (the kind is not installed).
    assert await scopes_of([owner.id], Origin.of(thread, EchoClues(bot_id="B0BOT"))) == set()


async def test_a_delivery_without_an_address_or_clues_is_nobodys_echo(
    services: Services, db: Database, replies: Replies
) -> None:
    ada, _ = await replies.record(GITHUB_THREAD, "1001")
    delivery = Delivery("github", {}, b"{}", utcnow())
    verdict = Verdict(ok=True, detail="ok", payload={"comment": {"id": 1001, "body": "x"}}, event="x")
    providers = services.providers
    assert origin_of(providers, delivery, verdict, None) is None
    assert origin_of(providers, delivery, Verdict(ok=True, detail="ok", payload={}), GITHUB_THREAD) is None
    assert await own_reply_scopes(services, delivery, verdict, None, [ada]) == set()
    assert await own_reply_scopes(services, delivery, verdict, GITHUB_THREAD, [ada]) == {ada}
    assert await own_reply_scopes(services, delivery, verdict, GITEA_THREAD, [ada]) == set()


# ---------------------------------------------------------------------------------------------
# Through ingest: a fanned-out delivery, and a value that collides across providers.


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    """The GitHub and Slack API bases point at the stand-ins."""
    return fake_api_settings


async def deliver(base_url: str, token: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    status, answer, _ = await post(base_url, token, json.dumps(body).encode(), headers)
    assert status == 202, answer
    return answer


def github(secret: str, payload: dict[str, Any], event: str) -> dict[str, str]:
    return github_headers(secret, json.dumps(payload).encode(), event, str(uuid.uuid4()))


async def claim_directly(services: Services, todo_id: str) -> Endpoint:
    async with services.db.write() as s:
        await s.execute(
            update(Todo)
            .where(Todo.id == todo_id)
            .values(state="claimed", attempt=1, lease_expires_at=utcnow() + timedelta(minutes=5))
        )
        row = await s.get(Todo, todo_id)
        assert row is not None
        endpoint = await s.get(Endpoint, row.endpoint_id)
    assert endpoint is not None
    return endpoint


async def test_an_echo_drops_only_the_todo_of_the_scope_that_replied(
    services: Services, server: Any, base_url: str, guarded: Any, fake_github: FakeProvider
) -> None:
    """Ada's github webhook also routes to Bob's endpoint. Ada's agent replies; the provider's
    webhook for that comment is Ada's echo, but Bob never said it: Bob's todo is minted."""
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    await make_webhook(services, "github", owner="bob", endpoint="bob-agent")
    await tenancy.add_route(services.db, webhook_id, "bob-agent")
    ada = await resolve_owner(services.db, human="ada")
    await conn.create_connection(
        services, ada, kind="github", name="gh", account_key=None, secret="gh-cred-ada"
    )

    opened = fixture("github/issues/opened.payload.json")
    minted = await deliver(base_url, token, opened, github(secret, opened, "issues"))
    assert [t["endpoint"] for t in minted["todos"]] == ["ada-agent", "bob-agent"]
    ada_todo = minted["todos"][0]["id"]
    endpoint = await claim_directly(services, ada_todo)
    result = await reply.send_reply(services, endpoint, ada_todo, "On it.")
    assert result["state"] == "sent"
    [sent] = fake_github.posts()

    echo = copy.deepcopy(fixture("github/issue_comment/created.payload.json"))
    echo["comment"].update(id=1001, body=sent.json["body"])
    answer = await deliver(base_url, token, echo, github(secret, echo, "issue_comment"))
    assert (answer["created"], answer["disposition"]) == (1, "routed")
    assert [t["endpoint"] for t in answer["todos"]] == ["bob-agent"]
    assert services.metrics.value("switchboard_echo_drops_total", source="github") == 1

    # Without the marker (an edit stripped it) the comment id alone still keys Ada's scope only.
    echo["comment"]["body"] = "On it."
    again = await deliver(base_url, token, echo, github(secret, echo, "issue_comment"))
    assert [t["endpoint"] for t in again["todos"]] == ["bob-agent"]


async def test_a_gitea_comment_whose_id_equals_a_github_replys_id_is_work(
    services: Services, server: Any, base_url: str, guarded: Any, fake_github: FakeProvider
) -> None:
    gh_token, gh_secret, _ = await make_webhook(services, "github")
    gitea_token, gitea_secret, _ = await make_webhook(services, "gitea")
    assert gh_secret is not None and gitea_secret is not None
    ada = await resolve_owner(services.db, human="ada")
    await conn.create_connection(
        services, ada, kind="github", name="gh", account_key=None, secret="gh-cred-ada"
    )
    opened = fixture("github/issues/opened.payload.json")
    minted = await deliver(base_url, gh_token, opened, github(gh_secret, opened, "issues"))
    todo_id = minted["todos"][0]["id"]
    endpoint = await claim_directly(services, todo_id)
    assert (await reply.send_reply(services, endpoint, todo_id, "Looking."))["state"] == "sent"
    async with services.db.read() as s:
        [recorded] = (await s.scalars(select(Reply.provider_object_id))).all()

    # A human comments on a Gitea issue; Gitea happens to give the comment the same id.
    human = copy.deepcopy(fixture("gitea/issue_comment.created.json"))
    human["comment"]["id"] = int(recorded or 0)
    body = json.dumps(human).encode()
    answer = await deliver(base_url, gitea_token, human, gitea_headers(gitea_secret, body, "issue_comment"))
    assert (answer["created"], answer["disposition"]) == (1, "routed")
