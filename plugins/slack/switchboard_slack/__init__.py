"""The slack provider for Switchboard: Events API deliveries in, thread replies out.

Inbound: ``X-Slack-Signature: v0=<hex HMAC-SHA256(signing secret, "v0:{ts}:{body}")>`` with
``X-Slack-Request-Timestamp`` within ±300 s. A verified ``url_verification`` is answered with its
``challenge`` and stores nothing. Channel messages and ``app_mention`` get a ``slack_thread`` reply
address; edits, deletions, joins and other housekeeping subtypes are stored as ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from switchboard.sdk import (
    MARKER_EVENT_TYPE,
    Address,
    CheckResult,
    ConnectionCheck,
    ConnectionKind,
    Delivery,
    EchoClues,
    ErrorClass,
    OutboundError,
    PostResult,
    ReplyPost,
    SourceKind,
    Verdict,
    api_url_setting,
    failure,
    hookimpl,
    https_link,
    json_dict,
    json_object,
    one_line,
    retry_after_seconds,
    signature_matches,
    timestamp_within,
    valid_slack_id,
    valid_slack_ts,
)

KIND = "slack"
TOLERANCE_SECONDS = 300
REPLY_ID_RE = re.compile(r"rp_[0-9a-z]{26}")
# Message subtypes that are someone saying something; every other subtype is housekeeping
# (message_changed, message_deleted, channel_join, channel_topic, …).
WORK_SUBTYPES = frozenset({None, "thread_broadcast", "file_share", "bot_message", "me_message"})
HOUSEKEEPING_EVENTS = frozenset(
    {
        "member_joined_channel",
        "member_left_channel",
        "channel_created",
        "channel_deleted",
        "channel_rename",
        "channel_archive",
        "channel_unarchive",
        "group_rename",
        "app_uninstalled",
        "tokens_revoked",
        "app_home_opened",
        "user_typing",
    }
)

# ---------------------------------------------------------------------------------------------
# Inbound: verify, derive the reply address, find echo clues. The core calls these for slack
# deliveries only.


def verify(delivery: Delivery) -> Verdict:
    header = delivery.headers.get("X-Slack-Signature", "").strip()
    timestamp = delivery.headers.get("X-Slack-Request-Timestamp", "").strip()
    if not header or not timestamp:
        return Verdict.refuse("signature or timestamp missing")
    version, _, given = header.partition("=")
    if version != "v0" or not given:
        return Verdict.refuse("X-Slack-Signature malformed")
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        return Verdict.refuse("timestamp malformed")
    if not timestamp_within(timestamp, delivery.received_at, TOLERANCE_SECONDS):
        return Verdict.refuse("timestamp outside the 300 s window")
    base = b"v0:" + timestamp.encode() + b":" + delivery.body
    if not signature_matches(header, delivery.secret or "", base, prefix="v0="):
        return Verdict.refuse("signature mismatch")
    payload = json_object(delivery.body)
    if payload is None:
        return Verdict.bad_body("body is not a JSON object")
    kind = payload.get("type")
    if not isinstance(kind, str):
        kind = "unknown"
    if kind == "url_verification":
        challenge = payload.get("challenge")
        if not isinstance(challenge, str) or not challenge or len(challenge) > 200:
            return Verdict.bad_body("url_verification without a usable challenge")
        return Verdict(ok=True, detail="url_verification", event=kind, respond={"challenge": challenge})
    event = payload.get("event")
    if not isinstance(event, dict):
        event = {}
    event_type = event.get("type")
    if not isinstance(event_type, str):
        event_type = ""
    subtype = _subtype(event)
    name = ".".join(p for p in (kind, event_type, subtype) if p)
    event_id = payload.get("event_id")
    return Verdict(
        ok=True,
        detail="v0 signature ok",
        payload=payload,
        event=one_line(name, 100),
        delivery_key=event_id if isinstance(event_id, str) and event_id else None,
        secondary_key=_message_key(payload),
        title=_title(kind, event),
        ignore=kind != "event_callback" or _housekeeping(event_type, subtype),
    )


def _housekeeping(event_type: str, subtype: str | None) -> bool:
    if event_type == "message":
        return subtype not in WORK_SUBTYPES
    return event_type in HOUSEKEEPING_EVENTS


def _message(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The event if it is someone's message (``message`` or ``app_mention``), else None."""
    event = payload.get("event")
    if payload.get("type") != "event_callback" or not isinstance(event, dict):
        return None
    if event.get("type") not in ("message", "app_mention"):
        return None
    if event.get("type") == "message" and _subtype(event) not in WORK_SUBTYPES:
        return None
    return event


