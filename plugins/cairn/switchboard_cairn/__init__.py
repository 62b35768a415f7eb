"""The cairn provider for Switchboard: artifact events in, artifact comments out.

Inbound (docs/sources/cairn.md): ``X-Cairn-Signature: sha256=<hex HMAC-SHA256(secret, raw body)>``.
The body must carry ``event_id`` and ``created_at`` (RFC 3339, within ±300 s of arrival, which bounds
replays); an ``X-Cairn-Event-Id`` header, when sent, must equal the body's ``event_id``. Cairn's wire
format puts the event's name in ``kind`` and the artifact in ``data``::

    {"source": "cairn", "kind": "artifact.created", "event_id": "evt_…",
     "created_at": "2026-09-11T12:00:00Z",
     "data": {"id": "a1b2c3", "share_type": "markdown", "title": "Q3 audit notes",
              "url": "https://cairn.example/a/a1b2c3", "channel": "mcp", "actor_id": "joe"}}

An artifact event gets a ``cairn_comment`` reply address from ``data.url`` and ``data.id``. Cairn
does not send comment events yet; when it does, a ``comment.*`` event is read with ``data`` as the
comment (``id``, ``body``) and its artifact embedded as ``data.artifact`` (``id``, ``url``), which
gives the address and the echo clues. Bodies in the shape Switchboard 0.1 documented (``type``,
``artifact``, ``comment``) are still read as before; Cairn itself never sent them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from switchboard.sdk import (
    Actors,
    Address,
    CheckResult,
    ConnectionCheck,
    ConnectionKind,
    Delivery,
    EchoClues,
    PostResult,
    ReplyPost,
    SourceKind,
    TrustSpec,
    Verdict,
    actor_at,
    actors_of,
    failure,
    find_marker,
    hookimpl,
    host_of,
    https_base,
    https_link,
    instance_base,
    instance_key,
    int_id,
    json_dict,
    json_object,
    normalize_https_base,
    one_line,
    origin_of,
    reply_marker,
    rfc3339,
    same,
    same_instance,
    signature_matches,
    within,
)

KIND = "cairn"
TOLERANCE_SECONDS = 300
EVENT_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,100}")
ARTIFACT_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,100}")
COMMENT_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,100}")
EVENT_KIND_RE = re.compile(r"[a-z][a-z0-9_]{0,40}(?:\.[a-z][a-z0-9_]{0,40}){0,3}")
HOUSEKEEPING_EVENTS = frozenset({"ping", "webhook.test"})
# An artifact's own path after the instance base: Cairn's share links (``/a/{id}``), and the
# ``/artifacts/{id}`` form of its API and of Switchboard 0.1's reading.
ARTIFACT_PATHS = ("/a/{id}", "/artifacts/{id}")

# ---------------------------------------------------------------------------------------------
# Inbound: verify, derive the reply address, find echo clues. The core calls these for cairn
# deliveries only.


def verify(delivery: Delivery) -> Verdict:
    header = delivery.headers.get("X-Cairn-Signature", "").strip()
    if not header:
        return Verdict.refuse("X-Cairn-Signature missing")
    scheme, _, given = header.partition("=")
    if scheme != "sha256" or not given:
        return Verdict.refuse("X-Cairn-Signature malformed")
    if not signature_matches(header, delivery.secret or "", delivery.body, prefix="sha256="):
        return Verdict.refuse("signature mismatch")
    payload = json_object(delivery.body)
    if payload is None:
        return Verdict.bad_body("body is not a JSON object")
    event_id = payload.get("event_id")
    if not isinstance(event_id, str) or not EVENT_ID_RE.fullmatch(event_id):
        return Verdict.refuse("event_id missing or malformed")
    created = rfc3339(payload.get("created_at"))
    if created is None:
        return Verdict.refuse("created_at missing or malformed")
    if not within(created, delivery.received_at, TOLERANCE_SECONDS):
        return Verdict.refuse("created_at outside the 300 s window")
    header_id = delivery.headers.get("X-Cairn-Event-Id")
    if header_id is not None and not same(header_id.strip(), event_id):
        return Verdict.refuse("X-Cairn-Event-Id does not match the body's event_id")
    # Signed with this webhook's secret but sent by another product's hook: not a Cairn event.
    if "source" in payload and payload["source"] != KIND:
        return Verdict.bad_body("source is not cairn")
    event = read(payload)
    return Verdict(
        ok=True,
        detail="sha256 signature ok",
        payload=payload,
        event=event.kind,
        delivery_key=event_id,
        title=event.title(),
        ignore=event.kind in HOUSEKEEPING_EVENTS,
    )


@dataclass(frozen=True)
class Event:
    """A verified body as this module reads it: the event's name, the artifact it is about and, for
    a comment event, the comment. ``legacy``: the body has Switchboard 0.1's shape."""

    kind: str
    artifact: dict[str, Any]
    comment: dict[str, Any] | None = None
    legacy: bool = False

    def title(self) -> str:
        name = self.artifact.get("title")
        name = one_line(name, 120) if isinstance(name, str) else ""
        if self.legacy:
            ident = self.artifact.get("id")
            ident = one_line(ident, 60) if isinstance(ident, str) else "?"
            return one_line(f"Cairn {self.kind} on {ident} — {name}", 200)
        # As Cairn's own summary reads: ``cairn artifact.created — <title> (<share_type>)``.
        share = self.artifact.get("share_type")
        share = one_line(share, 40) if isinstance(share, str) else ""
        if not name:
            return f"cairn {self.kind}"
        return one_line(
            f"cairn {self.kind} — {name} ({share})" if share else f"cairn {self.kind} — {name}", 200
        )


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _kind(value: object) -> str:
    return value if isinstance(value, str) and EVENT_KIND_RE.fullmatch(value) else "unknown"


