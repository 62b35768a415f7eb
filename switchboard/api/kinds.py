"""``/kinds``: the provider kinds this instance has installed, as their plugins describe them.

Read-only and the same for every caller: what a human needs to pick a webhook source or a
connection kind (its description, where its signing secret comes from, whom it can trust, what its
account key is). Operator settings are not shown here (``switchboard plugins`` shows them to the operator).
"""

from __future__ import annotations

from typing import Any

from switchboard.api.openapi import obj
from switchboard.api.routing import Operation, Request


async def list_kinds(req: Request) -> tuple[int, dict[str, Any]]:
    return 200, req.services.providers.kinds()


_SOURCE = obj(
    {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "secret": {
            "type": "string",
            "enum": ["minted", "provider", "none"],
            "description": "Where the signing secret comes from: minted here, pasted from the provider, "
            "or none (trust is the URL).",
        },
        "plugin": {"type": "string", "description": "The plugin that provides the kind."},
        "trust": {
            "anyOf": [
                obj(
                    {
                        "field": {
                            "type": "string",
                            "description": "The key of the list in a trust setting (logins, actor_ids).",
                        },
                        "label": {"type": "string", "description": "What one entry is (GitHub login)."},
                        "case_insensitive": {"type": "boolean"},
                        "matches": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "The match modes offered, the default first.",
                        },
                    },
                    ["field", "label", "case_insensitive", "matches"],
                ),
                {"type": "null"},
            ],
            "description": "The trusted actors a webhook of this kind requires (docs/routing.md); null: it "
            "takes none (no actors, or unsigned deliveries).",
        },
    },
    ["name", "description", "secret", "plugin", "trust"],
)
_CONNECTION = obj(
    {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "account_key_hint": {"type": "string", "description": "What the account key is for this kind."},
        "default_account_key": {"type": ["string", "null"]},
        "text_limit": {"type": "integer", "description": "The longest reply text, in characters."},
        "plugin": {"type": "string"},
    },
    ["name", "description", "account_key_hint", "text_limit", "plugin"],
)

SCHEMAS: dict[str, Any] = {
    "Kinds": obj(
        {
            "sources": {"type": "array", "items": _SOURCE},
            "connections": {"type": "array", "items": _CONNECTION},
        },
        ["sources", "connections"],
    ),
}

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/kinds",
        "listKinds",
        "The installed webhook source kinds and connection kinds, with their descriptions.",
        "kinds",
        list_kinds,
        "Kinds",
        errors=(400, 401),
    ),
)
