"""Sign a delivery the way each provider does, so a test sends what the real sender would.

Each ``*_headers`` function returns the headers the provider puts on a webhook request for ``body``
signed with ``secret`` (the values documented by GitHub, Gitea/Forgejo, Slack, Stripe and Cairn).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime
from urllib.parse import quote


def hexmac(secret: str, message: bytes) -> str:
    """HMAC-SHA256 of ``message`` under ``secret``, lower-case hex (what most providers send)."""
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def github_headers(
    secret: str, body: bytes, event: str, delivery: str = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
) -> dict[str, str]:
    """GitHub: ``X-Hub-Signature-256: sha256=<hex>`` (and the legacy SHA-1 one), event and delivery id."""
    return {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/044aadd",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Hook-ID": "292430182",
        # GitHub still sends the SHA-1 signature beside the SHA-256 one; verifiers must ignore it.
        "X-Hub-Signature": "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest(),
        "X-Hub-Signature-256": "sha256=" + hexmac(secret, body),
    }


def github_form(payload_json: bytes) -> bytes:
    """GitHub's ``application/x-www-form-urlencoded`` content type: ``payload=<urlencoded JSON>``."""
    return b"payload=" + quote(payload_json.decode(), safe="").encode()


def gitea_headers(
    secret: str,
    body: bytes,
    event_type: str,
    event: str | None = None,
    delivery: str = "1e5d7a40-3c21-4c4e-8a7e-9b1f2c3d4e5f",
    forgejo: bool = False,
) -> dict[str, str]:
    """What Gitea (or Forgejo) sends: every flavour of header at once, as the real servers do."""
    sig = hexmac(secret, body)
    coarse = event or event_type
    headers = {
        "Content-Type": "application/json",
        "X-Gitea-Delivery": delivery,
        "X-Gitea-Event": coarse,
        "X-Gitea-Event-Type": event_type,
        "X-Gitea-Signature": sig,
        "X-Gogs-Delivery": delivery,
        "X-Gogs-Event": coarse,
        "X-Gogs-Event-Type": event_type,
        "X-Gogs-Signature": sig,
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Event": coarse,
        "X-GitHub-Event-Type": event_type,
        "X-Hub-Signature": "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest(),
        "X-Hub-Signature-256": "sha256=" + sig,
    }
    if forgejo:
        headers = {k.replace("Gitea", "Forgejo"): v for k, v in headers.items()}
    return headers


def slack_headers(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Slack: ``v0=`` HMAC over ``v0:<timestamp>:<body>``; ``timestamp`` defaults to now."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    return {
        "Content-Type": "application/json",
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": "v0=" + hexmac(secret, b"v0:" + ts.encode() + b":" + body),
    }


def stripe_headers(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Stripe: ``Stripe-Signature: t=<ts>,v1=<hex>`` over ``<ts>.<body>`` (plus a v0 to be ignored)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    return {
        "Content-Type": "application/json; charset=utf-8",
        "Stripe-Signature": f"t={ts},v1={hexmac(secret, ts.encode() + b'.' + body)},v0=deadbeef",
    }


def cairn_headers(secret: str, body: bytes, event_id: str | None = None) -> dict[str, str]:
    """Cairn: ``X-Cairn-Signature: sha256=<hex>`` over the body, and the event id when given."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Cairn-Webhooks/1.4",
        "X-Cairn-Signature": "sha256=" + hexmac(secret, body),
    }
    if event_id is not None:
        headers["X-Cairn-Event-Id"] = event_id
    return headers


def now_rfc3339(offset_seconds: float = 0) -> str:
    """Now (plus ``offset_seconds``) as an RFC 3339 UTC timestamp, for payloads whose timestamp a
    verifier checks against a window (Cairn's ``created_at``)."""
    return datetime.fromtimestamp(time.time() + offset_seconds, UTC).isoformat().replace("+00:00", "Z")