def read(payload: dict[str, Any]) -> Event:
    """The event in ``payload``: Cairn's wire format (``kind`` and ``data``) or 0.1's shape."""
    if "kind" in payload or "data" in payload:
        kind, data = _kind(payload.get("kind")), _dict(payload.get("data"))
        if kind.startswith("comment."):
            return Event(kind, _dict(data.get("artifact")), data)
        return Event(kind, data)
    comment = payload.get("comment")
    return Event(
        _kind(payload.get("type")),
        _dict(payload.get("artifact")),
        comment if isinstance(comment, dict) else None,
        legacy=True,
    )


def derive_address(delivery: Delivery, verdict: Verdict) -> Address | None:
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    artifact = read(payload).artifact
    artifact_id, url = artifact.get("id"), artifact.get("url")
    if not isinstance(artifact_id, str) or not ARTIFACT_ID_RE.fullmatch(artifact_id):
        return None
    origin = origin_of(url)
    # The instance base: the artifact URL before the artifact's own path. A Cairn may run under a
    # path of a shared host, so the base (not the host) is what a connection must match.
    bases = (
        instance_base(url, path.format(id=artifact_id), schemes=("https", "http")) for path in ARTIFACT_PATHS
    )
    base = next((b for b in bases if b is not None), None)
    if origin is None or base is None:
        return None
    scheme, host = origin
    return Address(
        kind="cairn_comment",
        provider=KIND,
        display=f"{KIND} {instance_key(base)} artifact {artifact_id}",
        fields={"instance": f"{scheme}://{host}", "base": base, "artifact_id": artifact_id},
    )


def echo_clues(delivery: Delivery, verdict: Verdict) -> EchoClues:
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    comment = read(payload).comment
    if comment is None:
        return EchoClues()
    comment_id = comment.get("id")
    return EchoClues(
        object_ids=(comment_id,)
        if isinstance(comment_id, str) and COMMENT_ID_RE.fullmatch(comment_id)
        else (),
        marker=find_marker(comment.get("body")),
    )


