"""Signing deliveries as a sender would, for the operator's test delivery and redelivery
(``deliveries``): the request goes through the kind's own verifier like any other, so what the log
shows is what ingest decided, not a shortcut.

Only the kinds whose signature scheme Switchboard knows can be signed here; a kind that a plugin
brings and does not describe cannot (the SDK has no signing hook), and says so.

* A **test delivery** is a harmless, correctly signed hello: GitHub's and Gitea's ``ping`` and
  Cairn's ``ping`` (housekeeping: stored as ``ignored``, no todo), and for ``generic`` a small JSON
  body with ``X-Event-Type: switchboard.test`` (generic has no housekeeping event: it is routed and
  mints a todo). Slack, Stripe, Linear and Plain have no hello Switchboard could send that their
  verifier would store without minting a todo, so they make no test delivery.
* A **redelivery** re-signs the stored body with the webhook's current secret. Kinds whose signed
  body carries the time it was sent (Cairn's ``created_at``, Linear's ``webhookTimestamp``, Plain's
  ``timestamp``) cannot be redelivered: their verifier rightly refuses an old body as a replay.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime

from switchboard.provider import hmac_sha256_hex

# Headers a sender signs with; dropped from a stored delivery before it is signed again.
SIGNATURE_HEADERS = frozenset(
    {
        "x-hub-signature-256",
        "x-hub-signature",
        "x-gitea-signature",
        "x-forgejo-signature",
        "x-slack-signature",
        "x-slack-request-timestamp",
        "stripe-signature",
        "x-cairn-signature",
    }
)

REDELIVERABLE = frozenset({"github", "gitea", "slack", "stripe", "generic"})
TESTABLE = frozenset({"github", "gitea", "cairn", "generic"})


def signed(kind: str, secret: str | None, headers: Mapping[str, str], body: bytes) -> dict[str, str]:
    """``headers`` (less any old signature) with the kind's signature of ``body`` added."""
    out = {k: v for k, v in headers.items() if k.lower() not in SIGNATURE_HEADERS and v != "[redacted]"}
    key = secret or ""
    if kind in ("github", "cairn"):
        name = "X-Hub-Signature-256" if kind == "github" else "X-Cairn-Signature"
        out[name] = "sha256=" + hmac_sha256_hex(key, body)
    elif kind == "gitea":
        out["X-Gitea-Signature"] = hmac_sha256_hex(key, body)
    elif kind == "slack":
        stamp = str(int(time.time()))
        out["X-Slack-Request-Timestamp"] = stamp
        out["X-Slack-Signature"] = "v0=" + hmac_sha256_hex(key, b"v0:" + stamp.encode() + b":" + body)
    elif kind == "stripe":
        stamp = str(int(time.time()))
        out["Stripe-Signature"] = f"t={stamp},v1=" + hmac_sha256_hex(key, stamp.encode() + b"." + body)
    return out


def hello_delivery(kind: str) -> tuple[dict[str, str], bytes]:
    """The headers (unsigned) and body of the kind's test delivery; ``KeyError`` if it has none."""
    if kind not in TESTABLE:
        raise KeyError(kind)
    delivery_id = str(uuid.uuid4())
    hello = "Switchboard test delivery"
    if kind == "github":
        body = {"zen": hello, "hook_id": 0, "hook": {"type": "Repository", "active": True}}
        headers = {"X-GitHub-Event": "ping", "X-GitHub-Delivery": delivery_id}
    elif kind == "gitea":
        body = {"zen": hello, "hook_id": 0}
        headers = {"X-Gitea-Event": "ping", "X-Gitea-Delivery": delivery_id}
    elif kind == "cairn":
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        body = {
            "source": "cairn",
            "kind": "ping",
            "event_id": f"sbtest_{delivery_id}",
            "created_at": now,
            "data": {},
        }
        headers = {"X-Cairn-Event-Id": f"sbtest_{delivery_id}"}
    else:
        body = {"title": hello, "test": True}
        headers = {"X-Event-Type": "switchboard.test", "webhook-id": f"sbtest_{delivery_id}"}
    headers["Content-Type"] = "application/json"
    headers["User-Agent"] = "Switchboard-Test-Delivery"
    return headers, json.dumps(body, separators=(",", ":")).encode()
