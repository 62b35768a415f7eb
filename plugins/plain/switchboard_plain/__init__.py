"""The plain provider for Switchboard: Plain webhooks in, thread replies out.

Inbound (docs/sources/plain.md): ``Plain-Request-Signature`` is the lower-case hex HMAC-SHA256 of the
raw body under the workspace's request-signing secret (Plain's: the owner pastes it). The body's
``timestamp`` (RFC 3339) must be within 300 s of arrival, as Plain's own SDK requires; its ``id`` is
the delivery key. A delivery looks like::

    {"id": "…", "type": "thread.email_received", "timestamp": "2026-11-30T10:00:00.000Z",
     "workspaceId": "w_01…", "webhookMetadata": {…},
     "payload": {"eventType": "thread.email_received",
                 "thread": {"id": "th_01…", "title": "…", "previewText": "…", "customer": {…}, …},
                 "email": {"id": "…", "textContent": "…", "createdBy": {"actorType": "customer", …}}}}

Every ``thread.*`` event gets a ``plain_thread`` address: the workspace id and the thread id. A reply
is one GraphQL ``replyToThread``, which Plain sends on the thread's own channel (email, chat, Slack)
and then reports back as a ``thread.*_sent`` event: that event, sent by the connection's machine user
(recorded by ``connection test``), is our own reply and mints nothing.

Built only on ``switchboard.sdk``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from switchboard.sdk import (
    Actors,
    Address,
    CheckResult,
    ConnectionCheck,
    ConnectionKind,
    Delivery,
    EchoClues,
    ErrorClass,
    PostResult,
    ReplyPost,
    Response,
    SourceKind,
    TrustSpec,
    Verdict,
    actor_at,
    actors_of,
    api_url_setting,
    class_of_code,
    error_code,
    graphql_failure,
    header_value,
    hookimpl,
    json_object,
    one_line,
    rfc3339,
    secret_rule,
    signature_matches,
    valid_id,
    within,
)

KIND = "plain"
ADDRESS_KIND = "plain_thread"
# Plain's SDK refuses events older than 300 s by default; the window is the same either side.
TOLERANCE_SECONDS = 300
# Plain's ids are a prefix and a ULID (26 upper-case Crockford base-32 characters).
WORKSPACE_RE = re.compile(r"w_[0-9A-Z]{26}")
THREAD_RE = re.compile(r"th_[0-9A-Z]{26}")
MACHINE_USER_RE = re.compile(r"mu_[0-9A-Z]{26}")
EVENT_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,100}")
EVENT_RE = re.compile(r"[a-z][a-z0-9_]{0,40}(?:\.[a-z][a-z0-9_]{0,60}){0,2}")
# What a ``thread.*_sent`` event's payload holds besides the message that was sent.
NOT_THE_MESSAGE = frozenset({"eventType", "thread", "previousThread"})

# ---------------------------------------------------------------------------------------------
# Inbound: verify, derive the reply address, find echo clues. The core calls these for plain
# deliveries only.


def verify(delivery: Delivery) -> Verdict:
    given = header_value(delivery.headers, "Plain-Request-Signature")
    if not given:
        return Verdict.refuse("Plain-Request-Signature missing")
    if not delivery.secret:
        return Verdict.refuse("the webhook has no signing secret yet")
    if not signature_matches(given, delivery.secret, delivery.body):
        return Verdict.refuse("signature mismatch")
    payload = json_object(delivery.body)
    if payload is None:
        return Verdict.bad_body("body is not a JSON object")
    # Signed, so the timestamp is Plain's: a replay of a captured delivery is refused after 300 s.
    if not within(rfc3339(payload.get("timestamp")), delivery.received_at, TOLERANCE_SECONDS):
        return Verdict.refuse("timestamp missing or outside the 300 s window")
    event = _event(payload)
    event_id = valid_id(payload.get("id"), EVENT_ID_RE)
    return Verdict(
        ok=True,
        detail="hex HMAC-SHA256 signature ok",
        payload=payload,
        event=event,
        # Without an id the core keys the delivery by its body's hash.
        delivery_key=event_id,
        title=_title(event, _inner(payload)),
    )


def _inner(payload: dict[str, Any]) -> dict[str, Any]:
    inner = payload.get("payload")
    return inner if isinstance(inner, dict) else {}


def _event(payload: dict[str, Any]) -> str:
    """The envelope's ``type``, else the ``eventType`` it repeats; ``unknown`` if neither is a name."""
    for value in (payload.get("type"), _inner(payload).get("eventType")):
        if isinstance(value, str) and EVENT_RE.fullmatch(value):
            return value
    return "unknown"


def _text(value: object, limit: int) -> str:
    return one_line(value, limit) if isinstance(value, str) else ""


def _title(event: str, inner: dict[str, Any]) -> str:
    what = event.removeprefix("thread.").replace("_", " ")
    thread = inner.get("thread")
    thread = thread if isinstance(thread, dict) else {}
    about = _text(thread.get("title"), 120) or _text(thread.get("previewText"), 120)
    customer = thread.get("customer")
    who = _text(customer.get("fullName"), 60) if isinstance(customer, dict) else ""
    title = f"Plain {what} — {about}" if about else f"Plain {what}"
    return one_line(f"{title} ({who})" if who else title, 200)


