"""A third-party provider the core has never heard of, as someone would publish it.

Used by the tests to show a new kind drops in with no core change: it is loaded through the
``switchboard`` entry-point group from a throwaway site directory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

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
    hmac_sha256_hex,
    json_object,
    same,
)

KIND = "linear"


async def _check(check: ConnectionCheck) -> CheckResult:
    return CheckResult(ok=True)


@hookimpl
def register_kinds(register: Callable[[Any], None]) -> None:
    register(SourceKind(KIND, secret="minted"))
    register(
        ConnectionKind(
            KIND,
            normalize_account_key=lambda key: key.strip().lower(),
            account_matches=lambda key, address: address.fields.get("workspace") == key,
            target_of=lambda address: str(address.fields.get("issue_id")),
            text_limit=10_000,
            test=_check,
        )
    )


@hookimpl
def verify(delivery: Delivery) -> Verdict | None:
    if delivery.source != KIND:
        return None
    signature = delivery.headers.get("Linear-Signature", "")
    if not signature or not same(signature, hmac_sha256_hex(delivery.secret or "", delivery.body)):
        return Verdict.refuse("signature mismatch")
    payload = json_object(delivery.body)
    if payload is None:
        return Verdict.bad_body("body is not a JSON object")
    return Verdict(
        ok=True,
        detail="ok",
        payload=payload,
        event=str(payload.get("type", "event")),
        delivery_key=delivery.headers.get("Linear-Delivery"),
        title="Linear issue",
    )


@hookimpl
def derive_address(delivery: Delivery, verdict: Verdict) -> Address | None:
    if delivery.source != KIND:
        return None
    issue = verdict.payload.get("issue_id")
    if not isinstance(issue, str) or not issue.isalnum():
        return None
    return Address("linear_comment", KIND, f"linear {issue}", {"workspace": "acme", "issue_id": issue})


@hookimpl
def is_echo(delivery: Delivery, verdict: Verdict) -> EchoClues | None:
    return EchoClues() if delivery.source == KIND else None


@hookimpl
def post_reply(post: ReplyPost) -> Awaitable[PostResult] | None:
    if post.kind != KIND:
        return None

    async def send() -> PostResult:
        return PostResult(state="sent", object_id=f"lc_{post.reply_id}")

    return send()
