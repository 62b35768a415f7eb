"""``/humans/me``: the calling human, with their teams and roles (never their token)."""

from __future__ import annotations

from typing import Any

from switchboard.api.openapi import TIMESTAMP, obj, ref
from switchboard.api.routing import Operation, Request
from switchboard.tenancy import human_view


async def me(req: Request) -> tuple[int, dict[str, Any]]:
    teams = [
        {"slug": req.caller.team_slugs[t], "role": role}
        for t, role in sorted(req.caller.roles.items(), key=lambda item: req.caller.team_slugs[item[0]])
    ]
    return 200, {"human": {**human_view(req.caller.human), "teams": teams}}


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
)

SCHEMAS: dict[str, Any] = {
    "Human": obj(
        {
            "id": {"type": "string"},
            "handle": {"type": "string"},
            "email": {"type": ["string", "null"]},
            "token_prefix": {"type": "string"},
            "created_at": TIMESTAMP,
            "teams": {
                "type": "array",
                "items": obj({"slug": {"type": "string"}, "role": {"type": "string"}}),
            },
        }
    ),
    "HumanEnvelope": obj({"human": ref("Human")}, ["human"]),
}