def _subtype(event: dict[str, Any]) -> str | None:
    subtype = event.get("subtype")
    # Anything but a string is not a subtype Slack sends; housekeeping unless it is absent.
    return subtype if isinstance(subtype, str) or subtype is None else "invalid"


def _message_key(payload: dict[str, Any]) -> str | None:
    """(team, channel, ts): Slack sends one message as both ``message`` and ``app_mention``."""
    event = _message(payload)
    if event is None:
        return None
    team, channel, ts = payload.get("team_id"), event.get("channel"), event.get("ts")
    if not (valid_slack_id(team) and valid_slack_id(channel) and valid_slack_ts(ts)):
        return None
    return f"slack-message:{team}:{channel}:{ts}"


def _title(kind: str, event: dict[str, Any]) -> str:
    channel = event.get("channel")
    if not isinstance(channel, str):
        channel = "?"
    text = event.get("text")
    if not isinstance(text, str):
        text = ""
    if event.get("type") == "app_mention":
        return one_line(f"Slack mention in {one_line(channel, 40)} — {one_line(text, 80)}", 200)
    if event.get("type") == "message":
        return one_line(f"Slack message in {one_line(channel, 40)} — {one_line(text, 80)}", 200)
    return one_line(f"Slack {kind} {event.get('type') or ''}", 200)


def derive_address(delivery: Delivery, verdict: Verdict) -> Address | None:
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    event = _message(payload)
    if event is None:
        return None
    team = valid_slack_id(payload.get("team_id"))
    channel = valid_slack_id(event.get("channel"))
    ts = valid_slack_ts(event.get("ts"))
    thread_raw = event.get("thread_ts")
    thread = valid_slack_ts(thread_raw) if thread_raw is not None else ts
    if team is None or channel is None or ts is None or thread is None:
        return None
    return Address(
        kind="slack_thread",
        provider=KIND,
        display=f"{KIND} {team}/{channel} thread {thread}",
        fields={"team_id": team, "channel": channel, "thread_ts": thread},
    )


def echo_clues(delivery: Delivery, verdict: Verdict) -> EchoClues:
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    event = payload.get("event")
    if not isinstance(event, dict):
        return EchoClues()
    channel, ts = valid_slack_id(event.get("channel")), valid_slack_ts(event.get("ts"))
    metadata = event.get("metadata")
    marker = None
    if isinstance(metadata, dict) and metadata.get("event_type") == MARKER_EVENT_TYPE:
        fields = metadata.get("event_payload")
        reply_id = fields.get("reply_id") if isinstance(fields, dict) else None
        marker = reply_id if isinstance(reply_id, str) and REPLY_ID_RE.fullmatch(reply_id) else None
    bot_id = valid_slack_id(event.get("bot_id"))
    return EchoClues(
        object_ids=(f"{channel}:{ts}",) if channel and ts else (),
        marker=marker,
        bot_id=bot_id,
    )


# ---------------------------------------------------------------------------------------------
# Outbound: the connection kind (account key = the Slack team id, credential = a bot token) and
# posting into the thread.

TEXT_LIMIT = 40_000
SLACK_API = "https://slack.com/api"
API_URL = api_url_setting(
    KIND,
    SLACK_API,
    "The Slack Web API base (tests and proxies); method names are appended ({base}/chat.postMessage), "
    "so include the path.",
)
ERROR_CODE_RE = re.compile(r"[a-z0-9_]{1,60}")
ERROR_CLASSES = {
    "auth": {"invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive"},
    "not_found": {"channel_not_found", "thread_not_found", "message_not_found"},
    "forbidden": {
        "not_in_channel",
        "is_archived",
        "restricted_action",
        "missing_scope",
        "ekm_access_denied",
        "team_access_not_granted",
        "no_permission",
    },
    "rate_limited": {"ratelimited", "rate_limited"},
    "server": {"internal_error", "fatal_error", "service_unavailable", "request_timeout"},
}
# Slack's own words for these: "it's possible some aspect of the operation succeeded before the
# error was raised". The message may be in the thread, so the reply is unknown, never failed.
MAY_HAVE_POSTED = frozenset({"internal_error", "fatal_error"})


def _api(settings: Mapping[str, str]) -> str:
    return settings.get(API_URL.name) or SLACK_API


