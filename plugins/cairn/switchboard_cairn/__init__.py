"""The cairn provider for Switchboard: artifact events in, artifact comments out.

Inbound: ``X-Cairn-Signature: sha256=<hex HMAC-SHA256(secret, raw body)>``. The body must carry
``event_id`` and ``created_at`` (RFC 3339, within ±300 s of arrival, which bounds replays); an
``X-Cairn-Event-Id`` header, when sent, must equal the body's ``event_id``. Events about an
artifact (``artifact.*``, and comments on one) get a ``cairn_comment`` reply address.

A delivery looks like::

    {"event_id": "evt_…", "type": "artifact.created", "created_at": "2026-11-30T10:00:00Z",
     "artifact": {"id": "art_…", "title": "…", "url": "https://cairn.example.com/artifacts/art_…"},
     "comment": {"id": "cmt_…", "body": "…"},          # comment.* events only
     "actor": {"id": "usr_…", "name": "…"}}
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from switchboard import outbound
from switchboard.hookspecs import hookimpl
from switchboard.provider import (
    Address,
    CheckResult,
    ConnectionCheck,
    ConnectionKind,
    Delivery,
    EchoClues,
    PostResult,
    ReplyPost,
    SourceKind,
    Verdict,
    find_marker,
    hmac_sha256_hex,
    https_base,
    instance_base,
    instance_key,
    json_object,
    one_line,
    origin_of,
    reply_marker,
    same,
    same_instance,
)

KIND = "cairn"
TOLERANCE_SECONDS = 300
EVENT_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,100}")
ARTIFACT_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,100}")
COMMENT_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,100}")
HOUSEKEEPING_EVENTS = frozenset({"ping", "webhook.test"})

# ---------------------------------------------------------------------------------------------
# Inbound: register the source kind, verify, derive the reply address, find echo clues.


@hookimpl
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    register(SourceKind(KIND, secret="minted", description="Cairn artifact and comment events."))
    register(CONNECTION)


def _created_at(value: object) -> datetime | None:
    if not isinstance(value, str) or not 20 <= len(value) <= 40 or not value.isascii():
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


@hookimpl
def verify(delivery: Delivery) -> Verdict | None:
    if delivery.source != KIND:
        return None
    header = delivery.headers.get("X-Cairn-Signature", "").strip()
    if not header:
        return Verdict.refuse("X-Cairn-Signature missing")
    scheme, _, given = header.partition("=")
    if scheme != "sha256" or not given:
        return Verdict.refuse("X-Cairn-Signature malformed")
    if not same(hmac_sha256_hex(delivery.secret or "", delivery.body), given):
        return Verdict.refuse("signature mismatch")
    payload = json_object(delivery.body)
    if payload is None:
        return Verdict.bad_body("body is not a JSON object")
    event_id = payload.get("event_id")
    if not isinstance(event_id, str) or not EVENT_ID_RE.fullmatch(event_id):
        return Verdict.refuse("event_id missing or malformed")
    created = _created_at(payload.get("created_at"))
    if created is None:
        return Verdict.refuse("created_at missing or malformed")
    try:
        skew = abs((delivery.received_at - created).total_seconds())
    except OverflowError:  # a year-1 or year-9999 timestamp with an offset
        skew = float("inf")
    if skew > TOLERANCE_SECONDS:
        return Verdict.refuse("created_at outside the 300 s window")
    header_id = delivery.headers.get("X-Cairn-Event-Id")
    if header_id is not None and not same(header_id.strip(), event_id):
        return Verdict.refuse("X-Cairn-Event-Id does not match the body's event_id")
    event = payload.get("type")
    if not isinstance(event, str):
        event = "unknown"
    return Verdict(
        ok=True,
        detail="sha256 signature ok",
        payload=payload,
        event=one_line(event, 100),
        delivery_key=event_id,
        title=_title(event, payload),
        ignore=event in HOUSEKEEPING_EVENTS,
    )


def _title(event: str, payload: dict[str, Any]) -> str:
    artifact = payload.get("artifact")
    if not isinstance(artifact, dict):
        artifact = {}
    name = artifact.get("title")
    if not isinstance(name, str):
        name = ""
    ident = artifact.get("id")
    if not isinstance(ident, str):
        ident = "?"
    return one_line(f"Cairn {event} on {one_line(ident, 60)} — {one_line(name, 100)}", 200)


@hookimpl
def derive_address(delivery: Delivery, verdict: Verdict) -> Address | None:
    if delivery.source != KIND:
        return None
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    artifact = payload.get("artifact")
    if not isinstance(artifact, dict):
        return None
    artifact_id = artifact.get("id")
    origin = origin_of(artifact.get("url"))
    if not isinstance(artifact_id, str) or not ARTIFACT_ID_RE.fullmatch(artifact_id) or origin is None:
        return None
    # The instance base: the artifact URL before its own path. A Cairn may run under a path of a
    # shared host, so the base (not the host) is what a connection must match.
    base = instance_base(artifact.get("url"), f"/artifacts/{artifact_id}", schemes=("https", "http"))
    if base is None:
        return None
    scheme, host = origin
    return Address(
        kind="cairn_comment",
        provider=KIND,
        display=f"{KIND} {instance_key(base)} artifact {artifact_id}",
        fields={"instance": f"{scheme}://{host}", "base": base, "artifact_id": artifact_id},
    )


@hookimpl
def is_echo(delivery: Delivery, verdict: Verdict) -> EchoClues | None:
    if delivery.source != KIND:
        return None
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    comment = payload.get("comment")
    if not isinstance(comment, dict):
        return EchoClues()
    comment_id = comment.get("id")
    return EchoClues(
        object_ids=(comment_id,)
        if isinstance(comment_id, str) and COMMENT_ID_RE.fullmatch(comment_id)
        else (),
        marker=find_marker(comment.get("body")),
    )


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
        return CheckResult(ok=False, error_class=outbound.failure(resp).error_class, detail=detail)
    subject = outbound.json_dict(resp).get("subject")
    subject = one_line(subject, 60) if isinstance(subject, str) else ""
    return CheckResult(ok=True, detail=f"token for {subject or 'this instance'}", facts={"subject": subject})


def _comment_id(value: object) -> str | None:
    if isinstance(value, str) and COMMENT_ID_RE.fullmatch(value):
        return value
    return outbound.int_id(value)


async def _post(post: ReplyPost) -> PostResult:
    artifact_id = post.address.fields.get("artifact_id")
    if not isinstance(artifact_id, str) or not ARTIFACT_ID_RE.fullmatch(artifact_id):
        return PostResult(state="failed", error_class="invalid", error_code="bad_address")
    url = f"{post.account_key}/v1/artifacts/{quote(artifact_id, safe='')}/comments"
    body = {"anchor_type": "artifact", "body": post.text + reply_marker(post.reply_id)}
    resp = await post.http.request("POST", url, headers=_headers(post.secret), json_body=body)
    if resp.status != 201:
        return outbound.failure(resp)
    comment = outbound.json_dict(resp)
    return PostResult(
        state="sent",
        object_id=_comment_id(comment.get("id")),
        permalink=outbound.https_link(comment.get("url")),
    )


def _account_matches(key: str, address: Address) -> bool:
    """The address's instance base must be the connection's base URL, path included (the scheme
    does not matter: the dial goes to the key's https URL). An address stored before addresses
    carried their base names only ``instance`` (scheme and host); it keeps the host rule, and the
    core refuses it as ambiguous when more than one connection of the scope is on that host."""
    if address.provider != KIND:
        return False
    if "base" in address.fields:
        return same_instance(address.fields["base"], key)
    instance = address.fields.get("instance")
    return isinstance(instance, str) and instance.partition("://")[2] == outbound.host_of(key)


def _instance_of(address: Address) -> str | None:
    return https_base(address.fields.get("base")) if address.provider == KIND else None


CONNECTION = ConnectionKind(
    name=KIND,
    normalize_account_key=outbound.normalize_https_base,
    account_matches=_account_matches,
    target_of=lambda address: str(address.fields.get("artifact_id", "")),
    text_limit=TEXT_LIMIT,
    test=_test,
    description="A Cairn token with annotation-write scope (account key: the https base URL).",
    instance_of=_instance_of,
)


@hookimpl
def post_reply(post: ReplyPost) -> Awaitable[PostResult] | None:
    return _post(post) if post.kind == KIND else None
