"""``switchboard.sdk``: the public surface for provider authors, and its helpers, which answer for any
input and never raise on what a sender controls."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from switchboard import sdk
from switchboard.sdk import (
    PostResult,
    Response,
    api_url_setting,
    graphql_failure,
    rfc3339,
    same,
    secret_rule,
    signature_matches,
    timestamp_within,
    unix_seconds,
    valid_uuid,
)
from switchboard.secretscan import scan

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
# Header values as aiohttp hands them over: any text, lone surrogates included ('\udcff' is an
# undecodable byte), and the odd non-string a provider might pass along.
HOSTILE = st.one_of(st.text(), st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)))
ANYTHING = st.one_of(HOSTILE, st.binary(), st.integers(), st.floats(), st.none(), st.booleans())


def test_every_public_name_is_there() -> None:
    assert sorted(sdk.__all__) == sorted(set(sdk.__all__))
    for name in sdk.__all__:
        assert getattr(sdk, name) is not None, name


@given(ANYTHING, ANYTHING)
def test_same_never_raises(a: object, b: object) -> None:
    assert same(a, b) is (isinstance(a, str) and isinstance(b, str) and a == b)


def test_same_on_the_header_that_made_github_answer_503() -> None:
    expected = hmac.new(b"s", b"{}", hashlib.sha256).hexdigest()
    assert same(expected, "\udcff\udcfe") is False
    assert same("ü", "ü") is True and same("\udcff", "\udcff") is True


@given(
    ANYTHING, st.one_of(st.text(), st.none()), st.binary(max_size=64), st.sampled_from(["", "sha256=", "v0="])
)
def test_signature_matches_never_raises(
    given_value: object, secret: str | None, body: bytes, prefix: str
) -> None:
    assert signature_matches(given_value, secret, body, prefix=prefix) in (True, False)


def test_signature_matches_exactly() -> None:
    digest = hmac.new(b"s", b"body", hashlib.sha256).hexdigest()
    assert signature_matches(f"sha256={digest}", "s", b"body", prefix="sha256=")
    assert signature_matches(f"  sha256={digest} ", "s", b"body", prefix="sha256=")
    assert not signature_matches(digest, "s", b"body", prefix="sha256=")
    assert not signature_matches(f"sha256={digest.upper()}", "s", b"body", prefix="sha256=")
    assert not signature_matches(f"sha256={digest}", "t", b"body", prefix="sha256=")
    assert not signature_matches(f"sha256={digest}", None, b"body", prefix="sha256=")


@given(ANYTHING, st.booleans())
def test_timestamps_never_raise(value: object, millis: bool) -> None:
    assert timestamp_within(value, NOW, 300, millis=millis) in (True, False)
    assert rfc3339(value) is None or rfc3339(value).tzinfo is not None  # type: ignore[union-attr]
    assert unix_seconds(value, millis=millis) is None or unix_seconds(value, millis=millis) >= 0  # type: ignore[operator]


def test_timestamp_windows() -> None:
    now = int(NOW.timestamp())
    assert timestamp_within(str(now - 300), NOW, 300) and not timestamp_within(str(now - 301), NOW, 300)
    assert timestamp_within((now + 60) * 1000, NOW, 60, millis=True)
    assert not timestamp_within(True, NOW, 300) and not timestamp_within("-5", NOW, 300)
    assert not timestamp_within(" 1", NOW, 300) and not timestamp_within(
        "\uff11\uff12", NOW, 300
    )  # full-width digits
    assert rfc3339("2026-11-30T10:00:00Z") == NOW
    assert rfc3339("2026-11-30T10:00:00") is None  # no zone
    assert sdk.within(rfc3339("0001-01-01T00:00:00+14:00"), NOW, 300) is False
    assert sdk.within(NOW + timedelta(seconds=299), NOW, 300)


def test_strict_ids() -> None:
    assert valid_uuid("2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9") == "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9"
    assert valid_uuid("2174ADD1-F7C8-44E3-BBF3-2D60B5EA8BC9") is None
    assert valid_uuid(" 2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9") is None and valid_uuid(7) is None


def response(status: int, body: bytes, headers: dict[str, str] | None = None) -> Response:
    return Response(status=status, headers=headers or {}, body=body)


@pytest.mark.parametrize(
    ("resp", "expected"),
    [
        (response(200, b'{"data": {"commentCreate": {"success": true}}}'), None),
        (
            response(200, b'{"errors": [{"message": "x", "extensions": {"code": "AUTHENTICATION_ERROR"}}]}'),
            PostResult(state="failed", error_class="auth", error_code="authentication_error"),
        ),
        (
            response(400, b'{"errors": [{"extensions": {"code": "RATELIMITED"}}]}', {"Retry-After": "12"}),
            PostResult(
                state="failed",
                error_class="rate_limited",
                error_code="ratelimited",
                retry_after=12.0,
                retryable=True,
            ),
        ),
        (
            response(200, b'{"errors": [{"extensions": {"code": "FORBIDDEN"}}]}'),
            PostResult(state="failed", error_class="forbidden", error_code="forbidden"),
        ),
        (
            response(200, b'{"errors": [{"message": "secret text <b>", "extensions": {"code": "<b>evil"}}]}'),
            PostResult(state="failed", error_class="invalid", error_code="graphql_error"),
        ),
        (
            response(401, b'{"errors": [{"message": "bad key"}]}'),
            PostResult(state="failed", error_class="auth", error_code="graphql_error"),
        ),
        (
            response(502, b"<html>bad gateway</html>"),
            PostResult(state="unknown", error_class="server", error_code="http_502"),
        ),
        (response(500, b"{}"), PostResult(state="failed", error_class="server", error_code="http_500")),
    ],
)
def test_graphql_failures_are_classified(resp: Response, expected: PostResult | None) -> None:
    assert graphql_failure(resp) == expected


@given(st.binary(max_size=200), st.integers(min_value=100, max_value=599))
def test_graphql_failure_never_raises(body: bytes, status: int) -> None:
    result = graphql_failure(response(status, body))
    assert result is None or isinstance(result, PostResult)


def test_api_url_setting_and_secret_rule() -> None:
    setting = api_url_setting("linear", "https://api.linear.app")
    assert setting.name == "SWITCHBOARD_LINEAR_API_URL" and setting.default == "https://api.linear.app"
    assert setting.check(" http://127.0.0.1:8/graphql/ ") == "http://127.0.0.1:8/graphql"
    with pytest.raises(ValueError, match="must be an http:// or https:// URL"):
        setting.check("ftp://x")
    rule = secret_rule("toy-key", "Toy key", r"toy_[A-Za-z0-9]{20}", prefixes=("toy_",), min_entropy=3.0)
    assert scan("key toy_Ab3De5Gh7Jk9Lm1Np3Qr here", [rule]) is rule
    assert scan("key toy_aaaaaaaaaaaaaaaaaaaa here", [rule]) is None  # a placeholder
    assert scan("key xtoy_Ab3De5Gh7Jk9Lm1Np3Qr here", [rule]) is None  # glued to a word
