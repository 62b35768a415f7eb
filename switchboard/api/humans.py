"""``/humans/me``: the calling human, with their teams and roles (never their token); their token's
lifecycle (rotate, revoke) and their web UI sessions.

There is no instance administrator among humans: a team's owners administer the team, not its
members' tokens. Rotating, revoking or removing another human is the instance operator's, through
the CLI (``switchboard human rotate|revoke|remove``). A human may rotate or revoke their own token
here, and see and end their own web sessions.

Rotation is a compare-and-swap on the token the request was authenticated with: of two concurrent
rotations with one token only the first succeeds (the second is 401, like any stale token). The new
token is in that response only.
"""

from __future__ import annotations

from typing import Any

from switchboard import humans
from switchboard.api.openapi import TIMESTAMP, obj, ref
from switchboard.api.routing import Operation, Request
from switchboard.bearers import bearer_token
from switchboard.tenancy import human_view


def _bearer(req: Request) -> str:
    """The token this request was authenticated with (``authenticate`` accepted it moments ago)."""
    return bearer_token(req.web.headers) or ""


async def me(req: Request) -> tuple[int, dict[str, Any]]:
    teams = [
        {"slug": req.caller.team_slugs[t], "role": role}
        for t, role in sorted(req.caller.roles.items(), key=lambda item: req.caller.team_slugs[item[0]])
    ]
    return 200, {"human": {**human_view(req.caller.human), "teams": teams}}


async def rotate_me(req: Request) -> tuple[int, dict[str, Any]]:
    rotated = await humans.rotate_token(
        req.services.db, human_id=req.caller.human.id, current_token=_bearer(req)
    )
    return 200, {
        "human": human_view(rotated.human),
        "token": rotated.token,
        "sessions_ended": rotated.sessions_ended,
    }


async def revoke_me(req: Request) -> tuple[int, dict[str, Any]]:
    revoked = await humans.revoke_token(req.services.db, human_id=req.caller.human.id)
    return 200, {
        "human": human_view(revoked.human),
        "revoked": True,
        "sessions_ended": revoked.sessions_ended,
    }


async def list_sessions(req: Request) -> tuple[int, dict[str, Any]]:
    rows = await humans.list_sessions(req.services.db, req.caller.human.id)
    return 200, {"sessions": [humans.session_view(row) for row in rows]}


async def end_session(req: Request) -> tuple[int, dict[str, Any]]:
    ended = await humans.end_session(req.services.db, req.caller.human.id, req.path["id"])
    return 200, {"session": ended.ref, "ended": True}


async def end_sessions(req: Request) -> tuple[int, dict[str, Any]]:
    return 200, {"ended": await humans.end_sessions(req.services.db, req.caller.human.id)}


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/humans/me",
        "getMe",
        "The calling human, with their teams and roles.",
        "humans",
        me,
        "HumanEnvelope",
    ),
    Operation(
        "POST",
        "/humans/me/rotate",
        "rotateMyToken",
        "Issue the caller a new token, in this response only. The token this request carries stops "
        "working at once, and every web UI session of the caller ends.",
        "humans",
        rotate_me,
        "RotatedToken",
        errors=(400, 401),
    ),
    Operation(
        "POST",
        "/humans/me/revoke",
        "revokeMyToken",
        "Refuse the caller's token from now on and end their web UI sessions. Only the instance "
        "operator can issue a new one (`switchboard human rotate`).",
        "humans",
        revoke_me,
        "RevokedToken",
        errors=(400, 401),
    ),
    Operation(
        "GET",
        "/humans/me/sessions",
        "listMySessions",
        "The caller's live web UI sessions, most recently used first (never a cookie).",
        "humans",
        list_sessions,
        "SessionList",
        errors=(400, 401),
    ),
    Operation(
        "DELETE",
        "/humans/me/sessions",
        "endMySessions",
        "End every web UI session of the caller (those browsers are logged out).",
        "humans",
        end_sessions,
        "SessionsEnded",
        errors=(400, 401),
    ),
    Operation(
        "DELETE",
        "/humans/me/sessions/{id}",
        "endMySession",
        "End one of the caller's web UI sessions.",
        "humans",
        end_session,
        "SessionEnded",
    ),
)

SCHEMAS: dict[str, Any] = {
    "Human": obj(
        {
            "id": {"type": "string"},
            "handle": {"type": "string"},
            "email": {"type": ["string", "null"]},
            "token_prefix": {"type": "string"},
            "token_state": {
                "type": "string",
                "enum": ["active", "revoked"],
                "description": "`revoked`: no token of this human is accepted.",
            },
            "token_rotated_at": TIMESTAMP,
            "revoked_at": TIMESTAMP,
            "created_at": TIMESTAMP,
            "teams": {
                "type": "array",
                "items": obj({"slug": {"type": "string"}, "role": {"type": "string"}}),
            },
        }
    ),
    "HumanEnvelope": obj({"human": ref("Human")}, ["human"]),
    "RotatedToken": obj(
        {
            "human": ref("Human"),
            "token": {"type": "string", "description": "The new sbo_… token — shown only here."},
            "sessions_ended": {"type": "integer"},
        },
        ["human", "token", "sessions_ended"],
    ),
    "RevokedToken": obj(
        {
            "human": ref("Human"),
            "revoked": {"type": "boolean"},
            "sessions_ended": {"type": "integer"},
        },
        ["human", "revoked", "sessions_ended"],
    ),
    "Session": obj(
        {
            "id": {"type": "string"},
            "created_at": TIMESTAMP,
            "last_seen_at": {
                **TIMESTAMP,
                "description": "Refreshed at most every five minutes.",
            },
            "expires_at": TIMESTAMP,
            "user_agent": {"type": ["string", "null"]},
        },
        ["id", "created_at", "last_seen_at", "expires_at"],
    ),
    "SessionList": obj({"sessions": {"type": "array", "items": ref("Session")}}, ["sessions"]),
    "SessionEnded": obj({"session": {"type": "string"}, "ended": {"type": "boolean"}}, ["session", "ended"]),
    "SessionsEnded": obj(
        {"ended": {"type": "integer", "description": "How many sessions ended."}}, ["ended"]
    ),
}
