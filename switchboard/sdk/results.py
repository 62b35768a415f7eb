"""Outbound helpers for provider authors beyond ``switchboard.outbound``'s REST ones: a GraphQL
answer's failure, the ``SWITCHBOARD_<KIND>_API_URL`` setting, and secret-scan rules for a kind's own
credential formats.
"""

from __future__ import annotations

import re
from typing import Any

from switchboard.outbound import failure, json_dict, retry_after_seconds
from switchboard.provider import ErrorClass, PostResult, Response, Setting
from switchboard.secretscan import Rule
from switchboard.settings import ENV_PREFIX, http_url

_CODE_RE = re.compile(r"[a-z0-9_]{1,60}")

# GraphQL servers name their errors in ``extensions.code`` (Apollo's names, Linear's, Plain's); the
# class is what the core acts on. Anything else is ``invalid``: the request was refused as it is.
GRAPHQL_CLASSES: dict[str, ErrorClass] = {
    "unauthenticated": "auth",
    "authentication_error": "auth",
    "authentication_failed": "auth",
    "invalid_token": "auth",
    "forbidden": "forbidden",
    "unauthorized": "forbidden",
    "permission_denied": "forbidden",
    "not_found": "not_found",
    "entity_not_found": "not_found",
    "ratelimited": "rate_limited",
    "rate_limited": "rate_limited",
    "too_many_requests": "rate_limited",
    "internal_server_error": "server",
    "internal": "server",
    "internal_error": "server",
    "service_unavailable": "server",
}


def error_code(value: object, fallback: str = "unknown_error") -> str:
    """A provider's error code as a short machine word (lower case, ``[a-z0-9_]``), never free text."""
    if isinstance(value, str):
        word = value.strip().lower().replace(" ", "_").replace("-", "_")
        if _CODE_RE.fullmatch(word):
            return word
    return fallback


def class_of_code(code: str) -> ErrorClass:
    """The error class of a (normalised) GraphQL or API error code; ``invalid`` when unknown."""
    return GRAPHQL_CLASSES.get(code, "invalid")


def _first_error(body: dict[str, Any]) -> dict[str, Any] | None:
    errors = body.get("errors")
    if isinstance(errors, list) and errors:
        first = errors[0]
        return first if isinstance(first, dict) else {}
    return None


def graphql_failure(resp: Response) -> PostResult | None:
    """None when ``resp`` is a GraphQL success (HTTP 200 and no ``errors``); else the failure.

    A listed error is classified by its ``extensions.code`` (``error_code`` is that code): a rate
    limit is retryable with the ``Retry-After`` wait, whatever the HTTP status. GraphQL refuses a
    request before running it, so an error answer is ``failed``, except a 502/504 without an error
    list (a gateway may hide a mutation that ran), which is ``unknown`` as for REST. Never reads
    an error's message into the result.
    """
    body = json_dict(resp)
    first = _first_error(body)
    if first is None:
        return None if resp.status == 200 else failure(resp)
    extensions = first.get("extensions")
    code = error_code(extensions.get("code") if isinstance(extensions, dict) else None, "graphql_error")
    error_class = class_of_code(code)
    if error_class == "rate_limited" or resp.status == 429:
        return PostResult(
            state="failed",
            error_class="rate_limited",
            error_code=code,
            retry_after=retry_after_seconds(resp.headers),
            retryable=True,
        )
    if error_class == "invalid" and resp.status in (401, 403, 404):
        return PostResult(state="failed", error_class=failure(resp).error_class, error_code=code)
    return PostResult(state="failed", error_class=error_class, error_code=code)


def api_url_setting(kind: str, default: str, description: str = "") -> Setting:
    """The kind's API base, ``SWITCHBOARD_<KIND>_API_URL``: an http(s) URL, its trailing slash
    dropped; ``default`` when unset. Read it in ``post`` and ``test`` as
    ``post.settings[setting.name]``."""
    return Setting(
        name=f"{ENV_PREFIX}{kind.upper()}_API_URL",
        description=description or f"The {kind} API base (tests and proxies point it elsewhere).",
        default=default,
        check=lambda value: http_url(value.strip()),
    )


def secret_rule(
    rule_id: str,
    description: str,
    regex: str,
    *,
    prefixes: tuple[str, ...] = (),
    min_entropy: float = 0.0,
) -> Rule:
    """A secret-scan rule for one credential format: ``regex`` matches the whole token (give the
    token's fixed start in ``prefixes`` too, so a token broken by spaces or lines is still found);
    ``min_entropy`` (bits per character) passes over placeholders such as ``lin_api_xxxx…``."""
    boundary_left, boundary_right = r"(?<![A-Za-z0-9])", r"(?![A-Za-z0-9])"
    pattern = re.compile(boundary_left + f"(?:{regex})" + boundary_right)
    return Rule(rule_id, pattern, description, min_entropy, prefixes=prefixes)
