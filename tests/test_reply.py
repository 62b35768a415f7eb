"""The reply verb against stand-in providers on 127.0.0.1: where it posts, with what, and every
refusal (checked before any dial, writing no row)."""

from __future__ import annotations

import asyncio
import logging
import random
import string
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, text, update

from switchboard import connections as conn
from switchboard import reply
from switchboard.db import utcnow
from switchboard.errors import SwitchboardError
from switchboard.hookspecs import hookimpl
from switchboard.models import Base, Connection, Endpoint, Reply, ReplyBucket
from switchboard.provider import (
    MARKER_EVENT_TYPE,
    Address,
    CheckResult,
    ConnectionCheck,
    ConnectionKind,
    PostResult,
    ReplyPost,
    find_marker,
)
from switchboard.tenancy import Owner, vend_endpoint
from switchboard.testing import (
    FakeProvider,
    Scripted,
    cairn_address,
    claimed_todo,
    forge_address,
    guarded_client,
    human_and_endpoint,
    slack_address,
)

SLACK_SECRET = "slack-test-bot-credential-" + "Yk3Rw9"
GITHUB_SECRET = "github-test-credential-" + "Qm7Tz1"


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    """The GitHub and Slack API bases point at the stand-ins."""
    return fake_api_settings


class TinyChat:
    """A provider the core has never heard of, with a 100-character text limit."""

    KIND = "tinychat"

    @hookimpl
    def register_kinds(self, register: Callable[[Any], None]) -> None:
        async def check(c: ConnectionCheck) -> CheckResult:
            return CheckResult(ok=True)

        async def send(post: ReplyPost) -> PostResult:
            resp = await post.http.request(
                "POST", f"{post.account_key}/rooms/{post.address.fields['room']}", json_body={"t": post.text}
            )
            return PostResult(state="sent" if resp.status == 201 else "failed", object_id="m1")

        register(
            ConnectionKind(
                self.KIND,
                normalize_account_key=lambda key: key.strip(),
                account_matches=lambda key, address: address.fields.get("base") == key,
                target_of=lambda address: str(address.fields.get("room")),
                text_limit=100,
                test=check,
                post=send,
            )
        )


@pytest.fixture
def extra_providers() -> list[object]:
    return [TinyChat()]


async def slack_world(services: Any, db: Any) -> tuple[Owner, Endpoint, dict[str, Any]]:
    owner, endpoint = await human_and_endpoint(db)
    connection = await conn.create_connection(
        services, owner, kind="slack", name="slack", account_key="T0TEST", secret=SLACK_SECRET
    )
    return owner, endpoint, connection


async def rows_of(db: Any) -> list[Reply]:
    async with db.read() as s:
        return list((await s.scalars(select(Reply).order_by(Reply.created_at))).all())


async def refused(code: str, call: Any) -> SwitchboardError:
    with pytest.raises(SwitchboardError) as err:
        await call
    assert err.value.code == code, err.value.as_dict()
    return err.value


# ---------------------------------------------------------------------------------------------
# Posting to each provider


