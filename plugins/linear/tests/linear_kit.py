"""What Linear sends and answers, for this package's tests (facts: docs/sources/linear.md).

``linear_headers`` signs a body as Linear does; ``issue_event`` and ``comment_event`` build deliveries
in Linear's envelope; ``LinearAPI`` is a stand-in GraphQL endpoint for ``FakeProvider(answer=…)``
that answers ``viewer`` and ``commentCreate`` as Linear does and records the comments it made.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import Any

from switchboard.testing import Recorded, hexmac

ORG = "6f4c5e5e-2a8d-4a53-9f0c-8a1d2b3c4d5e"
OTHER_ORG = "0b1c2d3e-4f50-4a61-8b72-93a4b5c6d7e8"
ISSUE = "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9"
USER = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
WEBHOOK_ID = "11111111-2222-4333-8444-555555555555"
SIGNING_SECRET = "lin_wh_f3c0d9b8a7e6f5d4c3b2a1908f7e6d5c"
API_KEY = "lin_api_" + "Q7mZ3xK9pL2vN8rT4wY6bH1cF5gJ0dSaEuRiOoWn"


def linear_headers(
    secret: str, body: bytes, delivery: str | None = None, event: str = "Issue"
) -> dict[str, str]:
    """Linear's headers: ``Linear-Signature`` = hex HMAC-SHA256 of the raw body, the delivery id and
    the entity type."""
    return {
        "Content-Type": "application/json; charset=utf-8",
        "User-Agent": "Linear-Webhook",
        "Linear-Delivery": delivery or str(uuid.uuid4()),
        "Linear-Event": event,
        "Linear-Signature": hexmac(secret, body),
    }


def now_ms(offset_seconds: float = 0) -> int:
    return int((time.time() + offset_seconds) * 1000)


def envelope(
    entity: str, action: str, data: dict[str, Any], *, org: str = ORG, at_ms: int | None = None
) -> dict[str, Any]:
    return {
        "action": action,
        "type": entity,
        "createdAt": "2026-11-30T10:00:00.000Z",
        "data": data,
        "url": f"https://linear.app/acme/issue/ENG-42/{data.get('id', '')}",
        "organizationId": org,
        "webhookTimestamp": now_ms() if at_ms is None else at_ms,
        "webhookId": WEBHOOK_ID,
    }


def issue_event(action: str = "create", *, issue: str = ISSUE, **kw: Any) -> dict[str, Any]:
    data = {
        "id": issue,
        "identifier": "ENG-42",
        "title": "Login fails with SSO",
        "description": "Steps to reproduce…",
        "teamId": "c0ffee00-0000-4000-8000-000000000001",
        "number": 42,
    }
    return envelope("Issue", action, data, **kw)


def comment_event(
    body: str, *, comment: str | None = None, issue: str = ISSUE, action: str = "create", **kw: Any
) -> dict[str, Any]:
    data = {
        "id": comment or str(uuid.uuid4()),
        "body": body,
        "issueId": issue,
        "userId": USER,
        "issue": {"id": issue, "title": "Login fails with SSO"},
    }
    return envelope("Comment", action, data, **kw)


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


class LinearAPI:
    """The GraphQL endpoint's default answers: ``viewer`` (the key's user in ``org``) and
    ``commentCreate`` (a new comment with a fresh UUID and its URL)."""

    def __init__(self, org: str = ORG) -> None:
        self.org = org
        self.comments: list[dict[str, Any]] = []
        self._numbers = itertools.count(1)

    def __call__(self, rec: Recorded) -> tuple[int, Any]:
        if rec.method != "POST" or rec.path != "/graphql":
            return 404, {"errors": [{"message": "not found"}]}
        sent = rec.json or {}
        query = str(sent.get("query", ""))
        if "commentCreate" in query:
            given = sent["variables"]["input"]
            comment = {
                "id": str(uuid.uuid4()),
                "url": f"https://linear.app/acme/issue/ENG-42#comment-{next(self._numbers)}",
            }
            self.comments.append({**comment, **given})
            return 200, {"data": {"commentCreate": {"success": True, "comment": comment}}}
        if "viewer" in query:
            return 200, {"data": {"viewer": {"id": USER, "organization": {"id": self.org}}}}
        return 200, {
            "errors": [{"message": "Unknown query", "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}]
        }