def address_of(workspace_id: str, thread_id: str) -> Address:
    """A ``plain_thread`` address; its display (the echo thread key) names the workspace and thread."""
    return Address(
        kind=ADDRESS_KIND,
        provider=KIND,
        display=f"{KIND} {workspace_id} thread {thread_id}",
        fields={"workspace_id": workspace_id, "thread_id": thread_id},
    )


def derive_address(delivery: Delivery, verdict: Verdict) -> Address | None:
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    if not _event(payload).startswith("thread."):
        return None
    thread = _inner(payload).get("thread")
    workspace = valid_id(payload.get("workspaceId"), WORKSPACE_RE)
    thread_id = valid_id(thread.get("id"), THREAD_RE) if isinstance(thread, dict) else None
    return address_of(workspace, thread_id) if workspace and thread_id else None


def _sender(inner: dict[str, Any]) -> str | None:
    """The machine user that sent the message of a ``*_sent`` event, if a machine user did."""
    for key, message in inner.items():
        if key in NOT_THE_MESSAGE or not isinstance(message, dict):
            continue
        actor = message.get("createdBy")
        if isinstance(actor, dict) and actor.get("actorType") == "machineUser":
            return valid_id(actor.get("machineUserId"), MACHINE_USER_RE)
    return None


def echo_clues(delivery: Delivery, verdict: Verdict) -> EchoClues:
    """``replyToThread`` answers no message id, so our reply is known by who sent it: the machine
    user whose API key the connection holds (its ``test`` records it as the connection's bot)."""
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    event = _event(payload)
    if not (event.startswith("thread.") and event.endswith("_sent")):
        return EchoClues()
    return EchoClues(bot_id=_sender(_inner(payload)))


# The id field of each kind of Plain actor that has one (a ``system`` actor has none).
ACTOR_ID_FIELDS = {"customer": "customerId", "user": "userId", "machineUser": "machineUserId"}


def _actor_id(actor: object) -> str | None:
    kind = actor.get("actorType") if isinstance(actor, dict) else None
    field = ACTOR_ID_FIELDS.get(kind) if isinstance(kind, str) else None
    return actor_at(actor, field) if field else None


def actors(delivery: Delivery, verdict: Verdict) -> Actors:
    """Who the signed body names (docs/sources/plain.md, "Trusted actors"), by id: the sender is the
    ``createdBy`` of the event's message (a customer ``c_…``, a user ``u_…`` or a machine user
    ``mu_…``), or of the thread for ``thread.thread_created``. Other events name nobody (a customer
    event's ``createdBy`` is who made the customer, not who caused the event)."""
    payload = verdict.payload if verdict.ok and isinstance(verdict.payload, dict) else {}
    if not _event(payload).startswith("thread."):
        return Actors()
    inner = _inner(payload)
    for key, message in inner.items():
        if key not in NOT_THE_MESSAGE and isinstance(message, dict) and "createdBy" in message:
            return actors_of(_actor_id(message["createdBy"]))
    if _event(payload) == "thread.thread_created":
        thread = inner.get("thread")
        return actors_of(_actor_id(thread.get("createdBy") if isinstance(thread, dict) else None))
    return Actors()


# Plain's ids are compared exactly, as Plain prints them.
TRUST = TrustSpec(field="actor_ids", label="Plain actor id", case_insensitive=False)


# ---------------------------------------------------------------------------------------------
# Outbound: the connection kind (account key = the workspace id, credential = a machine user's API
# key) and replying through Plain's GraphQL API.

PLAIN_API = "https://core-api.uk.plain.com"
API_URL = api_url_setting(
    KIND,
    PLAIN_API,
    "The Plain API base; the GraphQL endpoint is {base}/graphql/v1 (tests and proxies point it elsewhere).",
)
TEXT_LIMIT = 65_536
WHOAMI_QUERY = "query { myWorkspace { id } myMachineUser { id } }"
REPLY_MUTATION = (
    "mutation replyToThread($input: ReplyToThreadInput!) { replyToThread(input: $input) "
    "{ error { message type code fields { field message type } } } }"
)
# A mutation error's ``type`` when its ``code`` names no class.
ERROR_TYPES: dict[str, ErrorClass] = {"VALIDATION": "invalid", "FORBIDDEN": "forbidden", "INTERNAL": "server"}


def _endpoint(settings: Mapping[str, str]) -> str:
    return f"{settings.get(API_URL.name) or PLAIN_API}/graphql/v1"


