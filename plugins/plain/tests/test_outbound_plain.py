"""The plain connection kind, called directly against a stand-in Plain GraphQL API over TLS: the reply
mutation, how mutation errors (HTTP 200) and GraphQL errors are classified, the key check and the
account rules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import switchboard_plain as plain
from plain_kit import API_KEY, MACHINE_USER, OTHER_WORKSPACE, THREAD, WORKSPACE, PlainAPI

from switchboard.sdk import Address, ConnectionCheck, HttpClient, ReplyPost
from switchboard.testing import FakeProvider, FakeProviders, Scripted, guarded_client

REPLY_ID = "rp_01jdcccccccccccccccccccccc"


@pytest.fixture
def api() -> PlainAPI:
    return PlainAPI()


@pytest.fixture
async def fake(fake_providers: FakeProviders, api: PlainAPI) -> FakeProvider:
    return await fake_providers.start("plain", answer=api)


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = guarded_client(allow_http=False)
    yield client
    await client.close()


def reply_of(http: HttpClient, fake: FakeProvider, where: Address | None = None) -> ReplyPost:
    return ReplyPost(
        http,
        "plain",
        WORKSPACE,
        API_KEY,
        where or plain.address_of(WORKSPACE, THREAD),
        "We've reset your session; please try again.",
        REPLY_ID,
        {plain.API_URL.name: fake.base_url},
    )


def check_of(http: HttpClient, base_url: str) -> ConnectionCheck:
    return ConnectionCheck(http, "plain", WORKSPACE, API_KEY, {plain.API_URL.name: base_url})


async def test_a_reply_is_one_reply_to_thread(http: HttpClient, fake: FakeProvider, api: PlainAPI) -> None:
    result = await plain.post(reply_of(http, fake))
    assert (result.state, result.object_id, result.error_class) == ("sent", None, None)
    text = "We've reset your session; please try again."
    assert api.replies == [{"threadId": THREAD, "textContent": text, "markdownContent": text}]
    [req] = fake.requests
    assert (req.method, req.path, req.auth) == ("POST", "/graphql/v1", f"Bearer {API_KEY}")
    assert "replyToThread" in req.json["query"]


async def test_an_address_with_a_bad_thread_id_dials_nothing(http: HttpClient, fake: FakeProvider) -> None:
    for bad in ("th_1", f"{THREAD}\n", THREAD.lower(), None):
        result = await plain.post(reply_of(http, fake, plain.address_of(WORKSPACE, bad)))  # type: ignore[arg-type]
        assert (result.state, result.error_code) == ("failed", "bad_address")
    assert fake.requests == []


def mutation_error(code: str, kind: str) -> dict[str, Any]:
    error = {"message": "The thread is closed for secret reasons", "type": kind, "code": code, "fields": []}
    return {"data": {"replyToThread": {"error": error}}}


def graphql_error(code: str) -> dict[str, Any]:
    return {"data": None, "errors": [{"message": "nope", "extensions": {"code": code}}]}


@pytest.mark.parametrize(
    ("status", "answer", "headers", "expected"),
    [
        # A mutation error comes back with HTTP 200 and a non-null `error`: a failure, by code or type.
        (
            200,
            mutation_error("input_validation", "VALIDATION"),
            {},
            ("failed", "invalid", "input_validation", False),
        ),
        (200, mutation_error("forbidden", "FORBIDDEN"), {}, ("failed", "forbidden", "forbidden", False)),
        (
            200,
            mutation_error("thread_not_found", "FORBIDDEN"),
            {},
            ("failed", "forbidden", "thread_not_found", False),
        ),
        (200, mutation_error("not_found", "VALIDATION"), {}, ("failed", "not_found", "not_found", False)),
        (200, mutation_error("internal", "INTERNAL"), {}, ("failed", "server", "internal", False)),
        (200, mutation_error("Nope Nope!", "??"), {}, ("failed", "invalid", "mutation_error", False)),
        # GraphQL errors (authentication, limits) are a listed error, whatever the status.
        (401, graphql_error("UNAUTHENTICATED"), {}, ("failed", "auth", "unauthenticated", False)),
        (200, graphql_error("FORBIDDEN"), {}, ("failed", "forbidden", "forbidden", False)),
        (429, None, {"Retry-After": "12"}, ("failed", "rate_limited", "http_429", True)),
        (
            200,
            graphql_error("RATE_LIMITED"),
            {"Retry-After": "3"},
            ("failed", "rate_limited", "rate_limited", True),
        ),
        (503, None, {}, ("failed", "server", "http_503", False)),
        (504, None, {}, ("unknown", "server", "http_504", False)),
        (200, {"data": {}}, {}, ("unknown", "server", "unreadable_answer", False)),
        (200, "<html>", {}, ("unknown", "server", "unreadable_answer", False)),
    ],
)
async def test_failures_are_classified(
    http: HttpClient,
    fake: FakeProvider,
    status: int,
    answer: Any,
    headers: dict[str, str],
    expected: tuple[Any, ...],
) -> None:
    fake.script("POST", "/graphql/v1", Scripted(status, answer, headers))
    result = await plain.post(reply_of(http, fake))
    assert (result.state, result.error_class, result.error_code, result.retryable) == expected
    if headers:
        assert result.retry_after == float(headers["Retry-After"])
    assert "secret reasons" not in repr(result)


async def test_the_key_check_names_the_workspace_and_the_machine_user(
    http: HttpClient, fake: FakeProvider
) -> None:
    result = await plain.CONNECTION.test(check_of(http, fake.base_url))
    assert result.ok and result.facts == {"workspace_id": WORKSPACE, "bot_id": MACHINE_USER}
    [req] = fake.requests
    assert req.json == {"query": "query { myWorkspace { id } myMachineUser { id } }"}


async def test_a_key_of_another_workspace_fails_the_check(
    fake_providers: FakeProviders, http: HttpClient
) -> None:
    other = await fake_providers.start("plain", answer=PlainAPI(workspace=OTHER_WORKSPACE))
    result = await plain.CONNECTION.test(check_of(http, other.base_url))
    assert not result.ok and result.error_class == "invalid" and OTHER_WORKSPACE in result.detail


async def test_a_key_that_is_no_machine_user_passes_without_a_bot(
    fake_providers: FakeProviders, http: HttpClient
) -> None:
    person = await fake_providers.start("plain", answer=PlainAPI(machine_user=None))
    result = await plain.CONNECTION.test(check_of(http, person.base_url))
    assert (
        result.ok and result.facts == {"workspace_id": WORKSPACE} and "not as a machine user" in result.detail
    )


async def test_a_refused_key_fails_the_check(http: HttpClient, fake: FakeProvider) -> None:
    fake.script("POST", "/graphql/v1", Scripted(401, graphql_error("UNAUTHENTICATED")))
    result = await plain.CONNECTION.test(check_of(http, fake.base_url))
    assert not result.ok and result.error_class == "auth"


def test_connection_kind_rules() -> None:
    kind = plain.CONNECTION
    assert kind.normalize_account_key(" w_01fxq6a83fxnn9xa00415vr1xp ") == WORKSPACE
    for bad in ("acme", "w_123", "https://app.plain.com", ""):
        with pytest.raises(ValueError):
            kind.normalize_account_key(bad)
    address = plain.address_of(WORKSPACE, THREAD)
    assert kind.account_matches(WORKSPACE, address) and not kind.account_matches(OTHER_WORKSPACE, address)
    assert kind.target_of(address) == THREAD
    assert kind.instance_of is not None and kind.instance_of(address) == WORKSPACE
    [setting] = kind.settings
    assert (setting.name, setting.default) == ("SWITCHBOARD_PLAIN_API_URL", "https://core-api.uk.plain.com")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (f"key: {API_KEY}", True),
        ("plainApiKey_ on its own", False),
        ("plainApiKey_short", False),
    ],
)
def test_the_secret_rule_matches_plain_keys(text: str, found: bool) -> None:
    [rule] = plain.SECRET_RULES
    assert (rule.pattern.search(text) is not None) is found
    assert rule.id == "plain-api-key" and rule.prefixes == ("plainApiKey_",)
