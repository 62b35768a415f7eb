"""Webhook ingest over real HTTP: every source kind, every refusal, dedupe, fan-out and echoes.

Each refused delivery is followed by a read of the database showing nothing was stored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import jsonschema
import pytest
from fixtures.ingest_kit import cairn_body, fixture, fixture_bytes
from sqlalchemy import func, select, update

from switchboard import ingest, tenancy
from switchboard.db import utcnow
from switchboard.ids import new_id
from switchboard.ingest import INGEST_LIMITER
from switchboard.models import Event, Reply, Todo, Webhook
from switchboard.provider import reply_marker
from switchboard.services import Services
from switchboard.testing import (
    cairn_headers,
    counts,
    events,
    gitea_headers,
    github_form,
    github_headers,
    make_webhook,
    post,
    slack_headers,
    stripe_headers,
    todo,
    todo_payload,
)

GITHUB_CASES = [
    # (fixture, event, kind, number, title)
    (
        "issues/opened",
        "issues",
        "issues.opened",
        1,
        "Issue #1 opened in Codertocat/Hello-World — Spelling error in the README file",
    ),
    (
        "issue_comment/created",
        "issue_comment",
        "issue_comment.created",
        1,
        "Issue #1 commented in Codertocat/Hello-World — Spelling error in the README file",
    ),
    (
        "pull_request/opened",
        "pull_request",
        "pull_request.opened",
        2,
        "PR #2 opened in Codertocat/Hello-World — Update the README with new information.",
    ),
    (
        "pull_request_review/submitted",
        "pull_request_review",
        "pull_request_review.submitted",
        2,
        "PR #2 review submitted in Codertocat/Hello-World — Update the README with new information.",
    ),
    (
        "pull_request_review_comment/created",
        "pull_request_review_comment",
        "pull_request_review_comment.created",
        2,
        "PR #2 review comment created in Codertocat/Hello-World — Update the README with new information.",
    ),
]


def _only_keys(body: dict[str, Any]) -> None:
    assert set(body) == {"todos", "created", "verified", "trust_mode", "disposition"}
    for item in body["todos"]:
        assert set(item) == {"id", "endpoint", "queue", "created"}


async def _nothing_stored(services: Services) -> None:
    assert await counts(services) == (0, 0)


# ---------------------------------------------------------------------------------------------
# GitHub


@pytest.mark.parametrize(("name", "event", "kind", "number", "title"), GITHUB_CASES)
async def test_github_conversation_events_become_todos_with_a_forge_address(
    services: Services, base_url: str, name: str, event: str, kind: str, number: int, title: str
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    body = fixture_bytes(f"github/{name}.payload.json")
    status, answer, _ = await post(base_url, token, body, github_headers(secret, body, event))
    assert status == 202, answer
    _only_keys(answer)
    assert answer["created"] == 1 and answer["verified"] is True
    assert answer["trust_mode"] == "signed" and answer["disposition"] == "routed"
    assert answer["todos"][0]["endpoint"] == "ada-agent" and answer["todos"][0]["queue"] == "default"
    row = await todo(services, answer["todos"][0]["id"])
    assert row.kind == kind and row.source == "github" and row.title == title
    assert row.reply_to == {
        "kind": "forge_comment",
        "provider": "github",
        "display": f"github github.com/Codertocat/Hello-World#{number}",
        "host": "github.com",
        "repo": "Codertocat/Hello-World",
        "number": number,
    }
    assert await todo_payload(services, row.id) == json.loads(body)


async def test_github_push_is_work_without_an_address_and_ping_is_ignored(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    push = fixture_bytes("github/push/payload.json")
    status, answer, _ = await post(base_url, token, push, github_headers(secret, push, "push", "d-push"))
    assert status == 202 and answer["disposition"] == "routed"
    row = await todo(services, answer["todos"][0]["id"])
    assert row.reply_to is None and row.title.startswith("Push to ")

    ping = fixture_bytes("github/ping/payload.json")
    status, answer, _ = await post(base_url, token, ping, github_headers(secret, ping, "ping", "d-ping"))
    assert status == 202 and answer == {
        "todos": [],
        "created": 0,
        "verified": True,
        "trust_mode": "signed",
        "disposition": "ignored",
    }
    stored = await events(services)
    assert [e.disposition for e in stored] == ["routed", "ignored"]
    assert await counts(services) == (2, 1)


async def test_github_form_encoded_delivery_is_decoded_and_signed_over_the_raw_bytes(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    raw = fixture_bytes("github/pull_request/opened.payload.json")
    body = github_form(raw)
    headers = github_headers(secret, body, "pull_request")
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 202, answer
    row = await todo(services, answer["todos"][0]["id"])
    assert row.reply_to["display"] == "github github.com/Codertocat/Hello-World#2"
    assert await todo_payload(services, row.id) == json.loads(raw)
    (event,) = await events(services)
    assert event.body == body


@pytest.mark.parametrize(
    "signature",
    [
        None,  # missing
        "",  # empty
        "sha256=",  # no digest
        "sha1=0123456789abcdef0123456789abcdef01234567",  # wrong scheme
        "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",  # bare hex
        "sha256=zz",  # malformed
        "wrong-secret",  # a valid-looking signature with another secret
    ],
)
async def test_github_bad_signatures_are_refused_and_nothing_is_stored(
    services: Services, base_url: str, caplog: pytest.LogCaptureFixture, signature: str | None
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    body = fixture_bytes("github/issues/opened.payload.json")
    headers = github_headers(secret, body, "issues")
    if signature is None:
        del headers["X-Hub-Signature-256"]
    elif signature == "wrong-secret":
        headers = github_headers("whsec_not_the_right_one", body, "issues")
    else:
        headers["X-Hub-Signature-256"] = signature
    with caplog.at_level(logging.INFO):
        status, answer, _ = await post(base_url, token, body, headers)
    assert status == 401
    assert answer["error"] == "signature_invalid"
    await _nothing_stored(services)
    assert "ingest refused" in caplog.text
    for value in (token, secret, headers.get("X-Hub-Signature-256") or "sha256="):
        if len(value) > 8:
            assert value not in caplog.text
            assert value not in json.dumps(answer)


async def test_a_stored_delivery_is_one_access_line_naming_what_was_stored(
    services: Services, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    token, secret, webhook_id = await make_webhook(services, "github")
    body = fixture_bytes("github/issues/opened.payload.json")
    with caplog.at_level(logging.INFO):
        status, _, _ = await post(base_url, token, body, github_headers(secret, body, "issues"))
        assert status == 202
        # The access line is written once the answer has gone out.
        for _ in range(500):
            if any(r.name == "aiohttp.access" for r in caplog.records):
                break
            await asyncio.sleep(0.01)
    [line] = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert '"POST /webhooks/' in line and " 202 " in line
    assert line.endswith(f"webhook={webhook_id} source=github event=issues.opened disposition=routed todos=1")
    # The one line of the delivery (ingest logs no second one), and no line names the token.
    assert not [r for r in caplog.records if r.name == "switchboard.ingest"]
    assert token not in caplog.text and token[:8] in line


async def test_signed_body_that_is_not_json_is_invalid_body_and_nothing_is_stored(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    body = b"Hello, World!"
    status, answer, _ = await post(base_url, token, body, github_headers(secret, body, "issues"))
    assert status == 400 and answer["error"] == "invalid_body"
    await _nothing_stored(services)


async def test_event_keeps_redacted_headers_raw_body_and_trust(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "github")
    body = fixture_bytes("github/issues/opened.payload.json")
    headers = github_headers(secret, body, "issues")
    headers["Authorization"] = "Bearer sbk_should_never_be_stored"
    headers["Cookie"] = "session=abcdef123456"
    status, _, _ = await post(base_url, token, body, headers)
    assert status == 202
    (event,) = await events(services)
    assert event.body == body and event.verified is True and event.trust_mode == "signed"
    assert event.verify_detail == "sha256 signature ok" and event.disposition == "routed"
    assert event.delivery_key == headers["X-GitHub-Delivery"]
    stored = {k.lower(): v for k, v in event.headers.items()}
    assert stored["x-github-event"] == "issues"
    for name in ("x-hub-signature-256", "x-hub-signature", "authorization", "cookie"):
        assert stored[name] == "[redacted]"
    dumped = json.dumps(event.headers)
    for value in (headers["X-Hub-Signature-256"][7:], "sbk_should_never_be_stored", "abcdef123456", secret):
        assert value not in dumped


# ---------------------------------------------------------------------------------------------
# Dedupe, concurrency, fan-out, doorbell


async def test_a_repeated_delivery_answers_with_the_original_todos(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "github")
    body = fixture_bytes("github/issues/opened.payload.json")
    headers = github_headers(secret, body, "issues")
    _, first, _ = await post(base_url, token, body, headers)
    status, again, _ = await post(base_url, token, body, headers)
    assert status == 202
    assert again["created"] == 0 and again["disposition"] == "duplicate"
    assert [t["id"] for t in again["todos"]] == [t["id"] for t in first["todos"]]
    assert again["todos"][0]["created"] is False and first["todos"][0]["created"] is True
    assert await counts(services) == (1, 1)


async def _routed_to(services: Services, webhook_id: str, *, handle: str, slug: str) -> None:
    await tenancy.add_human(services.db, handle)
    await tenancy.vend_endpoint(
        services.db, name=slug, owner=await tenancy.resolve_owner(services.db, human=handle)
    )
    await tenancy.add_route(services.db, webhook_id, slug)


async def test_fan_out_makes_one_todo_per_target_owner_first_with_the_same_address(
    services: Services, base_url: str
) -> None:
    token, secret, webhook_id = await make_webhook(services, "github")
    await _routed_to(services, webhook_id, handle="bob", slug="bob-agent")
    await _routed_to(services, webhook_id, handle="cy", slug="cy-agent")
    await tenancy.revoke_endpoint(services.db, "cy-agent")
    body = fixture_bytes("github/issue_comment/created.payload.json")
    status, answer, _ = await post(base_url, token, body, github_headers(secret, body, "issue_comment"))
    assert status == 202 and answer["created"] == 2
    assert [t["endpoint"] for t in answer["todos"]] == ["ada-agent", "bob-agent"]
    rows = [await todo(services, t["id"]) for t in answer["todos"]]
    assert rows[0].reply_to == rows[1].reply_to and rows[0].reply_to["number"] == 1
    assert rows[0].event_id == rows[1].event_id is not None


async def test_twenty_concurrent_copies_make_exactly_one_todo_per_target(
    services: Services, base_url: str
) -> None:
    token, secret, webhook_id = await make_webhook(services, "github")
    await _routed_to(services, webhook_id, handle="bob", slug="bob-agent")
    body = fixture_bytes("github/pull_request/opened.payload.json")
    headers = github_headers(secret, body, "pull_request", "a1b2c3d4-0000-4000-8000-concurrency")
    results = await asyncio.gather(*(post(base_url, token, body, headers) for _ in range(20)))
    assert {status for status, _, _ in results} == {202}
    assert sum(answer["created"] for _, answer, _ in results) == 2
    ids = {tuple(t["id"] for t in answer["todos"]) for _, answer, _ in results}
    assert len(ids) == 1 and len(next(iter(ids))) == 2
    assert sorted(a["disposition"] for _, a, _ in results) == ["duplicate"] * 19 + ["routed"]
    assert await counts(services) == (1, 2)


async def test_the_doorbell_hears_of_todos_only_after_they_are_committed(
    services: Services, base_url: str
) -> None:
    heard: list[tuple[str, bool]] = []

    async def listener(todo_ids: list[str]) -> None:
        async with services.db.read() as s:
            for todo_id in todo_ids:
                heard.append((todo_id, await s.get(Todo, todo_id) is not None))

    services.todo_listeners.append(listener)
    token, secret, _ = await make_webhook(services, "github")
    body = fixture_bytes("github/issues/opened.payload.json")
    _, answer, _ = await post(base_url, token, body, github_headers(secret, body, "issues"))
    assert heard == [(answer["todos"][0]["id"], True)]
    await post(base_url, token, body, github_headers(secret, body, "issues"))
    assert len(heard) == 1  # a duplicate rings nothing


async def test_ingest_metrics_are_counted(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "github")
    body = fixture_bytes("github/issues/opened.payload.json")
    await post(base_url, token, body, github_headers(secret, body, "issues"))
    await post(base_url, token, body, github_headers("nope", body, "issues"))
    m = services.metrics
    assert m.value("switchboard_ingest_total", source="github", status="202", disposition="routed") == 1
    assert m.value("switchboard_ingest_total", source="github", status="401", disposition="refused") == 1
    assert m.value("switchboard_todos_created_total", source="github") == 1
    assert "switchboard_ingest_seconds_count" in m.render()


# ---------------------------------------------------------------------------------------------
# Echo suppression


async def _record_reply(
    services: Services, todo_id: str, *, object_id: str | None, thread_key: str, owner_scope: str
) -> str:
    reply_id = new_id("rp")
    now = utcnow()
    async with services.db.write() as s:
        s.add(
            Reply(
                id=reply_id,
                todo_id=todo_id,
                endpoint_id="ep_test",
                idempotency_key=reply_id,
                state="sent" if object_id else "pending",
                connection_name="gh",
                connection_fingerprint="fp",
                owner_scope=owner_scope,
                address_kind="forge_comment",
                display=thread_key,
                thread_key=thread_key,
                text_hash="0" * 64,
                provider_object_id=object_id,
                created_at=now,
                updated_at=now,
            )
        )
    return reply_id


async def _ada_scope(services: Services) -> str:
    return next(h.id for h in await tenancy.list_humans(services.db) if h.handle == "ada")


async def test_our_own_forge_comment_coming_back_is_a_self_reply(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "github")
    issue = fixture_bytes("github/issues/opened.payload.json")
    _, first, _ = await post(base_url, token, issue, github_headers(secret, issue, "issues", "d-1"))
    thread = "github github.com/Codertocat/Hello-World#1"
    await _record_reply(
        services,
        first["todos"][0]["id"],
        object_id="492700400",
        thread_key=thread,
        owner_scope=await _ada_scope(services),
    )
    echo = fixture_bytes("github/issue_comment/created.payload.json")
    status, answer, _ = await post(
        base_url, token, echo, github_headers(secret, echo, "issue_comment", "d-2")
    )
    assert status == 202 and answer["disposition"] == "self_reply" and answer["created"] == 0
    assert services.metrics.value("switchboard_echo_drops_total", source="github") == 1

    # A human's comment in the same thread routes normally.
    human = fixture("github/issue_comment/created.payload.json")
    human["comment"]["id"] = 492700999
    body = json.dumps(human).encode()
    status, answer, _ = await post(
        base_url, token, body, github_headers(secret, body, "issue_comment", "d-3")
    )
    assert answer["disposition"] == "routed" and answer["created"] == 1
    assert [e.disposition for e in await events(services)] == ["routed", "self_reply", "routed"]


async def test_a_marker_naming_a_pending_reply_in_the_same_thread_is_an_echo(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    issue = fixture_bytes("github/issues/opened.payload.json")
    _, first, _ = await post(base_url, token, issue, github_headers(secret, issue, "issues", "d-1"))
    scope = await _ada_scope(services)
    # The provider fired its webhook before our POST returned: the reply row is pending, no object id.
    same_thread = await _record_reply(
        services,
        first["todos"][0]["id"],
        object_id=None,
        thread_key="github github.com/Codertocat/Hello-World#1",
        owner_scope=scope,
    )
    other_thread = await _record_reply(
        services,
        first["todos"][0]["id"],
        object_id=None,
        thread_key="github github.com/Codertocat/Hello-World#99",
        owner_scope=scope,
    )
    for n, (reply_id, expected) in enumerate([(other_thread, "routed"), (same_thread, "self_reply")]):
        payload = fixture("github/issue_comment/created.payload.json")
        payload["comment"]["id"] = 1000 + n
        payload["comment"]["body"] = "On it." + reply_marker(reply_id)
        body = json.dumps(payload).encode()
        headers = github_headers(secret, body, "issue_comment", f"d-marker-{n}")
        _, answer, _ = await post(base_url, token, body, headers)
        assert answer["disposition"] == expected


# ---------------------------------------------------------------------------------------------
# Gitea and Forgejo


GITEA_CASES = [
    # (fixture, X-Gitea-Event-Type, X-Gitea-Event, kind, number, title start)
    ("issues.opened", "issues", "issues", "issues.opened", 3, "Issue #3 opened in acme/api — Login page"),
    (
        "issue_comment.created",
        "issue_comment",
        "issue_comment",
        "issue_comment.created",
        3,
        "Issue #3 commented in acme/api — Login page",
    ),
    (
        "pull_request.opened",
        "pull_request",
        "pull_request",
        "pull_request.opened",
        7,
        "PR #7 opened in acme/api — Fix race in session refresh",
    ),
    # The fine header's pull_request_comment is a plain comment on a PR (coarse: issue_comment).
    (
        "pull_request_comment.created",
        "pull_request_comment",
        "issue_comment",
        "issue_comment.created",
        7,
        "PR #7 commented in acme/api — Fix race",
    ),
    (
        "pull_request_review_approved",
        "pull_request_review_approved",
        "pull_request_approved",
        "pull_request_review.reviewed",
        7,
        "PR #7 review reviewed in acme/api",
    ),
    # … while the coarse header's pull_request_comment is a review comment.
    (
        "pull_request_review_comment",
        "pull_request_review_comment",
        "pull_request_comment",
        "pull_request_review_comment.reviewed",
        7,
        "PR #7 review commented in acme/api",
    ),
]


@pytest.mark.parametrize(("name", "fine", "coarse", "kind", "number", "title"), GITEA_CASES)
async def test_gitea_conversation_events_become_todos_with_a_forge_address(
    services: Services, base_url: str, name: str, fine: str, coarse: str, kind: str, number: int, title: str
) -> None:
    token, secret, _ = await make_webhook(services, "gitea")
    body = fixture_bytes(f"gitea/{name}.json")
    status, answer, _ = await post(base_url, token, body, gitea_headers(secret, body, fine, coarse))
    assert status == 202, answer
    row = await todo(services, answer["todos"][0]["id"])
    assert row.kind == kind and row.title.startswith(title)
    assert row.reply_to == {
        "kind": "forge_comment",
        "provider": "gitea",
        "display": f"gitea gitea.example.com/acme/api#{number}",
        "host": "gitea.example.com",
        "base": "https://gitea.example.com",
        "repo": "acme/api",
        "number": number,
    }


async def test_gitea_coarse_only_pull_request_comment_is_a_review_comment(
    services: Services, base_url: str
) -> None:
    """An old server sends only X-Gitea-Event; there pull_request_comment means a review comment."""
    token, secret, _ = await make_webhook(services, "gitea")
    body = fixture_bytes("gitea/pull_request_review_comment.json")
    headers = gitea_headers(secret, body, "x", "pull_request_comment")
    for name in ("X-Gitea-Event-Type", "X-Gogs-Event-Type", "X-GitHub-Event-Type"):
        del headers[name]
    _, answer, _ = await post(base_url, token, body, headers)
    row = await todo(services, answer["todos"][0]["id"])
    assert row.kind == "pull_request_review_comment.reviewed" and row.reply_to["number"] == 7


async def test_forgejo_headers_alone_are_enough(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "gitea")
    body = fixture_bytes("gitea/issues.opened.json")
    headers = {
        k: v
        for k, v in gitea_headers(secret, body, "issues", forgejo=True).items()
        if k.startswith("X-Forgejo") or k == "Content-Type"
    }
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 202 and answer["verified"] is True
    (event,) = await events(services)
    assert event.delivery_key == headers["X-Forgejo-Delivery"]
    assert (await todo(services, answer["todos"][0]["id"])).reply_to["number"] == 3


async def test_gitea_push_has_no_address(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "gitea")
    body = fixture_bytes("gitea/push.json")
    _, answer, _ = await post(base_url, token, body, gitea_headers(secret, body, "push"))
    row = await todo(services, answer["todos"][0]["id"])
    assert row.reply_to is None and row.title == "Push to main in acme/api (1 commits)"


@pytest.mark.parametrize(
    "mutate",
    [
        "empty-gitea-only",
        "all-missing",
        "wrong-bare-hex",
        "wrong-hub-right-gitea",
        "uppercase-garbage",
    ],
)
async def test_gitea_bad_signatures_are_refused_and_nothing_is_stored(
    services: Services, base_url: str, mutate: str
) -> None:
    token, secret, _ = await make_webhook(services, "gitea")
    body = fixture_bytes("gitea/issues.opened.json")
    full = gitea_headers(secret, body, "issues")
    base = {k: v for k, v in full.items() if "Signature" not in k}
    headers = {
        "empty-gitea-only": {**base, "X-Gitea-Signature": ""},
        "all-missing": base,
        "wrong-bare-hex": {**base, "X-Gitea-Signature": "ab" * 32},
        "wrong-hub-right-gitea": {
            **base,
            "X-Gitea-Signature": full["X-Gitea-Signature"],
            "X-Hub-Signature-256": "sha256=" + "cd" * 32,
        },
        "uppercase-garbage": {**base, "X-Gitea-Signature": "NOT-HEX"},
    }[mutate]
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 401 and answer["error"] == "signature_invalid"
    await _nothing_stored(services)


async def test_gitea_empty_header_is_missing_so_the_github_style_header_decides(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "gitea")
    body = fixture_bytes("gitea/issues.opened.json")
    full = gitea_headers(secret, body, "issues")
    headers = {k: v for k, v in full.items() if "Signature" not in k}
    headers.update({"X-Gitea-Signature": "", "X-Hub-Signature-256": full["X-Hub-Signature-256"]})
    status, _, _ = await post(base_url, token, body, headers)
    assert status == 202


# ---------------------------------------------------------------------------------------------
# Slack


def test_slack_fixtures_match_the_events_api_wrapper_schema() -> None:
    schema = fixture("slack/event-wrapper-schema.json")
    for name in ("message", "app_mention", "thread_reply", "message_changed", "channel_join", "bot_reply"):
        jsonschema.validate(fixture(f"slack/{name}.json"), schema)


async def test_slack_channel_message_gets_a_thread_address(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "slack")
    body = fixture_bytes("slack/message.json")
    status, answer, _ = await post(base_url, token, body, slack_headers(secret, body))
    assert status == 202 and answer["created"] == 1
    row = await todo(services, answer["todos"][0]["id"])
    assert row.kind == "event_callback.message"
    assert row.title == (
        "Slack message in C0456EFGH — <@U0BOT1234> the nightly deploy is stuck on step 3, can you look?"
    )
    assert row.reply_to == {
        "kind": "slack_thread",
        "provider": "slack",
        "display": "slack T0123ABCD/C0456EFGH thread 1726990000.000100",
        "team_id": "T0123ABCD",
        "channel": "C0456EFGH",
        "thread_ts": "1726990000.000100",
    }


async def test_slack_thread_reply_answers_in_the_parent_thread(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "slack")
    body = fixture_bytes("slack/thread_reply.json")
    _, answer, _ = await post(base_url, token, body, slack_headers(secret, body))
    row = await todo(services, answer["todos"][0]["id"])
    assert row.reply_to["thread_ts"] == "1726990000.000100"


async def test_slack_message_and_app_mention_for_one_message_make_one_todo(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "slack")
    message, mention = fixture_bytes("slack/message.json"), fixture_bytes("slack/app_mention.json")
    _, first, _ = await post(base_url, token, message, slack_headers(secret, message))
    status, second, _ = await post(base_url, token, mention, slack_headers(secret, mention))
    assert status == 202 and second["disposition"] == "duplicate" and second["created"] == 0
    assert [t["id"] for t in second["todos"]] == [t["id"] for t in first["todos"]]
    assert await counts(services) == (1, 1)


async def test_slack_retry_whose_first_delivery_never_arrived_is_processed(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "slack")
    body = fixture_bytes("slack/app_mention.json")
    headers = {
        **slack_headers(secret, body),
        "X-Slack-Retry-Num": "1",
        "X-Slack-Retry-Reason": "http_timeout",
    }
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 202 and answer["created"] == 1 and answer["disposition"] == "routed"
    headers = {
        **slack_headers(secret, body),
        "X-Slack-Retry-Num": "2",
        "X-Slack-Retry-Reason": "http_timeout",
    }
    _, again, _ = await post(base_url, token, body, headers)
    assert again["disposition"] == "duplicate" and again["todos"][0]["id"] == answer["todos"][0]["id"]


async def test_slack_url_verification_is_answered_and_stores_nothing(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "slack")
    body = fixture_bytes("slack/url_verification.json")
    status, answer, _ = await post(base_url, token, body, slack_headers(secret, body))
    assert status == 200 and answer == {"challenge": fixture("slack/url_verification.json")["challenge"]}
    await _nothing_stored(services)
    status, answer, _ = await post(base_url, token, body, slack_headers("not-the-secret", body))
    assert status == 401 and "challenge" not in answer


@pytest.mark.parametrize("name", ["message_changed", "message_deleted", "channel_join"])
async def test_slack_housekeeping_is_stored_as_ignored(services: Services, base_url: str, name: str) -> None:
    token, secret, _ = await make_webhook(services, "slack")
    body = fixture_bytes(f"slack/{name}.json")
    status, answer, _ = await post(base_url, token, body, slack_headers(secret, body))
    assert status == 202 and answer["disposition"] == "ignored" and answer["todos"] == []
    assert await counts(services) == (1, 0)


@pytest.mark.parametrize(
    ("case", "offset"),
    # Outside the ±300 s window with room to spare: a loaded machine may take seconds between
    # signing and the server's check, which would bring a +301 s stamp back inside it.
    [("stale", -330), ("future", 330), ("wrong-secret", 0), ("no-timestamp", 0), ("no-v0", 0), ("empty", 0)],
)
async def test_slack_refusals_store_nothing(
    services: Services, base_url: str, case: str, offset: int
) -> None:
    token, secret, _ = await make_webhook(services, "slack")
    body = fixture_bytes("slack/message.json")
    headers = slack_headers("wrong" if case == "wrong-secret" else secret, body, int(time.time()) + offset)
    if case == "no-timestamp":
        del headers["X-Slack-Request-Timestamp"]
    elif case == "no-v0":
        headers["X-Slack-Signature"] = headers["X-Slack-Signature"].removeprefix("v0=")
    elif case == "empty":
        headers["X-Slack-Signature"] = ""
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 401 and answer["error"] == "signature_invalid"
    await _nothing_stored(services)


async def test_slack_webhook_awaiting_its_secret_answers_503(services: Services, base_url: str) -> None:
    db = services.db
    await tenancy.add_human(db, "ada")
    await tenancy.vend_endpoint(db, name="ada-agent", owner=await tenancy.resolve_owner(db, human="ada"))
    created = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="ada-agent", source="slack"
    )
    body = fixture_bytes("slack/message.json")
    status, answer, _ = await post(base_url, created.ingest_token, body, slack_headers("x", body))
    assert status == 503 and answer["error"] == "unavailable" and "secret" in answer["message"]
    await _nothing_stored(services)


async def test_slack_own_bot_post_is_a_self_reply_but_a_human_in_the_thread_routes(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "slack")
    first = fixture_bytes("slack/message.json")
    _, answer, _ = await post(base_url, token, first, slack_headers(secret, first))
    thread = "slack T0123ABCD/C0456EFGH thread 1726990000.000100"
    reply_id = await _record_reply(
        services,
        answer["todos"][0]["id"],
        object_id=None,
        thread_key=thread,
        owner_scope=await _ada_scope(services),
    )
    bot = fixture("slack/bot_reply.json")
    bot["event"]["metadata"]["event_payload"]["reply_id"] = reply_id
    body = json.dumps(bot).encode()
    _, echo, _ = await post(base_url, token, body, slack_headers(secret, body))
    assert echo["disposition"] == "self_reply"
    human = fixture_bytes("slack/thread_reply.json")
    _, routed, _ = await post(base_url, token, human, slack_headers(secret, human))
    assert routed["disposition"] == "routed" and routed["created"] == 1


async def test_slack_post_matched_by_channel_and_ts_is_a_self_reply(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "slack")
    first = fixture_bytes("slack/message.json")
    _, answer, _ = await post(base_url, token, first, slack_headers(secret, first))
    await _record_reply(
        services,
        answer["todos"][0]["id"],
        object_id="C0456EFGH:1726990500.000600",
        thread_key="slack T0123ABCD/C0456EFGH thread 1726990000.000100",
        owner_scope=await _ada_scope(services),
    )
    bot = fixture("slack/bot_reply.json")
    del bot["event"]["metadata"]
    body = json.dumps(bot).encode()
    _, echo, _ = await post(base_url, token, body, slack_headers(secret, body))
    assert echo["disposition"] == "self_reply"


# ---------------------------------------------------------------------------------------------
# Stripe


async def test_stripe_events_are_verified_and_never_get_an_address(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "stripe")
    body = json.dumps(
        {
            "id": "evt_1QxYz2AbCdEf",
            "object": "event",
            "type": "invoice.payment_failed",
            "data": {"object": {"id": "in_1", "customer": "cus_9"}},
            "livemode": False,
        }
    ).encode()
    status, answer, _ = await post(base_url, token, body, stripe_headers(secret, body))
    assert status == 202 and answer["verified"] is True
    row = await todo(services, answer["todos"][0]["id"])
    assert row.reply_to is None and row.title == "Stripe invoice.payment_failed (evt_1QxYz2AbCdEf)"
    (event,) = await events(services)
    assert event.delivery_key == "evt_1QxYz2AbCdEf"
    for headers in (
        stripe_headers("whsec_wrong", body),
        stripe_headers(secret, body, int(time.time()) - 400),
        stripe_headers(secret, body, int(time.time()) + 400),
        {"Stripe-Signature": ""},
        {"Stripe-Signature": "t=abc,v1=00"},
    ):
        status, answer, _ = await post(base_url, token, body + b" ", headers)
        assert status == 401 and answer["error"] == "signature_invalid"
    assert await counts(services) == (1, 1)


# ---------------------------------------------------------------------------------------------
# Cairn


async def test_cairn_artifact_event_gets_a_comment_address(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "cairn")
    body = cairn_body("artifact.created.json")
    event_id = json.loads(body)["event_id"]
    status, answer, _ = await post(base_url, token, body, cairn_headers(secret, body, event_id))
    assert status == 202, answer
    row = await todo(services, answer["todos"][0]["id"])
    assert row.title == "Cairn artifact.created on art_01jdq8v6k2m3n4p5q6r7s8t9 — Q3 latency report"
    assert row.reply_to == {
        "kind": "cairn_comment",
        "provider": "cairn",
        "display": "cairn cairn.example.com artifact art_01jdq8v6k2m3n4p5q6r7s8t9",
        "instance": "https://cairn.example.com",
        "base": "https://cairn.example.com",
        "artifact_id": "art_01jdq8v6k2m3n4p5q6r7s8t9",
    }
    (event,) = await events(services)
    assert event.delivery_key == event_id


async def test_cairn_comment_echo_and_ping(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "cairn")
    first = cairn_body("artifact.created.json")
    _, answer, _ = await post(base_url, token, first, cairn_headers(secret, first))
    await _record_reply(
        services,
        answer["todos"][0]["id"],
        object_id="cmt_01jdq9c0b1c2d3e4f5g6h7j8",
        thread_key="cairn cairn.example.com artifact art_01jdq8v6k2m3n4p5q6r7s8t9",
        owner_scope=await _ada_scope(services),
    )
    echo = cairn_body("comment.created.json")
    _, answer, _ = await post(base_url, token, echo, cairn_headers(secret, echo))
    assert answer["disposition"] == "self_reply"
    ping = cairn_body("ping.json")
    _, answer, _ = await post(base_url, token, ping, cairn_headers(secret, ping))
    assert answer["disposition"] == "ignored"


@pytest.mark.parametrize(
    "case",
    [
        "stale",
        "future",
        "no-event-id",
        "no-created-at",
        "bad-created-at",
        "header-mismatch",
        "wrong-secret",
        "bare-hex",
        "missing",
    ],
)
async def test_cairn_refusals_store_nothing(services: Services, base_url: str, case: str) -> None:
    token, secret, _ = await make_webhook(services, "cairn")
    # Outside the ±300 s window with room to spare for a slow machine (see the Slack refusals).
    offset = {"stale": -330, "future": 330}.get(case, 0)
    body = cairn_body("artifact.created.json", offset)
    payload = json.loads(body)
    if case == "no-event-id":
        del payload["event_id"]
    elif case == "no-created-at":
        del payload["created_at"]
    elif case == "bad-created-at":
        payload["created_at"] = "yesterday"
    body = json.dumps(payload).encode()
    headers = cairn_headers("wrong" if case == "wrong-secret" else secret, body)
    if case == "header-mismatch":
        headers["X-Cairn-Event-Id"] = "evt_someone_else"
    elif case == "bare-hex":
        headers["X-Cairn-Signature"] = headers["X-Cairn-Signature"].removeprefix("sha256=")
    elif case == "missing":
        del headers["X-Cairn-Signature"]
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 401 and answer["error"] == "signature_invalid"
    await _nothing_stored(services)


# ---------------------------------------------------------------------------------------------
# Generic


async def test_generic_never_gets_an_address_even_with_forge_headers_and_body(
    services: Services, base_url: str
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    body = fixture_bytes("github/issue_comment/created.payload.json")
    headers = github_headers("anything", body, "issue_comment")
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 202
    assert answer["verified"] is False and answer["trust_mode"] == "token"
    row = await todo(services, answer["todos"][0]["id"])
    assert row.reply_to is None
    (event,) = await events(services)
    assert event.verified is False and event.trust_mode == "token"


async def test_generic_delivery_keys(services: Services, base_url: str) -> None:
    token, _, _ = await make_webhook(services, "generic")
    body = b'{"title": "Nightly backup failed", "host": "db-2"}'
    _, a, _ = await post(base_url, token, body, {"webhook-id": "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"})
    _, b, _ = await post(base_url, token, body, {"webhook-id": "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"})
    assert b["disposition"] == "duplicate" and b["todos"][0]["id"] == a["todos"][0]["id"]
    _, c, _ = await post(base_url, token, body, {"X-Delivery-Id": "42"})
    assert c["disposition"] == "routed"
    _, d, _ = await post(base_url, token, b"plain text alert", {"Content-Type": "text/plain"})
    _, e, _ = await post(base_url, token, b"plain text alert", {"Content-Type": "text/plain"})
    assert d["disposition"] == "routed" and e["disposition"] == "duplicate"
    keys = {ev.delivery_key for ev in await events(services)}
    assert "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W" in keys and "42" in keys
    assert any(k.startswith("sha256:") for k in keys)
    assert (await todo(services, a["todos"][0]["id"])).title == "Nightly backup failed"
    assert await todo_payload(services, d["todos"][0]["id"]) == {"body": "plain text alert"}


# ---------------------------------------------------------------------------------------------
# The front door: size, rate, unknown tokens, dead targets, missing providers


async def test_body_over_5_mib_is_413_and_exactly_5_mib_is_accepted(
    services: Services, base_url: str
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    status, answer, _ = await post(base_url, token, b"x" * (5 * 1024 * 1024 + 1), {})
    assert status == 413 and answer["error"] == "payload_too_large"
    await _nothing_stored(services)
    status, _, _ = await post(base_url, token, b"x" * (5 * 1024 * 1024), {})
    assert status == 202


async def test_rate_limit_answers_429_with_retry_after(
    services: Services, base_url: str, server: Any
) -> None:
    server.app[INGEST_LIMITER].configure(rate=0.5, burst=2)
    token, _, _ = await make_webhook(services, "generic")
    statuses = []
    for n in range(3):
        status, answer, headers = await post(base_url, token, b"{}", {"X-Delivery-Id": str(n)})
        statuses.append(status)
    assert statuses == [202, 202, 429]
    assert answer["error"] == "rate_limited" and int(headers["Retry-After"]) >= 1
    assert await counts(services) == (2, 2)


async def test_unknown_token_is_404(services: Services, base_url: str) -> None:
    status, answer, _ = await post(base_url, "wh_" + "A" * 32, b"{}", {})
    assert status == 404 and answer["error"] == "not_found"
    status, _, _ = await post(base_url, "x", b"{}", {})
    assert status == 404
    await _nothing_stored(services)


async def test_no_live_target_is_503(services: Services, base_url: str) -> None:
    token, _, _ = await make_webhook(services, "generic")
    await tenancy.revoke_endpoint(services.db, "ada-agent")
    status, answer, _ = await post(base_url, token, b"{}", {})
    assert status == 503 and answer["error"] == "unavailable"
    await _nothing_stored(services)


async def test_source_kind_without_an_installed_provider_is_503(services: Services, base_url: str) -> None:
    token, _, webhook_id = await make_webhook(services, "generic")
    async with services.db.write() as s:
        await s.execute(update(Webhook).where(Webhook.id == webhook_id).values(source="nonesuch"))
    status, answer, _ = await post(base_url, token, b"{}", {})
    assert (
        status == 503 and "no installed provider" in answer["message"] and "'nonesuch'" in answer["message"]
    )
    await _nothing_stored(services)


async def test_every_event_row_records_its_delivery(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "github")
    body = fixture_bytes("github/issues/opened.payload.json")
    _, answer, _ = await post(base_url, token, body, github_headers(secret, body, "issues"))
    async with services.db.read() as s:
        event = await s.scalar(select(Event))
        row = await s.get(Todo, answer["todos"][0]["id"])
    assert row.event_id == event.id and event.event_type == "issues.opened"


async def test_hostile_bodies_get_a_clear_answer_never_a_500(services: Services, base_url: str) -> None:
    nested = b"[" * 200_000 + b"]" * 200_000
    token, secret, _ = await make_webhook(services, "github")
    status, answer, _ = await post(base_url, token, nested, github_headers(secret, nested, "issues"))
    assert status == 400 and answer["error"] == "invalid_body"
    await _nothing_stored(services)

    token, _, _ = await make_webhook(services, "generic", endpoint="ada-generic")
    status, answer, _ = await post(base_url, token, nested, {})
    assert status == 202 and answer["created"] == 1
    # Lone surrogates and NULs in a JSON body are stored (as replacement characters), not a crash.
    weird = b'{"title": "bad \\ud800 title \\u0000 here", "x": "\\udfff"}'
    status, answer, _ = await post(base_url, token, weird, {})
    assert status == 202
    row = await todo(services, answer["todos"][0]["id"])
    assert row.title == "bad \ufffd title here"


async def test_cut_off_or_malformed_bodies_store_nothing_and_never_500(
    services: Services, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    host, port = base_url.removeprefix("http://").split(":")
    head = f"POST /webhooks/{token} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"

    # Malformed chunked encoding: a clear 400.
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write((head + 'Transfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\nzz\r\n').encode())
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    assert status_line.split()[1] in (b"400",)

    # The sender hangs up half-way through a Content-Length body.
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write((head + 'Content-Length: 1000\r\n\r\n{"title": "cut').encode())
    await writer.drain()
    writer.close()
    await asyncio.sleep(0.3)
    await _nothing_stored(services)
    assert "unhandled error" not in caplog.text


async def test_chunked_body_over_5_mib_is_cut_off_at_the_cap(services: Services, base_url: str) -> None:
    import aiohttp

    token, _, _ = await make_webhook(services, "generic")

    async def chunks() -> Any:
        for _ in range(6):
            yield b"x" * (1024 * 1024)

    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base_url}/webhooks/{token}", data=chunks()) as resp,
    ):
        assert resp.status == 413
        assert (await resp.json())["error"] == "payload_too_large"
    await _nothing_stored(services)


def test_rate_limiter_refills_and_forgets_idle_clients() -> None:
    from switchboard.ingest import RateLimiter

    limiter = RateLimiter(rate=1000.0, burst=2, max_clients=3)
    assert limiter.take("a") == 0 and limiter.take("a") == 0
    assert limiter.take("a") > 0
    time.sleep(0.01)
    assert limiter.take("a") == 0  # refilled at 1000/s
    for client in ("b", "c", "d", "e"):
        assert limiter.take(client) == 0
    assert len(limiter._buckets) <= 3


async def test_echo_matching_is_per_target_scope_and_no_other(services: Services, base_url: str) -> None:
    token, secret, webhook_id = await make_webhook(services, "github")
    await _routed_to(services, webhook_id, handle="bob", slug="bob-agent")
    outsider, _ = await tenancy.add_human(services.db, "eve")
    issue = fixture_bytes("github/issues/opened.payload.json")
    _, first, _ = await post(base_url, token, issue, github_headers(secret, issue, "issues", "d-1"))
    bob = next(h.id for h in await tenancy.list_humans(services.db) if h.handle == "bob")
    thread = "github github.com/Codertocat/Hello-World#1"
    bobs_todo = first["todos"][1]["id"]
    await _record_reply(services, bobs_todo, object_id="7001", thread_key=thread, owner_scope=outsider.id)
    await _record_reply(services, bobs_todo, object_id="7002", thread_key=thread, owner_scope=bob)
    answers = []
    for comment_id in (7001, 7002):
        payload = fixture("github/issue_comment/created.payload.json")
        payload["comment"]["id"] = comment_id
        body = json.dumps(payload).encode()
        headers = github_headers(secret, body, "issue_comment", f"d-{comment_id}")
        answers.append((await post(base_url, token, body, headers))[1])
    # A reply recorded in a scope this webhook does not reach is not ours to drop; one recorded in
    # Bob's scope drops Bob's todo only, because Ada's scope never said it.
    assert [a["disposition"] for a in answers] == ["routed", "routed"]
    endpoints = [[t["endpoint"] for t in a["todos"]] for a in answers]
    assert endpoints == [["ada-agent", "bob-agent"], ["ada-agent"]]


async def test_retention_prunes_old_events_that_minted_nothing_and_keeps_the_rest(
    services: Services, base_url: str
) -> None:
    from datetime import timedelta

    from switchboard.ingest import prune_events

    token, secret, _ = await make_webhook(services, "github")
    ping = fixture_bytes("github/ping/payload.json")
    await post(base_url, token, ping, github_headers(secret, ping, "ping", delivery="d-ping"))
    opened = fixture_bytes("github/issues/opened.payload.json")
    await post(base_url, token, opened, github_headers(secret, opened, "issues"))
    async with services.db.read() as s:
        assert len((await s.scalars(select(Event))).all()) == 2
    # Within the retention window nothing goes; a month later the ping goes, the routed event stays.
    assert await prune_events(services) == 0
    assert await prune_events(services, now=utcnow() + timedelta(days=31)) == 1
    async with services.db.read() as s:
        assert [e.disposition for e in (await s.scalars(select(Event))).all()] == ["routed"]


# ---------------------------------------------------------------------------------------------
# A sender that stalls mid-body


async def test_a_sender_that_stalls_mid_body_gets_408_and_nothing_is_stored(
    services: Services, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest, "BODY_READ_SECONDS", 0.5)
    db = services.db
    await tenancy.add_human(db, "ada")
    await tenancy.vend_endpoint(db, name="ada-agent", owner=await tenancy.resolve_owner(db, human="ada"))
    created = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="ada-agent", source="generic"
    )
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            f"POST /webhooks/{created.ingest_token} HTTP/1.1\r\nHost: {host}\r\n"
            'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a":'.encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 408")
    finally:
        writer.close()
    async with db.read() as s:
        assert (await s.scalar(select(func.count()).select_from(Todo))) == 0
