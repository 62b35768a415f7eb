"""The linear provider for Switchboard: Linear webhooks in, issue comments out.

Inbound (docs/sources/linear.md): ``Linear-Signature`` is the lower-case hex HMAC-SHA256 of the raw
body under the signing secret Linear shows in its webhook settings (the secret is Linear's: the owner
pastes it). The body's ``webhookTimestamp`` (milliseconds) must be within 60 s of arrival, which
bounds replays; ``Linear-Delivery`` (a UUID) is the delivery key. A delivery looks like::

    {"action": "create", "type": "Comment", "organizationId": "<uuid>", "webhookTimestamp": 1764496800000,
     "webhookId": "<uuid>", "url": "https://linear.app/acme/issue/ENG-42#comment-…", "createdAt": "…",
     "data": {"id": "<uuid>", "body": "…", "issueId": "<uuid>", "userId": "<uuid>", …}}

``Issue`` and ``Comment`` deliveries (except ``remove``) get a ``linear_comment`` address: the
organisation id and the issue id, both UUIDs. Outbound, a reply is one GraphQL ``commentCreate`` on
that issue with the organisation's connection; the comment coming back as a ``Comment`` delivery is
recognised by its id.

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
    PostResult,
    ReplyPost,
    Response,
    SourceKind,
    TrustSpec,
    Verdict,
    actor_at,
    actors_of,
    api_url_setting,
    graphql_failure,
    header_value,
    hookimpl,
    https_link,
    json_object,
    one_line,
    secret_rule,
    signature_matches,
    timestamp_within,
    valid_uuid,
)

KIND = "linear"
ADDRESS_KIND = "linear_comment"
# Linear's documentation: refuse deliveries whose webhookTimestamp is more than about a minute off.
TOLERANCE_SECONDS = 60
TYPE_RE = re.compile(r"[A-Za-z]{1,40}")
ACTION_RE = re.compile(r"[a-z]{1,20}")
DELIVERY_RE = re.compile(r"[A-Za-z0-9-]{1,100}")
# The entity types whose deliveries are about one issue, and where its id is in ``data``.
ISSUE_ID_FIELD = {"Issue": "id", "Comment": "issueId"}
PAST = {"create": "created", "update": "updated", "remove": "removed"}

# ---------------------------------------------------------------------------------------------
# Inbound: verify, derive the reply address, find echo clues. The core calls these for linear
# deliveries only.


def verify(delivery: Delivery) -> Verdict:
    given = header_value(delivery.headers, "Linear-Signature")
    if not given:
        return Verdict.refuse("Linear-Signature missing")
    if not delivery.secret:
        return Verdict.refuse("the webhook has no signing secret yet")
    if not signature_matches(given, delivery.secret, delivery.body):
        return Verdict.refuse("signature mismatch")
    payload = json_object(delivery.body)
    if payload is None:
        return Verdict.bad_body("body is not a JSON object")
    # Signed, so the timestamp is Linear's: a replay of a captured delivery is refused after 60 s.
    if not timestamp_within(
        payload.get("webhookTimestamp"), delivery.received_at, TOLERANCE_SECONDS, millis=True
    ):
        return Verdict.refuse("webhookTimestamp missing or outside the 60 s window")
    entity, action = _word(payload.get("type"), TYPE_RE), _word(payload.get("action"), ACTION_RE)
    data = payload.get("data")
    return Verdict(
        ok=True,
        detail="hex HMAC-SHA256 signature ok",
        payload=payload,
        event=f"{entity}.{action}",
        delivery_key=_delivery_key(delivery.headers),
        title=_title(entity, action, data if isinstance(data, dict) else {}),
    )


def _word(value: object, pattern: re.Pattern[str]) -> str:
    return value if isinstance(value, str) and pattern.fullmatch(value) else "unknown"


def _delivery_key(headers: Mapping[str, str]) -> str | None:
    """``Linear-Delivery``: one id per delivery, the same on Linear's retries. Without it the core
    keys the delivery by its body's hash."""
    value = header_value(headers, "Linear-Delivery")
    return value if DELIVERY_RE.fullmatch(value) else None


def _text(value: object, limit: int) -> str:
    return one_line(value, limit) if isinstance(value, str) else ""


