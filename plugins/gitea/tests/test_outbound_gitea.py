"""The gitea provider's outbound half, called directly against a stand-in Gitea over real TLS."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest
import switchboard_gitea as gitea

from switchboard.sdk import ConnectionCheck, HttpClient, ReplyPost, find_marker
from switchboard.testing import FakeProvider, Scripted, forge_address, guarded_client

REPLY_ID = "rp_01jdbbbbbbbbbbbbbbbbbbbbbb"


@pytest.fixture
def fake(fake_gitea: FakeProvider) -> FakeProvider:
    """The stand-in Gitea from switchboard.testing's pytest plugin."""
    return fake_gitea


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = guarded_client(allow_http=False)
    yield client
    await client.close()


def test_connection_kind_rules() -> None:
    kind = gitea.CONNECTION
    assert kind.normalize_account_key("https://Git.Example.com/forge/") == "https://git.example.com/forge"
    with pytest.raises(ValueError):
        kind.normalize_account_key("http://git.example.com")
    assert kind.account_matches("https://git.example.com/forge", forge_address("gitea", "git.example.com"))
    assert not kind.account_matches("https://git.example.com", forge_address("gitea", "git.example.com:8443"))
    # With its instance base, an address matches that base exactly (path included, scheme aside).
    based = forge_address("gitea", "git.example.com")
    based = dataclasses.replace(based, fields={**based.fields, "base": "https://git.example.com/forge"})
    assert kind.account_matches("https://git.example.com/forge", based)
    assert not kind.account_matches("https://git.example.com", based)
    assert not kind.account_matches("https://git.example.com/forge-b", based)
    assert not kind.account_matches("https://git.example.com/Forge", based)
    assert kind.instance_of(based) == "https://git.example.com/forge"
    assert kind.instance_of(forge_address("gitea", "git.example.com")) is None


async def test_the_post_goes_under_the_connections_base_path(http: HttpClient, fake: FakeProvider) -> None:
    """A Gitea served under a path gets its API under that path: {base}/api/v1/…"""
    address = forge_address("gitea", fake.host, number=5)
    address = dataclasses.replace(address, fields={**address.fields, "base": f"{fake.base_url}/gitea-b"})
    fake.script("POST", "/gitea-b/api/v1/repos/acme/api/issues/5/comments", Scripted(201, {"id": 77}))
    post = ReplyPost(http, "gitea", f"{fake.base_url}/gitea-b", "tok-b", address, "Done.", REPLY_ID)
    result = await gitea.post(post)
    assert (result.state, result.object_id) == ("sent", "77")
    [req] = fake.requests
    assert (req.path, req.auth) == ("/gitea-b/api/v1/repos/acme/api/issues/5/comments", "token tok-b")


async def test_comment_with_the_token_scheme(http: HttpClient, fake: FakeProvider) -> None:
    post = ReplyPost(
        http, "gitea", fake.base_url, "tok-2", forge_address("gitea", fake.host), "Merged.", REPLY_ID
    )
    result = await gitea.post(post)
    assert (result.state, result.object_id) == ("sent", "1001")
    [req] = fake.requests
    assert (req.path, req.auth) == ("/api/v1/repos/acme/api/issues/7/comments", "token tok-2")
    assert find_marker(req.json["body"]) == REPLY_ID


async def test_errors_are_classes(http: HttpClient, fake: FakeProvider) -> None:
    post = ReplyPost(http, "gitea", fake.base_url, "tok", forge_address("gitea", fake.host), "x", REPLY_ID)
    path = "/api/v1/repos/acme/api/issues/7/comments"
    for status, expected in (
        (404, ("failed", "not_found")),
        (429, ("failed", "rate_limited")),
        (504, ("unknown", "server")),
    ):
        fake.script("POST", path, Scripted(status, {"message": "detail from the server"}))
        result = await gitea.post(post)
        assert (result.state, result.error_class) == expected


async def test_the_connection_test(http: HttpClient, fake: FakeProvider) -> None:
    result = await gitea.CONNECTION.test(ConnectionCheck(http, "gitea", fake.base_url, "tok"))
    assert result.ok and fake.requests[0].path == "/api/v1/user"
