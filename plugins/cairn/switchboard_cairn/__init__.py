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
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from switchboard.sdk import (
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
HOUSEKEEPING_EVENTS = frozenset({"ping", "webhook.test"})

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


def derive_address(delivery: Delivery, verdict: Verdict) -> Address | None:
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


def echo_clues(delivery: Delivery, verdict: Verdict) -> EchoClues:
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
    description="Cairn artifact and comment events.",
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
