"""The linear connection kind, called directly against a stand-in Linear GraphQL API over TLS: the
comment mutation, how every kind of failure is classified, the token check and the account rules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import switchboard_linear as linear
from linear_kit import API_KEY, ISSUE, ORG, OTHER_ORG, USER, LinearAPI

from switchboard.sdk import Address, ConnectionCheck, HttpClient, ReplyPost
from switchboard.testing import FakeProvider, FakeProviders, Scripted, guarded_client

REPLY_ID = "rp_01jdcccccccccccccccccccccc"
OAUTH_TOKEN = "lin_oauth_" + "8c1f0e2d9b3a4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5"


@pytest.fixture
def api() -> LinearAPI:
    return LinearAPI()


@pytest.fixture
async def fake(fake_providers: FakeProviders, api: LinearAPI) -> FakeProvider:
    return await fake_providers.start("linear", answer=api)


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = guarded_client(allow_http=False)
    yield client
    await client.close()


def address(issue: Any = ISSUE, org: str = ORG) -> Address:
    return linear.address_of(org, issue)


def reply_of(
    http: HttpClient, fake: FakeProvider, secret: str = API_KEY, where: Address | None = None
) -> ReplyPost:
    return ReplyPost(
        http,
        "linear",
        ORG,
        secret,
        where or address(),
        "Fixed in main; deploying now.",
        REPLY_ID,
        {linear.API_URL.name: fake.base_url},
    )


async def test_a_reply_is_one_comment_create_on_the_issue(
    http: HttpClient, fake: FakeProvider, api: LinearAPI
) -> None:
    result = await linear.post(reply_of(http, fake))
    assert result.state == "sent" and result.error_class is None
    [comment] = api.comments
    assert result.object_id == comment["id"] and result.permalink == comment["url"]
    [req] = fake.requests
    assert (req.method, req.path) == ("POST", "/graphql")
    # A personal API key goes bare in Authorization; the text is sent as it is (no marker).
    assert req.auth == API_KEY
    assert req.json["variables"] == {"input": {"issueId": ISSUE, "body": "Fixed in main; deploying now."}}
    assert "commentCreate" in req.json["query"]


async def test_an_oauth_token_is_a_bearer(http: HttpClient, fake: FakeProvider) -> None:
    await linear.post(reply_of(http, fake, secret=OAUTH_TOKEN))
    assert fake.requests[0].auth == f"Bearer {OAUTH_TOKEN}"


async def test_an_address_with_a_bad_issue_id_dials_nothing(http: HttpClient, fake: FakeProvider) -> None:
    for bad in ("ENG-42", f"{ISSUE}\n", 7, None):
        result = await linear.post(reply_of(http, fake, where=address(bad)))
        assert (result.state, result.error_code) == ("failed", "bad_address")
    assert fake.requests == []


def graphql_error(code: str, message: str = "Something went wrong") -> dict[str, Any]:
    return {"data": None, "errors": [{"message": message, "extensions": {"code": code}}]}


@pytest.mark.parametrize(
    ("status", "answer", "headers", "expected"),
    [
        # GraphQL errors arrive with HTTP 200 as often as not: a listed error is a failure.
        (200, graphql_error("AUTHENTICATION_ERROR"), {}, ("failed", "auth", "authentication_error", False)),
        (400, graphql_error("AUTHENTICATION_ERROR"), {}, ("failed", "auth", "authentication_error", False)),
        (200, graphql_error("FORBIDDEN"), {}, ("failed", "forbidden", "forbidden", False)),
        (200, graphql_error("ENTITY_NOT_FOUND"), {}, ("failed", "not_found", "entity_not_found", False)),
        (400, graphql_error("INVALID_INPUT"), {}, ("failed", "invalid", "invalid_input", False)),
        (
            400,
            graphql_error("RATELIMITED"),
            {"Retry-After": "30"},
            ("failed", "rate_limited", "ratelimited", True),
        ),
        (429, None, {"Retry-After": "7"}, ("failed", "rate_limited", "http_429", True)),
        (401, None, {}, ("failed", "auth", "http_401", False)),
        (500, None, {}, ("failed", "server", "http_500", False)),
        # A gateway error may hide a mutation that ran.
        (502, None, {}, ("unknown", "server", "http_502", False)),
        # No error, but no comment either.
        (
            200,
            {"data": {"commentCreate": {"success": False, "comment": None}}},
            {},
            ("failed", "invalid", "not_created", False),
        ),
        (200, {"data": None}, {}, ("unknown", "server", "unreadable_answer", False)),
        (200, "not json", {}, ("unknown", "server", "unreadable_answer", False)),
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
    fake.script("POST", "/graphql", Scripted(status, answer, headers))
    result = await linear.post(reply_of(http, fake))
    assert (result.state, result.error_class, result.error_code, result.retryable) == expected
    if result.retryable:
        assert result.retry_after == float(headers["Retry-After"])
    # Never a provider's message in the outcome.
    assert "went wrong" not in repr(result)


async def test_the_token_check_reads_the_viewer(http: HttpClient, fake: FakeProvider) -> None:
    result = await linear.CONNECTION.test(
        ConnectionCheck(http, "linear", ORG, API_KEY, {linear.API_URL.name: fake.base_url})
    )
    assert result.ok and result.facts == {"user_id": USER, "organization_id": ORG}
    [req] = fake.requests
    assert req.json == {"query": "query { viewer { id organization { id } } }"} and req.auth == API_KEY


async def test_a_key_of_another_organisation_fails_the_check(
    fake_providers: FakeProviders, http: HttpClient
) -> None:
    other = await fake_providers.start("linear", answer=LinearAPI(org=OTHER_ORG))
    check = ConnectionCheck(http, "linear", ORG, API_KEY, {linear.API_URL.name: other.base_url})
    result = await linear.CONNECTION.test(check)
    assert not result.ok and result.error_class == "invalid" and OTHER_ORG in result.detail


async def test_a_refused_key_fails_the_check(http: HttpClient, fake: FakeProvider) -> None:
    fake.script("POST", "/graphql", Scripted(400, graphql_error("AUTHENTICATION_ERROR", "bad key lin_api_x")))
    result = await linear.CONNECTION.test(
        ConnectionCheck(http, "linear", ORG, API_KEY, {linear.API_URL.name: fake.base_url})
    )
    assert not result.ok and result.error_class == "auth" and "lin_api_x" not in result.detail


def test_connection_kind_rules() -> None:
    kind = linear.CONNECTION
    assert kind.normalize_account_key(f"  {ORG.upper()} ") == ORG
    for bad in ("acme", "https://linear.app/acme", ""):
        with pytest.raises(ValueError):
            kind.normalize_account_key(bad)
    assert kind.account_matches(ORG, address()) and not kind.account_matches(OTHER_ORG, address())
    assert kind.target_of(address()) == ISSUE
    assert kind.instance_of is not None and kind.instance_of(address()) == ORG
    assert [s.name for s in kind.settings] == ["SWITCHBOARD_LINEAR_API_URL"]
    assert kind.settings[0].default == "https://api.linear.app"
    assert kind.settings[0].check(" https://linear.internal/api/ ") == "https://linear.internal/api"
    with pytest.raises(ValueError):
        kind.settings[0].check("ftp://linear")


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        (f"here: {API_KEY}", "linear-api-key"),
        (f"token={OAUTH_TOKEN}.", "linear-oauth-token"),
        ("the prefix lin_api_ alone", None),
        ("lin_api_short", None),
    ],
)
def test_secret_rules_match_linear_credentials(text: str, rule: str | None) -> None:
    """The patterns; the core's scanner (broken tokens, placeholders by entropy) is exercised end to
    end in test_e2e_linear.py, where a reply quoting a key is refused."""
    assert [r.id for r in linear.SECRET_RULES if r.pattern.search(text)] == ([rule] if rule else [])
    assert all(r.min_entropy > 0 and r.prefixes for r in linear.SECRET_RULES)