def actors(delivery: Delivery, verdict: Verdict) -> Actors:
    """The sender is the signed ``data.actor_id`` (docs/sources/cairn.md, "Trusted actors"); a body
    in 0.1's shape names it as ``actor.id``. Cairn names no separate author."""
    payload = verdict.payload if verdict.ok and isinstance(verdict.payload, dict) else {}
    if "kind" in payload or "data" in payload:
        return actors_of(actor_at(payload, "data", "actor_id"))
    return actors_of(actor_at(payload, "actor", "id"))


# Cairn's actor ids are opaque: compared exactly.
TRUST = TrustSpec(field="actor_ids", label="Cairn actor id", case_insensitive=False)


# ---------------------------------------------------------------------------------------------
# Outbound: the connection kind (account key = the instance's https base URL) and posting an
# artifact comment. The token needs annotation-write scope only.

TEXT_LIMIT = 65_536


def _headers(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}", "Accept": "application/json"}


async def _test(check: ConnectionCheck) -> CheckResult:
    # Cairn's token introspection: a read that names the token's subject and changes nothing.
    resp = await check.http.request(
        "GET", f"{check.account_key}/v1/tokens/self", headers=_headers(check.secret)
    )
    if resp.status != 200:
        detail = f"GET /v1/tokens/self answered HTTP {resp.status}"
        return CheckResult(ok=False, error_class=failure(resp).error_class, detail=detail)
    subject = json_dict(resp).get("subject")
    subject = one_line(subject, 60) if isinstance(subject, str) else ""
    return CheckResult(ok=True, detail=f"token for {subject or 'this instance'}", facts={"subject": subject})


def _comment_id(value: object) -> str | None:
    if isinstance(value, str) and COMMENT_ID_RE.fullmatch(value):
        return value
    return int_id(value)


async def post(reply: ReplyPost) -> PostResult:
    artifact_id = reply.address.fields.get("artifact_id")
    if not isinstance(artifact_id, str) or not ARTIFACT_ID_RE.fullmatch(artifact_id):
        return PostResult(state="failed", error_class="invalid", error_code="bad_address")
    url = f"{reply.account_key}/v1/artifacts/{quote(artifact_id, safe='')}/comments"
    body = {"anchor_type": "artifact", "body": reply.text + reply_marker(reply.reply_id)}
    resp = await reply.http.request("POST", url, headers=_headers(reply.secret), json_body=body)
    if resp.status != 201:
        return failure(resp)
    comment = json_dict(resp)
    return PostResult(
        state="sent",
        object_id=_comment_id(comment.get("id")),
        permalink=https_link(comment.get("url")),
    )


def _account_matches(key: str, address: Address) -> bool:
    """The address's instance base must be the connection's base URL, path included (the scheme
    does not matter: the dial goes to the key's https URL). An address stored before addresses
    carried their base names only ``instance`` (scheme and host); it keeps the host rule, and the
    core refuses it as ambiguous when more than one connection of the scope is on that host."""
    if "base" in address.fields:
        return same_instance(address.fields["base"], key)
    instance = address.fields.get("instance")
    return isinstance(instance, str) and instance.partition("://")[2] == host_of(key)


def _instance_of(address: Address) -> str | None:
    return https_base(address.fields.get("base"))


# ---------------------------------------------------------------------------------------------
# The kinds.

SOURCE = SourceKind(
    KIND,
    secret="minted",
    verify=verify,
    derive_address=derive_address,
    echo_clues=echo_clues,
    actors=actors,
    trust=TRUST,
    description="Cairn artifact and comment events.",
    # json_object's value is never edited: a body read as it came is not copied onto its todos.
    payload_is_body=True,
)

CONNECTION = ConnectionKind(
    name=KIND,
    normalize_account_key=normalize_https_base,
    account_matches=_account_matches,
    target_of=lambda address: str(address.fields.get("artifact_id", "")),
    text_limit=TEXT_LIMIT,
    test=_test,
    post=post,
    description="A Cairn token with annotation-write scope (account key: the https base URL, with its path).",
    account_key_hint="the instance's https base URL, with its path",
    instance_of=_instance_of,
)


@hookimpl
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    register(SOURCE)
    register(CONNECTION)