def _headers(secret: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {secret}",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }


def _data(resp: Response) -> dict[str, Any] | None:
    body = resp.json()
    data = body.get("data") if isinstance(body, dict) else None
    return data if isinstance(data, dict) else None


def _normalize_workspace(value: str) -> str:
    text = value.strip()
    workspace = valid_id("w_" + text[2:].upper() if text[:2].lower() == "w_" else text, WORKSPACE_RE)
    if workspace is None:
        raise ValueError("must be a Plain workspace id such as w_01FXQ6A83FXNN9XA00415VR1XP")
    return workspace


def _id_of(value: object, pattern: re.Pattern[str]) -> str | None:
    return valid_id(value.get("id"), pattern) if isinstance(value, dict) else None


async def _test(check: ConnectionCheck) -> CheckResult:
    """``myWorkspace`` and ``myMachineUser``: reads that change nothing, say which workspace the key
    is for, and name the machine user our replies are sent as (kept as the connection's bot)."""
    resp = await check.http.request(
        "POST", _endpoint(check.settings), headers=_headers(check.secret), json_body={"query": WHOAMI_QUERY}
    )
    failed = graphql_failure(resp)
    if failed is not None:
        return CheckResult(
            ok=False, error_class=failed.error_class, detail=f"whoami query: {failed.error_code}"
        )
    data = _data(resp) or {}
    workspace = _id_of(data.get("myWorkspace"), WORKSPACE_RE)
    machine_user = _id_of(data.get("myMachineUser"), MACHINE_USER_RE)
    facts = {"workspace_id": workspace or "", "bot_id": machine_user or ""}
    facts = {k: v for k, v in facts.items() if v}
    if workspace != check.account_key:
        detail = f"the key belongs to workspace {workspace or '?'}, not {check.account_key}"
        return CheckResult(ok=False, error_class="invalid", detail=detail, facts=facts)
    if machine_user is None:
        return CheckResult(ok=True, detail="authenticated, but not as a machine user", facts=facts)
    return CheckResult(ok=True, detail=f"authenticated as machine user {machine_user}", facts=facts)


def _mutation_failure(error: dict[str, Any]) -> PostResult:
    """A ``replyToThread`` error (HTTP 200): classified by its code, else its type; never its message."""
    code = error_code(error.get("code"), "mutation_error")
    error_class = class_of_code(code)
    kind = error.get("type")
    if error_class == "invalid" and isinstance(kind, str):
        error_class = ERROR_TYPES.get(kind, "invalid")
    if error_class == "rate_limited":
        return PostResult(state="failed", error_class=error_class, error_code=code, retryable=True)
    return PostResult(state="failed", error_class=error_class, error_code=code)


async def post(reply: ReplyPost) -> PostResult:
    thread_id = valid_id(reply.address.fields.get("thread_id"), THREAD_RE)
    if thread_id is None:
        return PostResult(state="failed", error_class="invalid", error_code="bad_address")
    # Plain renders the markdown on channels that can show it and sends the text on the others.
    given = {"threadId": thread_id, "textContent": reply.text, "markdownContent": reply.text}
    body = {"query": REPLY_MUTATION, "variables": {"input": given}}
    resp = await reply.http.request(
        "POST", _endpoint(reply.settings), headers=_headers(reply.secret), json_body=body
    )
    failed = graphql_failure(resp)
    if failed is not None:
        return failed
    answer = (_data(resp) or {}).get("replyToThread")
    if not isinstance(answer, dict):
        # HTTP 200 without errors but no answer we can read: the reply may have been sent.
        return PostResult(state="unknown", error_class="server", error_code="unreadable_answer")
    error = answer.get("error")
    if isinstance(error, dict):
        return _mutation_failure(error)
    # Plain answers no message id: the echo is recognised by the machine user instead.
    return PostResult(state="sent")


# ---------------------------------------------------------------------------------------------
# The kinds and their credential format (a reply quoting a key is refused, whatever its kind).

SECRET_RULES = (
    secret_rule(
        "plain-api-key",
        "Plain API key",
        r"plainApiKey_[A-Za-z0-9_-]{30,100}",
        prefixes=("plainApiKey_",),
        min_entropy=3.0,
    ),
)

SOURCE = SourceKind(
    KIND,
    secret="provider",
    verify=verify,
    derive_address=derive_address,
    echo_clues=echo_clues,
    actors=actors,
    trust=TRUST,
    description="Plain webhooks (request-signing secret from the workspace's settings).",
    # json_object's value is never edited: a body read as it came is not copied onto its todos.
    payload_is_body=True,
)


def _instance_of(address: Address) -> str | None:
    workspace = address.fields.get("workspace_id")
    return workspace if isinstance(workspace, str) else None


CONNECTION = ConnectionKind(
    name=KIND,
    normalize_account_key=_normalize_workspace,
    account_matches=lambda key, address: address.fields.get("workspace_id") == key,
    target_of=lambda address: str(address.fields.get("thread_id", "")),
    text_limit=TEXT_LIMIT,
    test=_test,
    post=post,
    description="A Plain machine user's API key (plainApiKey_…) (account key: the workspace id).",
    account_key_hint="the Plain workspace id (w_…)",
    # A Plain webhook target belongs to one workspace: it is bound to the first one it names.
    instance_of=_instance_of,
    settings=(API_URL,),
    secret_rules=SECRET_RULES,
)


@hookimpl
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    register(SOURCE)
    register(CONNECTION)