def _title(entity: str, action: str, data: dict[str, Any]) -> str:
    done = PAST.get(action, action)
    if entity == "Issue":
        ident = _text(data.get("identifier"), 30) or "issue"
        return one_line(f"Linear {ident} {done} — {_text(data.get('title'), 120)}", 200)
    if entity == "Comment":
        issue = data.get("issue")
        issue = issue if isinstance(issue, dict) else {}
        where = _text(issue.get("identifier"), 30) or _text(issue.get("title"), 60) or "an issue"
        return one_line(f"Linear comment {done} on {where} — {_text(data.get('body'), 120)}", 200)
    return one_line(f"Linear {entity} {done}", 200)


def _issue_of(payload: dict[str, Any]) -> tuple[str, str] | None:
    """(organisation id, issue id) of a delivery about an issue that still exists, else None."""
    entity, action, data = payload.get("type"), payload.get("action"), payload.get("data")
    if not isinstance(entity, str) or entity not in ISSUE_ID_FIELD or action == "remove":
        return None
    if not isinstance(data, dict):
        return None
    organization = valid_uuid(payload.get("organizationId"))
    issue = valid_uuid(data.get(ISSUE_ID_FIELD[entity]))
    return (organization, issue) if organization and issue else None


def address_of(organization_id: str, issue_id: str) -> Address:
    """A ``linear_comment`` address. Its display is the echo thread key, so an issue's deliveries
    and its comments' deliveries must give the same one: both name the issue by its UUID."""
    return Address(
        kind=ADDRESS_KIND,
        provider=KIND,
        display=f"{KIND} {organization_id} issue {issue_id}",
        fields={"organization_id": organization_id, "issue_id": issue_id},
    )


def derive_address(delivery: Delivery, verdict: Verdict) -> Address | None:
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    found = _issue_of(payload)
    return address_of(*found) if found else None


def echo_clues(delivery: Delivery, verdict: Verdict) -> EchoClues:
    """A ``Comment`` delivery names its comment's id: our own reply's id is recorded when
    ``commentCreate`` answers. (No marker: an HTML comment is not invisible in Linear's markdown.)"""
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    data = payload.get("data")
    if payload.get("type") != "Comment" or not isinstance(data, dict):
        return EchoClues()
    comment_id = valid_uuid(data.get("id"))
    return EchoClues(object_ids=(comment_id,) if comment_id else ())


def actors(delivery: Delivery, verdict: Verdict) -> Actors:
    """Who the signed body names (docs/sources/linear.md, "Trusted actors"), by id: the sender is the
    envelope's ``actor.id`` (the user, OAuth application or integration that acted), else, for a
    ``Comment``, the comment's ``data.userId``, which is also its author."""
    payload = verdict.payload if verdict.ok and isinstance(verdict.payload, dict) else {}
    author = actor_at(payload, "data", "userId") if payload.get("type") == "Comment" else None
    return actors_of(actor_at(payload, "actor", "id") or author, [author])


# Linear's ids are UUIDs, which are the same id in either case.
TRUST = TrustSpec(field="actor_ids", label="Linear user id")


# ---------------------------------------------------------------------------------------------
# Outbound: the connection kind (account key = the organisation id, credential = a personal API
# key or an OAuth access token) and posting a comment through Linear's GraphQL API.

LINEAR_API = "https://api.linear.app"
API_URL = api_url_setting(
    KIND,
    LINEAR_API,
    "The Linear API base; the GraphQL endpoint is {base}/graphql (tests and proxies point it elsewhere).",
)
TEXT_LIMIT = 65_536
VIEWER_QUERY = "query { viewer { id organization { id } } }"
COMMENT_MUTATION = (
    "mutation($input: CommentCreateInput!){ commentCreate(input:$input){ success comment { id url } } }"
)


def _endpoint(settings: Mapping[str, str]) -> str:
    return f"{settings.get(API_URL.name) or LINEAR_API}/graphql"


def _headers(secret: str) -> dict[str, str]:
    # Personal API keys go bare in Authorization; OAuth access tokens as a bearer.
    auth = secret if secret.startswith("lin_api_") else f"Bearer {secret}"
    return {"Authorization": auth, "Content-Type": "application/json", "Accept": "application/json"}


