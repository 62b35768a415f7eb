"""The github provider for Switchboard: verified webhooks in, replies out.

Inbound: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, raw body)>``, the delivery id from
``X-GitHub-Delivery``, the event from ``X-GitHub-Event``. Issue and pull request conversations get a
``forge_comment`` reply address; ``ping`` is housekeeping.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, quote

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
    api_url_setting,
    comment_echo_clues,
    failure,
    forge_actors,
    forge_comment_address,
    header,
    hookimpl,
    https_link,
    int_id,
    json_dict,
    json_object,
    normalize_host,
    one_line,
    reply_marker,
    signature_matches,
    valid_number,
    valid_repo,
)

KIND = "github"
# The events whose conversation a reply can join (an issue or a pull request thread).
CONVERSATION_EVENTS = frozenset(
    {"issues", "issue_comment", "pull_request", "pull_request_review", "pull_request_review_comment"}
)
HOUSEKEEPING_EVENTS = frozenset({"ping"})

# ---------------------------------------------------------------------------------------------
# Inbound: verify, derive the reply address, find echo clues. The core calls these for github
# deliveries only.


def _body_json(delivery: Delivery) -> dict[str, Any] | None:
    """The JSON object of a delivery, sent as JSON or form-encoded (``payload=…``)."""
    content_type = delivery.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if content_type == "application/x-www-form-urlencoded":
        try:
            form = parse_qs(delivery.body.decode("utf-8"), strict_parsing=True, max_num_fields=10)
        except (UnicodeDecodeError, ValueError):
            return None
        values = form.get("payload", [])
        return json_object(values[0].encode()) if len(values) == 1 else None
    return json_object(delivery.body)


def verify(delivery: Delivery) -> Verdict:
    signature = delivery.headers.get("X-Hub-Signature-256", "").strip()
    if not signature:
        return Verdict.refuse("X-Hub-Signature-256 missing")
    scheme, _, given = signature.partition("=")
    if scheme != "sha256" or not given:
        return Verdict.refuse("X-Hub-Signature-256 malformed")
    if not signature_matches(signature, delivery.secret or "", delivery.body, prefix="sha256="):
        return Verdict.refuse("signature mismatch")
    payload = _body_json(delivery)
    if payload is None:
        return Verdict.bad_body("body is not a JSON object")
    event = delivery.headers.get("X-GitHub-Event", "").strip() or "unknown"
    action = payload.get("action")
    dotted = f"{event}.{action}" if isinstance(action, str) and action else event
    delivery_id = delivery.headers.get("X-GitHub-Delivery", "").strip()
    return Verdict(
        ok=True,
        detail="sha256 signature ok",
        payload=payload,
        event=one_line(dotted, 100),
        delivery_key=delivery_id or None,
        title=_title(event, payload),
        ignore=event in HOUSEKEEPING_EVENTS,
    )


def _title(event: str, payload: dict[str, Any]) -> str:
    """``PR #7 opened in acme/api — Fix race``: a one-line summary, built from data only."""
    repo_info = payload.get("repository")
    repo = repo_info.get("full_name") if isinstance(repo_info, dict) else None
    where = f" in {repo}" if isinstance(repo, str) else ""
    action = payload.get("action") if isinstance(payload.get("action"), str) else ""
    issue = payload.get("issue") if isinstance(payload.get("issue"), dict) else None
    pull = payload.get("pull_request") if isinstance(payload.get("pull_request"), dict) else None
    if event == "ping":
        return "Ping from GitHub" + where
    if event == "push":
        ref = payload.get("ref")
        if not isinstance(ref, str):
            ref = ""
        commits = payload.get("commits")
        if not isinstance(commits, list):
            commits = []
        return one_line(f"Push to {ref.removeprefix('refs/heads/')}{where} ({len(commits)} commits)", 200)
    subject, noun = (pull, "PR") if pull is not None else (issue, "Issue")
    if issue is not None and issue.get("pull_request"):
        noun = "PR"
    if subject is None:
        return one_line(f"GitHub {event} {action}{where}", 200)
    verb = {
        "issue_comment": "commented",
        "pull_request_review": f"review {action}",
        "pull_request_review_comment": f"review comment {action}",
    }.get(event, action)
    number = subject.get("number")
    title = subject.get("title") if isinstance(subject.get("title"), str) else ""
    return one_line(f"{noun} #{number} {verb}{where} — {one_line(title, 120)}", 200)


def derive_address(delivery: Delivery, verdict: Verdict) -> Address | None:
    payload = verdict.payload if isinstance(verdict.payload, dict) else {}
    if verdict.event.split(".")[0] not in CONVERSATION_EVENTS:
        return None
    subject = payload.get("pull_request") or payload.get("issue")
    # GitHub and GHES serve a whole host, never a path: the host is the instance.
    return forge_comment_address(KIND, payload.get("repository"), subject, path_mounted=False)


def echo_clues(delivery: Delivery, verdict: Verdict) -> EchoClues:
    return comment_echo_clues(verdict.payload)


