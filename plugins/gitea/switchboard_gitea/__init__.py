"""The gitea provider for Switchboard (Gitea and Forgejo): verified webhooks in, replies out.

Inbound: ``X-Gitea-Signature`` or ``X-Forgejo-Signature`` (bare hex HMAC-SHA256 of the raw body) or
the GitHub-style ``X-Hub-Signature-256: sha256=<hex>``; every signature header that is present
must match, and an empty one counts as missing. The event comes from ``X-Gitea-Event-Type`` (or
``X-Forgejo-Event-Type``), which is finer than ``X-Gitea-Event``. Careful: ``pull_request_comment``
means a plain comment on a PR in ``*-Event-Type`` but a *review* comment in ``*-Event``.
"""

from __future__ import annotations

from collections.abc import Callable
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
    comment_echo_clues,
    failure,
    forge_actors,
    forge_comment_address,
    header_value,
    hmac_sha256_hex,
    hookimpl,
    host_of,
    https_base,
    https_link,
    int_id,
    json_dict,
    json_object,
    normalize_https_base,
    one_line,
    reply_marker,
    same,
    same_instance,
    valid_number,
    valid_repo,
)

KIND = "gitea"
SIGNATURE_HEADERS = ("X-Gitea-Signature", "X-Forgejo-Signature")
DELIVERY_HEADERS = ("X-Gitea-Delivery", "X-Forgejo-Delivery", "X-Gogs-Delivery", "X-GitHub-Delivery")

# X-Gitea-Event-Type (fine) → the GitHub-style family this kind of delivery belongs to.
FINE_EVENTS = {
    "issues": "issues",
    "issue_assign": "issues",
    "issue_label": "issues",
    "issue_milestone": "issues",
    "issue_comment": "issue_comment",
    # A comment on a pull request's conversation (an issue-comment payload with is_pull).
    "pull_request_comment": "issue_comment",
    "pull_request": "pull_request",
    "pull_request_assign": "pull_request",
    "pull_request_label": "pull_request",
    "pull_request_milestone": "pull_request",
    "pull_request_sync": "pull_request",
    "pull_request_review_request": "pull_request",
    "pull_request_review_approved": "pull_request_review",
    "pull_request_review_rejected": "pull_request_review",
    "pull_request_review_comment": "pull_request_review_comment",
}
# X-Gitea-Event (coarse), only for old servers that do not send the fine header.
COARSE_EVENTS = {
    "issues": "issues",
    "issue_comment": "issue_comment",
    "pull_request": "pull_request",
    "pull_request_approved": "pull_request_review",
    "pull_request_rejected": "pull_request_review",
    # Here it is a review comment, unlike the fine header.
    "pull_request_comment": "pull_request_review_comment",
}
CONVERSATION_EVENTS = frozenset(FINE_EVENTS.values())
HOUSEKEEPING_EVENTS = frozenset({"ping"})

# ---------------------------------------------------------------------------------------------
# Inbound: verify, derive the reply address, find echo clues. The core calls these for gitea
# deliveries only.


def _header(delivery: Delivery, *names: str) -> str:
    return header_value(delivery.headers, *names)


def _event(delivery: Delivery) -> str:
    """The event family (``issues``, ``issue_comment``, …) or the raw event name for the rest."""
    fine = _header(delivery, "X-Gitea-Event-Type", "X-Forgejo-Event-Type")
    if fine:
        return FINE_EVENTS.get(fine, fine)
    coarse = _header(delivery, "X-Gitea-Event", "X-Forgejo-Event", "X-Gogs-Event", "X-GitHub-Event")
    return COARSE_EVENTS.get(coarse, coarse) or "unknown"


def verify(delivery: Delivery) -> Verdict:
    expected = hmac_sha256_hex(delivery.secret or "", delivery.body)
    checks = []
    for name in SIGNATURE_HEADERS:
        value = delivery.headers.get(name, "").strip()
        if value:
            checks.append(same(expected, value))
    hub = delivery.headers.get("X-Hub-Signature-256", "").strip()
    if hub:
        scheme, _, given = hub.partition("=")
        checks.append(scheme == "sha256" and same(expected, given))
    if not checks:
        return Verdict.refuse("signature header missing")
    if not all(checks):
        return Verdict.refuse("signature mismatch")
    payload = json_object(delivery.body)
    if payload is None:
        return Verdict.bad_body("body is not a JSON object")
    event = _event(delivery)
    action = payload.get("action")
    dotted = f"{event}.{action}" if isinstance(action, str) and action else event
    return Verdict(
        ok=True,
        detail="sha256 signature ok",
        payload=payload,
        event=one_line(dotted, 100),
        delivery_key=_header(delivery, *DELIVERY_HEADERS) or None,
        title=_title(event, payload),
        ignore=event in HOUSEKEEPING_EVENTS,
    )


