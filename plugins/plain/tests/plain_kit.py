"""What Plain sends and answers, for this package's tests (facts: docs/sources/plain.md).

``plain_headers`` signs a body as Plain does; ``event`` builds a delivery in Plain's envelope (a
customer's email, or our machine user's ``thread.email_sent``); ``PlainAPI`` is a stand-in GraphQL
endpoint for ``FakeProvider(answer=…)`` answering ``myWorkspace``/``myMachineUser`` and
``replyToThread`` as Plain does, and recording the replies it sent.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from switchboard.testing import Recorded, hexmac

WORKSPACE = "w_01FXQ6A83FXNN9XA00415VR1XP"
OTHER_WORKSPACE = "w_01GST0W989ZNAW53X6XYHAY87P"
THREAD = "th_01HD44FHMCDSSWE38N14FSYV6K"
MACHINE_USER = "mu_01HE8AM6GZPZ3Q3RBEVE5TZ80X"
HUMAN_USER = "u_01H1V4NA10RMHWFBXB6A1ZBYRA"
SIGNING_SECRET = "plain_request_signing_7c1e0f9d8b6a5c4e3d2f1a0b"
API_KEY = "plainApiKey_" + "tmRD_xF5qiMH0657LkbLCC1maN4hLsBIbyOgjqEP4w"


def plain_headers(secret: str, body: bytes) -> dict[str, str]:
    """Plain's request signing: ``Plain-Request-Signature`` = hex HMAC-SHA256 of the raw body."""
    return {
        "Content-Type": "application/json",
        "User-Agent": "Plain-Webhooks/1.0",
        "Plain-Request-Signature": hexmac(secret, body),
    }


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def event(
    event_type: str = "thread.email_received",
    *,
    at: datetime | None = None,
    workspace: str = WORKSPACE,
    thread: str = THREAD,
    sender: dict[str, Any] | None = None,
    text: str = "I can't log in since this morning.",
) -> dict[str, Any]:
    """A Plain delivery. Message events carry their message (``email``); ``sender`` is its
    ``createdBy`` (a customer by default)."""
    when = rfc3339(at or datetime.now(UTC))
    payload: dict[str, Any] = {
        "eventType": event_type,
        "thread": {
            "id": thread,
            "title": "Can't log in",
            "previewText": text[:80],
            "status": "TODO",
            "priority": 2,
            "customer": {
                "id": "c_01HD44FHDPG82VQ4QNHDR4N2T0",
                "email": {"email": "peter@example.com"},
                "fullName": "Peter Santos",
            },
        },
    }
    if event_type.startswith("thread.email_"):
        payload["email"] = {
            "id": f"e_{uuid.uuid4().hex[:26].upper()}",
            "textContent": text,
            "createdAt": when,
            "createdBy": sender or {"actorType": "customer", "customerId": "c_01HD44FHDPG82VQ4QNHDR4N2T0"},
        }
    return {
        "id": f"pEv_{uuid.uuid4().hex}",
        "type": event_type,
        "timestamp": when,
        "workspaceId": workspace,
        "payload": payload,
        "webhookMetadata": {"webhookTargetId": "whTarget_01", "webhookDeliveryAttemptNumber": 1},
    }


def sent_by_machine_user(text: str, machine_user: str = MACHINE_USER, **kw: Any) -> dict[str, Any]:
    return event(
        "thread.email_sent",
        sender={"actorType": "machineUser", "machineUserId": machine_user},
        text=text,
        **kw,
    )


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


def ago(seconds: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)


class PlainAPI:
    """The GraphQL endpoint's default answers: the key's workspace and machine user, and
    ``replyToThread`` with no error (Plain answers nothing else)."""

    def __init__(self, workspace: str = WORKSPACE, machine_user: str | None = MACHINE_USER) -> None:
        self.workspace = workspace
        self.machine_user = machine_user
        self.replies: list[dict[str, Any]] = []

    def __call__(self, rec: Recorded) -> tuple[int, Any]:
        if rec.method != "POST" or rec.path != "/graphql/v1":
            return 404, {"errors": [{"message": "not found"}]}
        sent = rec.json or {}
        query = str(sent.get("query", ""))
        if "replyToThread" in query:
            self.replies.append(sent["variables"]["input"])
            return 200, {"data": {"replyToThread": {"error": None}}}
        if "myWorkspace" in query:
            machine = {"id": self.machine_user} if self.machine_user else None
            return 200, {"data": {"myWorkspace": {"id": self.workspace}, "myMachineUser": machine}}
        return 200, {
            "errors": [{"message": "Unknown query", "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}]
        }