async def test_slack_reply_posts_into_the_thread_and_a_repeat_posts_nothing(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    _, endpoint, connection = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    first = await reply.send_reply(services, endpoint, todo.id, "Done: fixed in #12.", idempotency_key="k1")
    assert first["state"] == "sent" and first["duplicate"] is False
    assert first["display"] == "slack T0TEST/C0456 thread 1726990000.000100"
    assert first["permalink"].startswith("https://acme.slack.com/archives/C0456/p")
    [post] = fake_slack.posts()
    assert post.path == "/api/chat.postMessage" and post.auth == f"Bearer {SLACK_SECRET}"
    assert post.json == {
        "channel": "C0456",
        "thread_ts": "1726990000.000100",
        "text": "Done: fixed in #12.",
        "metadata": {"event_type": MARKER_EVENT_TYPE, "event_payload": {"reply_id": first["reply_id"]}},
    }
    again = await reply.send_reply(services, endpoint, todo.id, "Different words", idempotency_key="k1")
    assert again == {**first, "duplicate": True}
    assert len(fake_slack.posts()) == 1
    [row] = await rows_of(db)
    assert row.provider_object_id == "C0456:1726990001.000100"
    assert (row.thread_key, row.owner_scope) == (first["display"], endpoint.owner_human_id)
    assert (row.connection_id, row.connection_name) == (connection["id"], "slack")
    assert row.connection_fingerprint == connection["fingerprint"]
    assert row.text_hash and "fixed" not in repr(reply.reply_view(row))
    assert await reply.replies_of(services, todo.id) == [reply.reply_view(row)]


async def test_same_text_without_a_key_is_the_same_reply(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    _, endpoint, _ = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    first = await reply.send_reply(services, endpoint, todo.id, "On it.")
    second = await reply.send_reply(services, endpoint, todo.id, "On it.")
    third = await reply.send_reply(services, endpoint, todo.id, "Done.")
    assert second["reply_id"] == first["reply_id"] and second["duplicate"] is True
    assert third["reply_id"] != first["reply_id"] and third["duplicate"] is False
    assert len(fake_slack.posts()) == 2


async def test_github_com_reply_goes_to_the_api_base_with_a_marker(
    services: Any, db: Any, guarded: Any, fake_github: FakeProvider
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=GITHUB_SECRET
    )
    todo = await claimed_todo(db, endpoint, forge_address("github", "github.com"))
    result = await reply.send_reply(services, endpoint, todo.id, "Fixed in 3f2a9c1.")
    [post] = fake_github.posts()
    assert post.path == "/repos/acme/api/issues/7/comments"
    assert post.auth == f"Bearer {GITHUB_SECRET}"
    assert post.json["body"].startswith("Fixed in 3f2a9c1.")
    assert find_marker(post.json["body"]) == result["reply_id"]
    assert result["state"] == "sent"
    assert result["permalink"] == "https://github.com/acme/api/issues/7#issuecomment-1001"
    [row] = await rows_of(db)
    assert row.provider_object_id == "1001"


async def test_ghes_reply_goes_to_the_hosts_api_v3(
    services: Any, db: Any, guarded: Any, fake_github: FakeProvider
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="github", name="ghes", account_key=fake_github.host, secret=GITHUB_SECRET
    )
    todo = await claimed_todo(db, endpoint, forge_address("github", fake_github.host, "acme/api.v2", 31))
    result = await reply.send_reply(services, endpoint, todo.id, "Looking.")
    assert result["state"] == "sent"
    [post] = fake_github.posts()
    assert post.path == "/api/v3/repos/acme/api.v2/issues/31/comments"


async def test_gitea_reply_uses_the_token_scheme(
    services: Any, db: Any, guarded: Any, fake_gitea: FakeProvider
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="gitea", name="gitea", account_key=fake_gitea.base_url, secret=GITHUB_SECRET
    )
    todo = await claimed_todo(db, endpoint, forge_address("gitea", fake_gitea.host))
    result = await reply.send_reply(services, endpoint, todo.id, "Merged.")
    [post] = fake_gitea.posts()
    assert (post.path, post.auth) == ("/api/v1/repos/acme/api/issues/7/comments", f"token {GITHUB_SECRET}")
    assert find_marker(post.json["body"]) == result["reply_id"] and result["state"] == "sent"


async def test_cairn_reply_comments_on_the_artifact(
    services: Any, db: Any, guarded: Any, fake_cairn: FakeProvider
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="cairn", name="cairn", account_key=fake_cairn.base_url, secret=GITHUB_SECRET
    )
    todo = await claimed_todo(db, endpoint, cairn_address(fake_cairn.base_url))
    result = await reply.send_reply(services, endpoint, todo.id, "Summary in artifact art_43.")
    [post] = fake_cairn.posts()
    assert (post.path, post.auth) == ("/v1/artifacts/art_42/comments", f"Bearer {GITHUB_SECRET}")
    assert post.json["anchor_type"] == "artifact"
    assert find_marker(post.json["body"]) == result["reply_id"]
    [row] = await rows_of(db)
    assert row.provider_object_id == "cm_1001" and row.state == "sent"


# ---------------------------------------------------------------------------------------------
# Refusals, in order, before any dial and without a row


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("", None),
        ("   \n ", None),
        ("x" * (16 * 1024 + 1), None),
        ("é" * 8193, None),
        ("ok", "k" * 129),
        ("ok", "ключ"),
        ("ok", ""),
        ("ok", "tab\there"),
    ],
)
async def test_invalid_arguments(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider, text: str, key: str | None
) -> None:
    _, endpoint, _ = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    await refused(
        "invalid_argument", reply.send_reply(services, endpoint, todo.id, text, idempotency_key=key)
    )
    assert await rows_of(db) == [] and fake_slack.requests == []