def _subject(payload: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """The issue or pull request the delivery is about, and whether it is a pull request."""
    pull, issue = payload.get("pull_request"), payload.get("issue")
    if isinstance(pull, dict):
        return pull, True
    if isinstance(issue, dict):
        return issue, bool(issue.get("pull_request")) or payload.get("is_pull") is True
    return None, False


def _title(event: str, payload: dict[str, Any]) -> str:
    repo_info = payload.get("repository")
    repo = repo_info.get("full_name") if isinstance(repo_info, dict) else None
    where = f" in {repo}" if isinstance(repo, str) else ""
    action = payload.get("action") if isinstance(payload.get("action"), str) else ""
    if event == "push":
        ref = payload.get("ref")
        if not isinstance(ref, str):
            ref = ""
        commits = payload.get("commits")
        if not isinstance(commits, list):
            commits = []
        return one_line(f"Push to {ref.removeprefix('refs/heads/')}{where} ({len(commits)} commits)", 200)
    subject, is_pull = _subject(payload)
    if subject is None:
        return one_line(f"Gitea {event} {action}{where}", 200)
    verb = {
        "issue_comment": "commented",
        "pull_request_review": f"review {action}",
        "pull_request_review_comment": "review commented",
    }.get(event, action)
    number = subject.get("number")
    title = subject.get("title")
    if not isinstance(title, str):
        title = ""
    noun = "PR" if is_pull else "Issue"
    return one_line(f"{noun} #{number} {verb}{where} — {one_line(title, 120)}", 200)


def derive_address(delivery: Delivery, verdict: Verdict) -> Address | None:
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    if verdict.event.split(".")[0] not in CONVERSATION_EVENTS:
        return None
    subject, _ = _subject(payload)
    # Self-hosted forges often run on plain http inside a network, and under a path of a shared
    # host: the address carries the instance base (the html_url before /{owner}/{repo}), and the
    # reply side decides whether it may dial it (the connection's https base URL and the guard).
    return forge_comment_address(KIND, payload.get("repository"), subject, schemes=("https", "http"))


def echo_clues(delivery: Delivery, verdict: Verdict) -> EchoClues:
    return comment_echo_clues(verdict.payload)


def actors(delivery: Delivery, verdict: Verdict) -> Actors:
    """Who the signed body names (docs/sources/gitea.md, "Trusted actors"): ``sender.login``, and
    the login of the comment's, review's, pull request's or issue's user, plus the thread's author."""
    return forge_actors(verdict.payload) if verdict.ok else Actors()


# Logins are compared without regard to case, as the forge treats them.
TRUST = TrustSpec(field="logins", label="Gitea login", matches=("sender", "author", "both"))


# ---------------------------------------------------------------------------------------------
# Outbound: the connection kind (account key = the forge's https base URL) and posting a comment.

TEXT_LIMIT = 65_536


def _headers(secret: str) -> dict[str, str]:
    return {"Authorization": f"token {secret}", "Accept": "application/json"}


async def _test(check: ConnectionCheck) -> CheckResult:
    resp = await check.http.request("GET", f"{check.account_key}/api/v1/user", headers=_headers(check.secret))
    if resp.status != 200:
        detail = f"GET /api/v1/user answered HTTP {resp.status}"
        return CheckResult(ok=False, error_class=failure(resp).error_class, detail=detail)
    login = json_dict(resp).get("login")
    login = one_line(login, 60) if isinstance(login, str) else ""
    return CheckResult(ok=True, detail=f"authenticated as {login}", facts={"login": login})


async def post(reply: ReplyPost) -> PostResult:
    repo = valid_repo(reply.address.fields.get("repo"))
    number = valid_number(reply.address.fields.get("number"))
    if repo is None or number is None:
        return PostResult(state="failed", error_class="invalid", error_code="bad_address")
    owner, name = (quote(part, safe="") for part in repo.split("/"))
    # The connection's own base URL, path included: the instance the address matched exactly.
    url = f"{reply.account_key}/api/v1/repos/{owner}/{name}/issues/{number}/comments"
    body = {"body": reply.text + reply_marker(reply.reply_id)}
    resp = await reply.http.request("POST", url, headers=_headers(reply.secret), json_body=body)
    if resp.status != 201:
        return failure(resp)
    comment = json_dict(resp)
    return PostResult(
        state="sent",
        object_id=int_id(comment.get("id")),
        permalink=https_link(comment.get("html_url")),
    )


def _account_matches(key: str, address: Address) -> bool:
    """The address's instance base (from the verified payload) must be the connection's base URL,
    path included: two Gitea instances under one host name are two instances. An address stored
    before addresses carried their base names only a host; it keeps the host rule, and the core
    refuses it as ambiguous when more than one connection of the scope is on that host."""
    if "base" in address.fields:
        return same_instance(address.fields["base"], key)
    return address.fields.get("host") == host_of(key)


def _instance_of(address: Address) -> str | None:
    return https_base(address.fields.get("base"))


# ---------------------------------------------------------------------------------------------
# The kinds. Gitea tokens are bare hex, too plain for a secret-scan rule of their own.

SOURCE = SourceKind(
    KIND,
    secret="minted",
    verify=verify,
    derive_address=derive_address,
    echo_clues=echo_clues,
    actors=actors,
    trust=TRUST,
    description="Gitea or Forgejo repository webhooks.",
    # json_object's value is never edited: a body read as it came is not copied onto its todos.
    payload_is_body=True,
)

CONNECTION = ConnectionKind(
    name=KIND,
    normalize_account_key=normalize_https_base,
    account_matches=_account_matches,
    target_of=lambda address: str(address.fields.get("repo", "")),
    text_limit=TEXT_LIMIT,
    test=_test,
    post=post,
    description="A Gitea or Forgejo access token (account key: the https base URL, with its path).",
    account_key_hint="the instance's https base URL, with its path",
    instance_of=_instance_of,
)


@hookimpl
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    register(SOURCE)
    register(CONNECTION)
