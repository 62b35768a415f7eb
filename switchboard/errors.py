"""One error type for the whole core, with the stable codes that every surface shows.

The CLI prints ``code: message`` and exits non-zero, the API answers JSON with the mapped status,
and MCP returns a tool error. Messages never carry a secret.
"""

from __future__ import annotations

from typing import Any

HTTP_STATUS = {
    "invalid_argument": 400,
    "invalid_body": 400,
    "unauthorized": 401,
    "signature_invalid": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "encryption_required": 409,
    "payload_too_large": 413,
    "rate_limited": 429,
    "unavailable": 503,
}


class SwitchboardError(Exception):
    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.extra = extra

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 400)

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.extra}


def invalid(message: str) -> SwitchboardError:
    return SwitchboardError("invalid_argument", message)


def not_found(what: str) -> SwitchboardError:
    return SwitchboardError("not_found", f"{what} not found")


def conflict(message: str) -> SwitchboardError:
    return SwitchboardError("conflict", message)