async def test_another_endpoints_todo_is_not_found(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    owner, endpoint, _ = await slack_world(services, db)
    other, _ = await vend_endpoint(db, name="second", owner=owner, families=["reply"])
    todo = await claimed_todo(db, endpoint, slack_address())
    await refused("not_found", reply.send_reply(services, other, todo.id, "hi"))
    await refused("not_found", reply.send_reply(services, endpoint, "td_nope", "hi"))
    assert await rows_of(db) == [] and fake_slack.requests == []


async def test_a_todo_without_an_address_has_nowhere_to_reply(services: Any, db: Any, guarded: Any) -> None:
    _, endpoint, _ = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, None)
    await refused("no_reply_address", reply.send_reply(services, endpoint, todo.id, "hi"))
    assert await rows_of(db) == []


async def test_only_the_claim_holder_may_reply(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    _, endpoint, _ = await slack_world(services, db)
    pending = await claimed_todo(db, endpoint, slack_address(), state="pending")
    await refused("not_claimed", reply.send_reply(services, endpoint, pending.id, "hi"))
    lapsed = await claimed_todo(
        db, endpoint, slack_address(), lease_expires_at=utcnow() - timedelta(seconds=1)
    )
    await refused("not_claimed", reply.send_reply(services, endpoint, lapsed.id, "hi"))
    assert await rows_of(db) == [] and fake_slack.requests == []


async def test_grace_window_after_finishing(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    owner, endpoint, _ = await slack_world(services, db)
    other, _ = await vend_endpoint(db, name="second", owner=owner, families=["reply"])
    now = utcnow()
    recent = await claimed_todo(
        db,
        endpoint,
        slack_address(),
        state="done",
        finished_at=now - timedelta(minutes=3),
        finished_by=endpoint.id,
    )
    result = await reply.send_reply(services, endpoint, recent.id, "Completed: see PR #9.")
    assert result["state"] == "sent"
    old = await claimed_todo(
        db,
        endpoint,
        slack_address(),
        state="failed",
        finished_at=now - timedelta(minutes=16),
        finished_by=endpoint.id,
    )
    err = await refused("reply_window_closed", reply.send_reply(services, endpoint, old.id, "late"))
    assert "900 seconds" in err.message
    by_other = await claimed_todo(
        db, endpoint, slack_address(), state="done", finished_at=now, finished_by=other.id
    )
    await refused("reply_window_closed", reply.send_reply(services, endpoint, by_other.id, "not mine"))
    assert len(fake_slack.posts()) == 1 and len(await rows_of(db)) == 1


async def test_a_routed_todo_never_uses_the_webhook_owners_connection(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    """Seed confirmation: B's todo routed from A's webhook cannot use A's connection."""
    await slack_world(services, db)  # A owns a matching Slack connection
    b_owner, b_endpoint = await human_and_endpoint(db, "bob")
    todo = await claimed_todo(db, b_endpoint, slack_address())
    err = await refused("no_connection", reply.send_reply(services, b_endpoint, todo.id, "hello from B"))
    assert "owner" in err.message
    assert fake_slack.requests == [] and await rows_of(db) == []
    # Once B adds their own connection, B's credential is the one used.
    await conn.create_connection(
        services, b_owner, kind="slack", name="b-slack", account_key="T0TEST", secret=SLACK_SECRET + "B"
    )
    await reply.send_reply(services, b_endpoint, todo.id, "hello from B")
    assert fake_slack.posts()[0].auth == f"Bearer {SLACK_SECRET}B"


async def test_a_payload_naming_another_host_never_dials(
    services: Any, db: Any, guarded: Any, fake_github: FakeProvider
) -> None:
    """Seed confirmation: the address's host must be the connection's account key."""
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="github", name="ghes", account_key=fake_github.host, secret=GITHUB_SECRET
    )
    for host in ("evil.example", "github.com", f"127.0.0.1:{fake_github.port + 1}"):
        todo = await claimed_todo(db, endpoint, forge_address("github", host))
        await refused("no_connection", reply.send_reply(services, endpoint, todo.id, "hi"))
    assert fake_github.requests == [] and await rows_of(db) == []


async def test_allowlists_refuse_targets_and_endpoints(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    owner, endpoint, connection = await slack_world(services, db)
    other, _ = await vend_endpoint(db, name="second", owner=owner, families=["reply"])
    await conn.update_connection(
        services, owner, connection["id"], targets=["C04*"], endpoints=[endpoint.slug]
    )
    wrong_channel = await claimed_todo(db, endpoint, slack_address(channel="C999"))
    await refused("target_not_allowed", reply.send_reply(services, endpoint, wrong_channel.id, "hi"))
    other_todo = await claimed_todo(db, other, slack_address())
    await refused("target_not_allowed", reply.send_reply(services, other, other_todo.id, "hi"))
    assert fake_slack.requests == [] and await rows_of(db) == []
    allowed = await claimed_todo(db, endpoint, slack_address(channel="C0456"))
    assert (await reply.send_reply(services, endpoint, allowed.id, "hi"))["state"] == "sent"


async def test_the_providers_own_text_limit(
    services: Any, db: Any, guarded: Any, fake_cairn: FakeProvider
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="tinychat", name="tiny", account_key=fake_cairn.base_url, secret=GITHUB_SECRET
    )
    address = Address(
        "tiny_room", "tinychat", "tinychat room r1", {"base": fake_cairn.base_url, "room": "r1"}
    )
    todo = await claimed_todo(db, endpoint, address)
    err = await refused("invalid_argument", reply.send_reply(services, endpoint, todo.id, "x" * 101))
    assert "100" in err.message
    fake_cairn.script("POST", "/rooms/r1", Scripted(201, {}))
    assert (await reply.send_reply(services, endpoint, todo.id, "x" * 100))["state"] == "sent"
    assert fake_cairn.posts()[0].json == {"t": "x" * 100}


async def test_text_carrying_a_secret_is_refused_naming_only_the_rule(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _, endpoint, _ = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    rng = random.Random(7)
    token = "gh" + "p_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))
    err = await refused(
        "secret_detected", reply.send_reply(services, endpoint, todo.id, f"use {token} to deploy")
    )
    assert err.extra == {"rule": "github-pat"} and "github-pat" in err.message
    assert token not in str(err.as_dict()) and token not in caplog.text
    assert services.metrics.value("switchboard_secret_blocks_total", rule="github-pat") == 1
    assert services.metrics.value("switchboard_reply_refusals_total", code="secret_detected") == 1
    assert await rows_of(db) == [] and fake_slack.requests == []


# ---------------------------------------------------------------------------------------------
# Bounds


async def test_the_21st_reply_on_a_todo_is_rate_limited(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    _, endpoint, _ = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    for n in range(20):
        assert (await reply.send_reply(services, endpoint, todo.id, f"progress {n}"))["state"] == "sent"
    err = await refused("rate_limited", reply.send_reply(services, endpoint, todo.id, "progress 20"))
    assert "20 replies" in err.message
    assert len(fake_slack.posts()) == 20 and len(await rows_of(db)) == 20
    # A repeat of an earlier reply is still answered from the record.
    assert (await reply.send_reply(services, endpoint, todo.id, "progress 3"))["duplicate"] is True


async def test_the_endpoint_bucket_is_held_in_the_database(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    _, endpoint, _ = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    await reply.send_reply(services, endpoint, todo.id, "first")
    async with db.read() as s:
        bucket = await s.get(ReplyBucket, endpoint.id)
    assert bucket.tokens == pytest.approx(reply.BUCKET_CAPACITY - 1, abs=0.1)
    # Another process (or a restart) sees the same empty bucket.
    async with db.write() as s:
        await s.execute(update(ReplyBucket).values(tokens=0.0, updated_at=utcnow()))
    err = await refused("rate_limited", reply.send_reply(services, endpoint, todo.id, "second"))
    assert err.extra["retry_after"] == 2
    async with db.write() as s:
        await s.execute(update(ReplyBucket).values(tokens=0.0, updated_at=utcnow() - timedelta(seconds=10)))
    assert (await reply.send_reply(services, endpoint, todo.id, "second"))["state"] == "sent"
    assert len(fake_slack.posts()) == 2


async def test_a_slack_429_blocks_that_connection_only(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider, fake_github: FakeProvider
) -> None:
    owner, endpoint, slack = await slack_world(services, db)
    await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=GITHUB_SECRET
    )
    fake_slack.script(
        "POST",
        "/api/chat.postMessage",
        Scripted(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "20"}),
    )
    todo = await claimed_todo(db, endpoint, slack_address())
    first = await reply.send_reply(services, endpoint, todo.id, "one")
    # Retry-After above 10 s is not waited out: the reply fails, rate limited, after one dial.
    assert (first["state"], first["error_class"]) == ("failed", "rate_limited")
    assert len(fake_slack.posts()) == 1
    view = await conn.get_connection(services, owner, slack["id"])
    assert view["blocked_until"] is not None
    err = await refused("rate_limited", reply.send_reply(services, endpoint, todo.id, "two"))
    assert 18 <= err.extra["retry_after"] <= 20
    assert len(fake_slack.posts()) == 1
    gh_todo = await claimed_todo(db, endpoint, forge_address("github", "github.com"))
    assert (await reply.send_reply(services, endpoint, gh_todo.id, "unaffected"))["state"] == "sent"
    # When the block has passed, the connection posts again.
    async with db.write() as s:
        await s.execute(update(Connection).values(blocked_until=utcnow() - timedelta(seconds=1)))
    assert (await reply.send_reply(services, endpoint, todo.id, "two"))["state"] == "sent"


async def test_a_short_retry_after_is_waited_out_and_retried(
    services: Any, db: Any, guarded: Any, fake_github: FakeProvider
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=GITHUB_SECRET
    )
    path = "/repos/acme/api/issues/7/comments"
    fake_github.script("POST", path, Scripted(403, {"message": "secondary rate limit"}, {"Retry-After": "1"}))
    todo = await claimed_todo(db, endpoint, forge_address("github", "github.com"))
    result = await reply.send_reply(services, endpoint, todo.id, "after the limit")
    assert result["state"] == "sent" and len(fake_github.posts()) == 2


async def test_a_failed_connect_is_retried_twice(services: Any, db: Any, guarded: Any) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services,
        owner,
        kind="gitea",
        name="gt",
        account_key=f"https://127.0.0.1:{port}",
        secret=GITHUB_SECRET,
    )
    todo = await claimed_todo(db, endpoint, forge_address("gitea", f"127.0.0.1:{port}"))
    started = asyncio.get_running_loop().time()
    result = await reply.send_reply(services, endpoint, todo.id, "anyone there?")
    assert (result["state"], result["error_class"]) == ("failed", "network")
    # Two backoffs (0.5 s, 1 s): three connects in all.
    assert asyncio.get_running_loop().time() - started >= 1.4
    [row] = await rows_of(db)
    assert row.error_code == "connect_failed"


async def test_a_timeout_after_sending_is_unknown_and_never_retried(
    services: Any, db: Any, fake_github: FakeProvider
) -> None:
    services.outbound = client = guarded_client(total_timeout=0.5)
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=GITHUB_SECRET
    )
    fake_github.delay = 1.5
    todo = await claimed_todo(db, endpoint, forge_address("github", "github.com"))
    result = await reply.send_reply(services, endpoint, todo.id, "slow")
    await client.close()
    assert (result["state"], result["error_class"]) == ("unknown", "network")
    assert len(fake_github.posts()) == 1


@pytest.mark.parametrize(
    ("status", "state", "error_class"),
    [
        (401, "failed", "auth"),
        (403, "failed", "forbidden"),
        (404, "failed", "not_found"),
        (422, "failed", "invalid"),
        (500, "failed", "server"),
        (502, "unknown", "server"),
    ],
)
async def test_provider_errors_become_classes_never_bodies(
    services: Any, db: Any, guarded: Any, fake_github: FakeProvider, status: int, state: str, error_class: str
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=GITHUB_SECRET
    )
    fake_github.script(
        "POST", "/repos/acme/api/issues/7/comments", Scripted(status, {"message": "BODY-TEXT-42"})
    )
    todo = await claimed_todo(db, endpoint, forge_address("github", "github.com"))
    result = await reply.send_reply(services, endpoint, todo.id, "hi")
    assert (result["state"], result["error_class"]) == (state, error_class)
    assert "BODY-TEXT-42" not in repr(result) + repr(await reply.replies_of(services, todo.id))
    assert len(fake_github.posts()) == 1
    assert services.metrics.value("switchboard_replies_total", state=state, error_class=error_class) == 1


async def test_slack_ok_false_is_a_failure_with_its_code(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    _, endpoint, _ = await slack_world(services, db)
    fake_slack.script(
        "POST", "/api/chat.postMessage", Scripted(200, {"ok": False, "error": "channel_not_found"})
    )
    todo = await claimed_todo(db, endpoint, slack_address())
    result = await reply.send_reply(services, endpoint, todo.id, "hi")
    assert (result["state"], result["error_class"]) == ("failed", "not_found")
    [row] = await rows_of(db)
    assert row.error_code == "channel_not_found"


async def test_ten_concurrent_identical_replies_make_one_post(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    _, endpoint, _ = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    fake_slack.delay = 0.3
    results = await asyncio.gather(
        *(
            reply.send_reply(services, endpoint, todo.id, "Deployed.", idempotency_key="deploy")
            for _ in range(10)
        )
    )
    assert len(fake_slack.posts()) == 1
    assert {r["reply_id"] for r in results} == {results[0]["reply_id"]}
    assert sorted(r["duplicate"] for r in results) == [False] + [True] * 9
    assert {r["state"] for r in results} == {"sent"}
    assert len(await rows_of(db)) == 1


async def test_stuck_pending_rows_become_unknown(services: Any, db: Any, guarded: Any) -> None:
    _, endpoint, connection = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    old, fresh = utcnow() - timedelta(seconds=61), utcnow()
    async with db.write() as s:
        for key, created in (("old", old), ("fresh", fresh)):
            s.add(
                Reply(
                    id=f"rp_{key:0<26}",
                    todo_id=todo.id,
                    endpoint_id=endpoint.id,
                    idempotency_key=key,
                    state="pending",
                    connection_id=connection["id"],
                    connection_name="slack",
                    connection_fingerprint=connection["fingerprint"],
                    owner_scope=endpoint.owner_human_id or "",
                    address_kind="slack_thread",
                    display="d",
                    thread_key="d",
                    text_hash="0" * 64,
                    created_at=created,
                    updated_at=created,
                )
            )
    assert await reply.sweep_pending(services) == 1
    states = {r.idempotency_key: r.state for r in await rows_of(db)}
    assert states == {"old": "unknown", "fresh": "pending"}
    # A caller repeating the stuck reply learns it is unknown (and nothing is dialled again).
    again = await reply.send_reply(services, endpoint, todo.id, "whatever", idempotency_key="old")
    assert (again["state"], again["duplicate"], again["error_class"]) == ("unknown", True, "network")


async def test_no_connection_secret_anywhere(
    services: Any,
    db: Any,
    guarded: Any,
    fake_slack: FakeProvider,
    fake_github: FakeProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    owner, endpoint, _ = await slack_world(services, db)
    await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=GITHUB_SECRET
    )
    fake_github.script("POST", "/repos/acme/api/issues/7/comments", Scripted(401, {"message": GITHUB_SECRET}))
    seen: list[Any] = []
    slack_todo = await claimed_todo(db, endpoint, slack_address())
    gh_todo = await claimed_todo(db, endpoint, forge_address("github", "github.com"))
    seen.append(await reply.send_reply(services, endpoint, slack_todo.id, "hello"))
    seen.append(await reply.send_reply(services, endpoint, gh_todo.id, "hello"))
    seen.append(await reply.replies_of(services, slack_todo.id))
    seen.append(await reply.replies_of(services, gh_todo.id))
    seen.append(services.metrics.render())
    for secret in (SLACK_SECRET, GITHUB_SECRET):
        assert secret not in repr(seen) and secret not in caplog.text
        async with db.read() as s:
            for table in Base.metadata.sorted_tables:
                for row in (await s.execute(text(f'SELECT * FROM "{table.name}"'))).all():
                    assert secret.encode() not in repr(tuple(row)).encode(), table.name
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(Reply)) == 2


async def test_a_caller_that_goes_away_mid_dial_still_gets_its_reply_recorded(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    _, endpoint, _ = await slack_world(services, db)
    todo = await claimed_todo(db, endpoint, slack_address())
    fake_slack.delay = 0.5
    call = asyncio.create_task(reply.send_reply(services, endpoint, todo.id, "posting", idempotency_key="k"))
    # Go away while the provider holds the request (however slow the machine is to get there).
    for _ in range(200):
        if fake_slack.posts():
            break
        await asyncio.sleep(0.01)
    assert fake_slack.posts(), "the dial never started"
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    for _ in range(200):
        [row] = await rows_of(db)
        if row.state != "pending":
            break
        await asyncio.sleep(0.05)
    assert row.state == "sent" and row.provider_object_id
    again = await reply.send_reply(services, endpoint, todo.id, "posting", idempotency_key="k")
    assert (again["state"], again["duplicate"]) == ("sent", True)
    assert len(fake_slack.posts()) == 1


async def test_a_private_destination_is_refused_at_connect_and_recorded_failed(
    services: Any, db: Any, fake_gitea: FakeProvider
) -> None:
    """With no allowed networks (the production default), a connection whose base URL is on a
    private address never reaches it: the reply fails with the network class and is not retried."""
    services.outbound = strict = guarded_client(allow_cidrs="")
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="gitea", name="gitea", account_key=fake_gitea.base_url, secret=GITHUB_SECRET
    )
    todo = await claimed_todo(db, endpoint, forge_address("gitea", fake_gitea.host))
    result = await reply.send_reply(services, endpoint, todo.id, "hello")
    await strict.close()
    assert (result["state"], result["error_class"]) == ("failed", "network")
    [row] = await rows_of(db)
    assert row.error_code == "address_refused"
    assert fake_gitea.requests == []
    assert services.metrics.value("switchboard_replies_total", state="failed", error_class="network") == 1
    assert "switchboard_reply_seconds_count" in services.metrics.render()