def _headers(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def _slack_error(body: dict[str, Any]) -> tuple[ErrorClass, str]:
    """Slack's error code (a short machine word, never free text) and its class."""
    code = body.get("error")
    code = code if isinstance(code, str) and ERROR_CODE_RE.fullmatch(code) else "unknown_error"
    error_class = next((c for c, codes in ERROR_CLASSES.items() if code in codes), "invalid")
    return error_class, code  # type: ignore[return-value]


def _normalize_team(value: str) -> str:
    team = value.strip().upper()
    if not re.fullmatch(r"[TE][A-Z0-9]{2,39}", team):
        raise ValueError("must be a Slack team id such as T0123ABCD")
    return team


async def _test(check: ConnectionCheck) -> CheckResult:
    resp = await check.http.request(
        "POST", f"{_api(check.settings)}/auth.test", headers=_headers(check.secret)
    )
    if resp.status != 200:
        detail = f"auth.test answered HTTP {resp.status}"
        return CheckResult(ok=False, error_class=failure(resp).error_class, detail=detail)
    body = json_dict(resp)
    if body.get("ok") is not True:
        error_class, code = _slack_error(body)
        return CheckResult(ok=False, error_class=error_class, detail=f"auth.test: {code}")
    facts = {k: body[k] for k in ("bot_id", "user_id", "team_id") if valid_slack_id(body.get(k))}
    if facts.get("team_id") != check.account_key:
        detail = f"the token belongs to team {facts.get('team_id', '?')}, not {check.account_key}"
        return CheckResult(ok=False, error_class="invalid", detail=detail, facts=facts)
    return CheckResult(ok=True, detail=f"authenticated as bot {facts.get('bot_id', '?')}", facts=facts)


async def _permalink(reply: ReplyPost, channel: str, ts: str) -> str | None:
    """Best effort: the message is posted already, so a failure here only loses the link."""
    try:
        resp = await reply.http.request(
            "GET",
            f"{_api(reply.settings)}/chat.getPermalink",
            headers=_headers(reply.secret),
            params={"channel": channel, "message_ts": ts},
        )
    except OutboundError:
        return None
    body = json_dict(resp)
    return https_link(body.get("permalink")) if resp.status == 200 and body.get("ok") else None


async def post(reply: ReplyPost) -> PostResult:
    channel = valid_slack_id(reply.address.fields.get("channel"))
    thread_ts = valid_slack_ts(reply.address.fields.get("thread_ts"))
    if channel is None or thread_ts is None:
        return PostResult(state="failed", error_class="invalid", error_code="bad_address")
    body = {
        "channel": channel,
        "thread_ts": thread_ts,
        "text": reply.text,
        # The invisible marker: our own message, delivered back as an event, names its reply.
        "metadata": {"event_type": MARKER_EVENT_TYPE, "event_payload": {"reply_id": reply.reply_id}},
    }
    url = f"{_api(reply.settings)}/chat.postMessage"
    resp = await reply.http.request("POST", url, headers=_headers(reply.secret), json_body=body)
    if resp.status != 200:
        return failure(resp)
    answer = json_dict(resp)
    if not isinstance(answer.get("ok"), bool):
        # A 200 whose answer cannot be read (a proxy's page, an empty or too-deep body): Slack may
        # have posted the message, so it is unknown, never "failed" (the agent would post again).
        return PostResult(state="unknown", error_class="server", error_code="unreadable_answer")
    if answer.get("ok") is not True:
        error_class, code = _slack_error(answer)
        return PostResult(
            state="unknown" if code in MAY_HAVE_POSTED else "failed",
            error_class=error_class,
            error_code=code,
            retry_after=retry_after_seconds(resp.headers) if error_class == "rate_limited" else None,
            retryable=error_class == "rate_limited",
        )
    ts = valid_slack_ts(answer.get("ts"))
    posted_in = valid_slack_id(answer.get("channel")) or channel
    return PostResult(
        state="sent",
        object_id=f"{posted_in}:{ts}" if ts else None,
        permalink=await _permalink(reply, posted_in, ts) if ts else None,
    )


# ---------------------------------------------------------------------------------------------
# The kinds. Slack's token formats (xoxb-, xoxp-, …) are in the core's secret-scan rules.

SOURCE = SourceKind(
    KIND,
    secret="provider",
    verify=verify,
    derive_address=derive_address,
    echo_clues=echo_clues,
    description="Slack Events API (signing secret from the app).",
    # json_object's value is never edited: a body read as it came is not copied onto its todos.
    payload_is_body=True,
)

CONNECTION = ConnectionKind(
    name=KIND,
    normalize_account_key=_normalize_team,
    account_matches=lambda key, address: address.fields.get("team_id") == key,
    target_of=lambda address: str(address.fields.get("channel", "")),
    text_limit=TEXT_LIMIT,
    test=_test,
    post=post,
    description="A Slack bot token (xoxb-…) with chat:write (account key: the team id).",
    account_key_hint="the Slack team id (T0123ABCD)",
    settings=(API_URL,),
)


@hookimpl
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    register(SOURCE)
    register(CONNECTION)
