"""The github provider's outbound half, called directly against a stand-in GitHub over real TLS."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import switchboard_github as github

from switchboard.sdk import ConnectionCheck, HttpClient, ReplyPost, find_marker
from switchboard.testing import FakeProvider, Scripted, forge_address, guarded_client

REPLY_ID = "rp_01jdaaaaaaaaaaaaaaaaaaaaaa"


@pytest.fixture
def fake(fake_github: FakeProvider) -> FakeProvider:
    """The stand-in Github from switchboard.testing's pytest plugin."""
    return fake_github


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = guarded_client(allow_http=False)
    yield client
    await client.close()


def ghes_post(http: HttpClient, fake: FakeProvider, **fields: object) -> ReplyPost:
    address = forge_address("github", fake.host)
    address = type(address)(address.kind, address.provider, address.display, {**address.fields, **fields})
    return ReplyPost(http, "github", fake.host, "tok-1", address, "Fixed.", REPLY_ID)


def test_connection_kind_rules() -> None:
    kind = github.CONNECTION
    assert kind.default_account_key == "github.com" and kind.text_limit == 65_536
    assert kind.normalize_account_key("https://GHE.example.com/") == "ghe.example.com"
    assert kind.account_matches("github.com", forge_address("github", "github.com"))
    assert not kind.account_matches("github.com", forge_address("github", "evil.example"))
    # A GHES payload's html_url spelled with the default port names the host the webhook was bound
    # to (its instance drops :443): the connection for that host serves it, as any other.
    assert kind.account_matches("ghe.example.com", forge_address("github", "GHE.example.com:443"))
    assert not kind.account_matches("ghe.example.com", forge_address("github", "ghe.example.com:8443"))
    assert kind.target_of(forge_address("github", "github.com", "acme/api")) == "acme/api"


async def test_ghes_comment(http: HttpClient, fake: FakeProvider) -> None:
    result = await github.post(ghes_post(http, fake))
    assert (result.state, result.object_id) == ("sent", "1001")
    assert result.permalink == "https://github.com/acme/api/issues/7#issuecomment-1001"
    [req] = fake.requests
    assert (req.method, req.path, req.auth) == (
        "POST",
        "/api/v3/repos/acme/api/issues/7/comments",
        "Bearer tok-1",
    )
    assert req.headers["Accept"] == "application/vnd.github+json"
    assert find_marker(req.json["body"]) == REPLY_ID and req.json["body"].startswith("Fixed.")


async def test_saas_uses_the_operator_override(http: HttpClient, fake: FakeProvider) -> None:
    post = ReplyPost(
        http,
        "github",
        "github.com",
        "tok",
        forge_address("github", "github.com"),
        "x",
        REPLY_ID,
        settings={"SWITCHBOARD_GITHUB_API_URL": fake.base_url},
    )
    assert (await github.post(post)).state == "sent"
    assert fake.requests[0].path == "/repos/acme/api/issues/7/comments"


@pytest.mark.parametrize("repo", ["../etc", "acme/..", "acme/api/x", "acme api/x"])
async def test_an_unusable_address_never_dials(http: HttpClient, fake: FakeProvider, repo: str) -> None:
    result = await github.post(ghes_post(http, fake, repo=repo))
    assert (result.state, result.error_code) == ("failed", "bad_address")
    assert fake.requests == []


async def test_primary_rate_limit_reads_the_reset(http: HttpClient, fake: FakeProvider) -> None:
    reset = str(int(time.time()) + 120)
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset}
    fake.script(
        "POST", "/api/v3/repos/acme/api/issues/7/comments", Scripted(403, {"message": "limit"}, headers)
    )
    result = await github.post(ghes_post(http, fake))
    assert (result.state, result.error_class, result.retryable) == ("failed", "rate_limited", True)
    assert 100 <= (result.retry_after or 0) <= 121


@pytest.mark.parametrize("reset", ["\u00b2", "9" * 400, "99999999999999999999", "-5"])
async def test_an_unreadable_or_far_reset_still_reads_as_rate_limited(
    http: HttpClient, fake: FakeProvider, reset: str
) -> None:
    # The header is the far side's: a superscript digit (str.isdigit() passes it, int() refuses it)
    # or a number past a float's range must not turn a rate limit into a plugin fault.
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset}
    fake.script(
        "POST", "/api/v3/repos/acme/api/issues/7/comments", Scripted(403, {"message": "limit"}, headers)
    )
    result = await github.post(ghes_post(http, fake))
    assert (result.state, result.error_class, result.retryable) == ("failed", "rate_limited", True)
    assert result.retry_after is None or 0 <= result.retry_after <= 24 * 3600


async def test_plain_403_is_forbidden(http: HttpClient, fake: FakeProvider) -> None:
    fake.script("POST", "/api/v3/repos/acme/api/issues/7/comments", Scripted(403, {"message": "no"}))
    result = await github.post(ghes_post(http, fake))
    assert (result.state, result.error_class, result.retryable) == ("failed", "forbidden", False)


async def test_the_connection_test_reads_the_current_user(http: HttpClient, fake: FakeProvider) -> None:
    check = ConnectionCheck(http, "github", fake.host, "tok-1")
    result = await github.CONNECTION.test(check)
    assert result.ok and result.facts == {"login": "switchboard-bot"}
    fake.script("GET", "/api/v3/user", Scripted(401, {"message": "Bad credentials"}))
    result = await github.CONNECTION.test(check)
    assert (result.ok, result.error_class) == (False, "auth") and "Bad credentials" not in result.detail
