"""The cairn provider's outbound half, called directly against a stand-in Cairn over real TLS."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest
import switchboard_cairn as cairn

from switchboard.sdk import ConnectionCheck, HttpClient, ReplyPost, find_marker
from switchboard.testing import FakeProvider, Scripted, cairn_address, guarded_client

REPLY_ID = "rp_01jddddddddddddddddddddddd"


@pytest.fixture
def fake(fake_cairn: FakeProvider) -> FakeProvider:
    """The stand-in Cairn from switchboard.testing's pytest plugin."""
    return fake_cairn


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = guarded_client(allow_http=False)
    yield client
    await client.close()


def test_connection_kind_rules() -> None:
    kind = cairn.CONNECTION
    assert kind.normalize_account_key("https://Cairn.Example.com/") == "https://cairn.example.com"
    assert kind.account_matches("https://cairn.example.com", cairn_address("https://cairn.example.com"))
    # The dial goes to the connection's https URL whatever scheme the artifact URL had.
    assert kind.account_matches("https://cairn.example.com", cairn_address("http://cairn.example.com"))
    assert not kind.account_matches("https://cairn.example.com", cairn_address("https://evil.example"))
    # An address with its instance base matches that base exactly, path included, scheme aside.
    based = cairn_address("https://tools.example.com")
    based = dataclasses.replace(based, fields={**based.fields, "base": "http://tools.example.com/cairn-b"})
    assert kind.account_matches("https://tools.example.com/cairn-b", based)
    assert not kind.account_matches("https://tools.example.com/cairn-a", based)
    assert not kind.account_matches("https://tools.example.com", based)
    assert not kind.account_matches("https://tools.example.com/cairn-b/x", based)
    assert kind.instance_of(based) == "https://tools.example.com/cairn-b"
    # An address stored before addresses carried their base keeps the host rule (the core refuses
    # it when several connections of the scope match).
    assert kind.account_matches(
        "https://tools.example.com/cairn-a", cairn_address("https://tools.example.com")
    )
    assert kind.instance_of(cairn_address("https://tools.example.com")) is None
    assert kind.target_of(cairn_address("https://c", "art_9")) == "art_9"


async def test_comment_on_the_artifact(http: HttpClient, fake: FakeProvider) -> None:
    post = ReplyPost(
        http, "cairn", fake.base_url, "tok-4", cairn_address(fake.base_url), "See art_43.", REPLY_ID
    )
    result = await cairn.post(post)
    assert (result.state, result.object_id) == ("sent", "cm_1001")
    [req] = fake.requests
    assert (req.path, req.auth) == ("/v1/artifacts/art_42/comments", "Bearer tok-4")
    assert req.json["anchor_type"] == "artifact" and find_marker(req.json["body"]) == REPLY_ID


async def test_errors_and_bad_ids(http: HttpClient, fake: FakeProvider) -> None:
    bad = ReplyPost(http, "cairn", fake.base_url, "t", cairn_address(fake.base_url, "../x"), "x", REPLY_ID)
    assert (await cairn.post(bad)).error_code == "bad_address" and fake.requests == []
    fake.script("POST", "/v1/artifacts/art_42/comments", Scripted(404, {"error": "no such artifact"}))
    post = ReplyPost(http, "cairn", fake.base_url, "t", cairn_address(fake.base_url), "x", REPLY_ID)
    result = await cairn.post(post)
    assert (result.state, result.error_class) == ("failed", "not_found")


async def test_the_token_check(http: HttpClient, fake: FakeProvider) -> None:
    result = await cairn.CONNECTION.test(ConnectionCheck(http, "cairn", fake.base_url, "tok"))
    assert result.ok and fake.requests[0].path == "/v1/tokens/self"