def _data(resp: Response, field: str) -> dict[str, Any] | None:
    """``data.<field>`` of a GraphQL answer, when it is an object."""
    body = resp.json()
    data = body.get("data") if isinstance(body, dict) else None
    value = data.get(field) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else None


def _normalize_organization(value: str) -> str:
    organization = valid_uuid(value.strip().lower())
    if organization is None:
        raise ValueError(
            "must be a Linear organisation id (a UUID, e.g. from `query { organization { id } }`)"
        )
    return organization


async def _test(check: ConnectionCheck) -> CheckResult:
    """``viewer { id organization { id } }``: a read that changes nothing and says whose key it is."""
    resp = await check.http.request(
        "POST", _endpoint(check.settings), headers=_headers(check.secret), json_body={"query": VIEWER_QUERY}
    )
    failed = graphql_failure(resp)
    if failed is not None:
        return CheckResult(
            ok=False, error_class=failed.error_class, detail=f"viewer query: {failed.error_code}"
        )
    viewer = _data(resp, "viewer") or {}
    organization = viewer.get("organization")
    facts = {
        "user_id": valid_uuid(viewer.get("id")) or "",
        "organization_id": valid_uuid(organization.get("id") if isinstance(organization, dict) else None)
        or "",
    }
    facts = {k: v for k, v in facts.items() if v}
    if facts.get("organization_id") != check.account_key:
        where = facts.get("organization_id", "?")
        detail = f"the key belongs to organisation {where}, not {check.account_key}"
        return CheckResult(ok=False, error_class="invalid", detail=detail, facts=facts)
    return CheckResult(ok=True, detail=f"authenticated as user {facts.get('user_id', '?')}", facts=facts)


async def post(reply: ReplyPost) -> PostResult:
    issue_id = valid_uuid(reply.address.fields.get("issue_id"))
    if issue_id is None:
        return PostResult(state="failed", error_class="invalid", error_code="bad_address")
    body = {"query": COMMENT_MUTATION, "variables": {"input": {"issueId": issue_id, "body": reply.text}}}
    resp = await reply.http.request(
        "POST", _endpoint(reply.settings), headers=_headers(reply.secret), json_body=body
    )
    failed = graphql_failure(resp)
    if failed is not None:
        return failed
    created = _data(resp, "commentCreate")
    if created is None:
        # HTTP 200 without errors but no answer we can read: the mutation may have run.
        return PostResult(state="unknown", error_class="server", error_code="unreadable_answer")
    if created.get("success") is not True:
        return PostResult(state="failed", error_class="invalid", error_code="not_created")
    comment = created.get("comment")
    comment = comment if isinstance(comment, dict) else {}
    return PostResult(
        state="sent", object_id=valid_uuid(comment.get("id")), permalink=https_link(comment.get("url"))
    )


# ---------------------------------------------------------------------------------------------
# The kinds and their credential formats (a reply quoting one is refused, whatever its kind).

SECRET_RULES = (
    secret_rule(
        "linear-api-key",
        "Linear personal API key",
        r"lin_api_[A-Za-z0-9]{32,64}",
        prefixes=("lin_api_",),
        min_entropy=3.0,
    ),
    secret_rule(
        "linear-oauth-token",
        "Linear OAuth access token",
        r"lin_oauth_[A-Za-z0-9]{32,128}",
        prefixes=("lin_oauth_",),
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
    description="Linear webhooks (signing secret from Linear's webhook settings).",
    # json_object's value is never edited: a body read as it came is not copied onto its todos.
    payload_is_body=True,
)


def _instance_of(address: Address) -> str | None:
    organization = address.fields.get("organization_id")
    return organization if isinstance(organization, str) else None


CONNECTION = ConnectionKind(
    name=KIND,
    normalize_account_key=_normalize_organization,
    account_matches=lambda key, address: address.fields.get("organization_id") == key,
    target_of=lambda address: str(address.fields.get("issue_id", "")),
    text_limit=TEXT_LIMIT,
    test=_test,
    post=post,
    description="A Linear API key (lin_api_…) or OAuth token (account key: the organisation id).",
    account_key_hint="the Linear organisation id (a UUID)",
    # A Linear webhook belongs to one organisation: it is bound to the first one it names.
    instance_of=_instance_of,
    settings=(API_URL,),
    secret_rules=SECRET_RULES,
)


@hookimpl
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    register(SOURCE)
    register(CONNECTION)