def actors(delivery: Delivery, verdict: Verdict) -> Actors:
    """Who the signed body names (docs/sources/github.md, "Trusted actors"): ``sender.login``, and
    the login of the comment's, review's, pull request's or issue's user, plus the thread's author."""
    return forge_actors(verdict.payload) if verdict.ok else Actors()


# Logins are compared without regard to case, as the forge treats them.
TRUST = TrustSpec(field="logins", label="GitHub login", matches=("sender", "author", "both"))


# ---------------------------------------------------------------------------------------------
# Outbound: the connection kind (account key = forge host) and posting an issue/PR comment.

TEXT_LIMIT = 65_536
SAAS_HOST = "github.com"
API_URL = api_url_setting(
    KIND,
    "https://api.github.com",
    "The GitHub API base for github.com connections (tests and proxies); GitHub Enterprise hosts "
    "are not affected.",
)


def _api(account_key: str, settings: Mapping[str, str]) -> str:
    """``https://api.github.com`` for github.com (or the operator's SWITCHBOARD_GITHUB_API_URL), else
    GHES's ``https://{host}/api/v3``. Only ever the connection's own host: never the address's."""
    if account_key == SAAS_HOST:
        return settings.get(API_URL.name) or "https://api.github.com"
    return f"https://{account_key}/api/v3"


def _headers(secret: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {secret}",
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
    }


def _rate_limited(resp: Response) -> bool:
    if resp.status == 429:
        return True
    return resp.status == 403 and (
        header(resp.headers, "retry-after") is not None
        or header(resp.headers, "x-ratelimit-remaining") == "0"
    )


def _failure(resp: Response) -> PostResult:
    if not _rate_limited(resp):
        return failure(resp)
    result = failure(resp, rate_limited=True)
    reset = header(resp.headers, "x-ratelimit-reset")
    # The far side's header: ASCII digits only (str.isdigit() also passes "²", which int() refuses)
    # and a bounded length (a longer number overflows a float); a day at most, as Retry-After.
    if result.retry_after is None and reset is not None and reset.isascii() and reset.isdigit():
        if len(reset) <= 12:
            wait = min(max(0.0, int(reset) - time.time()), 24 * 3600.0)
            result = dataclasses.replace(result, retry_after=wait)
    return result


async def _test(check: ConnectionCheck) -> CheckResult:
    url = f"{_api(check.account_key, check.settings)}/user"
    resp = await check.http.request("GET", url, headers=_headers(check.secret))
    if resp.status != 200:
        detail = f"GET /user answered HTTP {resp.status}"
        return CheckResult(ok=False, error_class=_failure(resp).error_class, detail=detail)
    login = json_dict(resp).get("login")
    login = one_line(login, 60) if isinstance(login, str) else ""
    return CheckResult(ok=True, detail=f"authenticated as {login}", facts={"login": login})


async def post(reply: ReplyPost) -> PostResult:
    repo = valid_repo(reply.address.fields.get("repo"))
    number = valid_number(reply.address.fields.get("number"))
    if repo is None or number is None:
        return PostResult(state="failed", error_class="invalid", error_code="bad_address")
    owner, name = (quote(part, safe="") for part in repo.split("/"))
    url = f"{_api(reply.account_key, reply.settings)}/repos/{owner}/{name}/issues/{number}/comments"
    body = {"body": reply.text + reply_marker(reply.reply_id)}
    resp = await reply.http.request("POST", url, headers=_headers(reply.secret), json_body=body)
    if resp.status != 201:
        return _failure(resp)
    comment = json_dict(resp)
    return PostResult(
        state="sent",
        object_id=int_id(comment.get("id")),
        permalink=https_link(comment.get("html_url")),
    )


def _instance_of(address: Address) -> str | None:
    host = address.fields.get("host")
    if not isinstance(host, str):
        return None
    try:
        return normalize_host(host)
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# The kinds. GitHub's token formats (ghp_, github_pat_, …) are in the core's secret-scan rules.

SOURCE = SourceKind(
    KIND,
    secret="minted",
    verify=verify,
    derive_address=derive_address,
    echo_clues=echo_clues,
    actors=actors,
    trust=TRUST,
    description="GitHub repository or organisation webhooks.",
    # json_object's value is never edited: a body read as it came is not copied onto its todos.
    payload_is_body=True,
)

CONNECTION = ConnectionKind(
    name=KIND,
    normalize_account_key=normalize_host,
    # The address's host as the webhook's instance reads it (lower case, no :443), as account keys
    # are written: an html_url with an explicit default port bound the webhook but matched nothing.
    account_matches=lambda key, address: _instance_of(address) == key,
    target_of=lambda address: str(address.fields.get("repo", "")),
    text_limit=TEXT_LIMIT,
    test=_test,
    post=post,
    default_account_key=SAAS_HOST,
    description="A GitHub or GitHub Enterprise Server token (account key: the forge host).",
    account_key_hint="the forge host (github.com when empty)",
    instance_of=_instance_of,
    settings=(API_URL,),
)


@hookimpl
def register_kinds(register: Callable[[SourceKind | ConnectionKind], None]) -> None:
    register(SOURCE)
    register(CONNECTION)
