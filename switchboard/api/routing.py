"""The small framework every operator API route goes through: an ``Operation`` declares a route,
its query and body parameters and its response, and ``wrap`` turns it into an aiohttp handler.

The same declaration registers the route, validates the request (unknown query parameters and
body fields are refused, never ignored) and is read by ``openapi`` to document it, so the
document cannot drift from the code. Handlers get a checked ``Request`` and return
``(status, data)``; every failure they raise is turned into one JSON error shape here. Every
listing takes ``page_query()`` and answers a cursor page (``paged`` for the lists held in memory).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from aiohttp import web
from sqlalchemy.exc import IntegrityError

from switchboard.api.caller import Caller, Unauthorized, authenticate
from switchboard.db import is_unavailable
from switchboard.errors import SwitchboardError, invalid, not_found
from switchboard.paging import LIMIT_DEFAULT, LIMIT_MAX, page_of
from switchboard.sanitize import (
    DuplicateKey,
    finite_float,
    lone_surrogate,
    no_duplicate_keys,
    refuse_constant,
)
from switchboard.services import Services, services_of
from switchboard.todos import rfc3339
from switchboard.vault import EncryptionRequired, VaultError

log = logging.getLogger("switchboard.api")

PREFIX = "/api/v1"

T = TypeVar("T")


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # string | integer | boolean | array | object | any
    description: str = ""
    required: bool = False
    nullable: bool = False
    enum: tuple[str, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None
    # The longest string accepted (refused beyond it, never cut).
    max_length: int | None = None
    # The fewest items a list may hold: 1 where an empty list would be read as "left out" (a default
    # queue, no allowlist at all) and so widen what the caller asked for.
    min_items: int | None = None
    # The most items a list may hold (refused beyond it, before the handler reads any).
    max_items: int | None = None
    # The documented schema of an ``any`` field whose shape the handler checks itself, so that it
    # answers its own stable codes (a trust setting, a rule set) rather than ``invalid_argument``.
    shape: dict[str, Any] | None = None

    def schema(self) -> dict[str, Any]:
        base: dict[str, Any]
        if self.shape is not None:
            base = dict(self.shape)
        elif self.type == "array":
            base = {"type": "array", "items": {"type": "string"}}
        elif self.type == "any":
            base = {}
        else:
            base = {"type": self.type}
        if self.enum:
            base["enum"] = list(self.enum)
        if self.minimum is not None:
            base["minimum"] = self.minimum
        if self.maximum is not None:
            base["maximum"] = self.maximum
        if self.max_length is not None:
            base["maxLength"] = self.max_length
        if self.min_items is not None:
            base["minItems"] = self.min_items
        if self.max_items is not None:
            base["maxItems"] = self.max_items
        if self.nullable and "type" in base:
            base["type"] = [base["type"], "null"]
        if self.description:
            base["description"] = self.description
        return base


# The query parameter every listing shares; handlers pass it to ``Caller.read_scopes``.
TEAM_QUERY = Param("team", "string", "Only this team's scope (a team you belong to).")


def page_query(default: int = LIMIT_DEFAULT, maximum: int = LIMIT_MAX) -> tuple[Param, ...]:
    """The cursor parameters every listing takes (``paging``): ``before``, ``after``, ``limit``."""
    return (
        Param("before", "string", "The page of older rows: a page's `next_before` (an id)."),
        Param("after", "string", "The page of newer rows: a page's `next_after` (an id)."),
        Param("limit", "integer", f"At most this many (default {default}).", minimum=1, maximum=maximum),
    )


def paged(
    req: Request, key: str, rows: Sequence[T], id_of: Callable[[T], str], view: Callable[[T], Any]
) -> dict[str, Any]:
    """A listing held in memory as one cursor page, oldest first: ``{key: [...], "next_before",
    "next_after"}`` with each shown row passed through ``view``."""
    page = page_of(
        rows,
        id_of,
        before=req.query.get("before"),
        after=req.query.get("after"),
        limit=req.query.get("limit", LIMIT_DEFAULT),
    )
    return page.answer(key, [view(row) for row in page.rows])


@dataclass(frozen=True)
class Request:
    """What a handler gets: the caller, path parameters, a checked query and a checked body."""

    web: web.Request
    caller: Caller
    services: Services
    path: dict[str, str]
    query: dict[str, Any]
    body: dict[str, Any]


Handler = Callable[[Request], Awaitable[tuple[int, dict[str, Any]]]]


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    operation_id: str
    summary: str
    tag: str
    handler: Handler
    response: str
    status: int = 200
    query: tuple[Param, ...] = ()
    body: tuple[Param, ...] | None = None
    errors: tuple[int, ...] = (400, 401, 404)
    description: str = ""
    path_params: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path_params", tuple(re.findall(r"{(\w+)}", self.path)))


# ---------------------------------------------------------------------------------------------
# Validation


def _type_ok(param: Param, value: Any) -> bool:
    if value is None:
        return param.nullable
    if param.type == "string":
        ok = isinstance(value, str)
    elif param.type == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif param.type == "boolean":
        ok = isinstance(value, bool)
    elif param.type == "array":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    elif param.type == "object":
        ok = isinstance(value, dict)
    else:
        ok = True
    if ok and param.enum is not None:
        ok = value in param.enum
    if ok and param.type == "integer":
        ok = (param.minimum is None or value >= param.minimum) and (
            param.maximum is None or value <= param.maximum
        )
    if ok and param.type == "string" and param.max_length is not None:
        ok = len(value) <= param.max_length
    if ok and param.type == "array" and param.min_items is not None:
        ok = len(value) >= param.min_items
    if ok and param.type == "array" and param.max_items is not None:
        ok = len(value) <= param.max_items
    return ok


def _describe(param: Param) -> str:
    if param.enum:
        return "one of " + ", ".join(param.enum)
    # An ``any`` field is refused only for null when it is not nullable: say so, not "any JSON value".
    anything = "any JSON value" if param.nullable else "a JSON value other than null"
    noun = {"array": "a list of strings", "object": "a JSON object", "any": anything}.get(
        param.type, f"a{'n' if param.type[0] in 'aeiou' else ''} {param.type}"
    )
    if param.type == "integer" and (param.minimum is not None or param.maximum is not None):
        noun += f" between {param.minimum} and {param.maximum}"
    if param.type == "string" and param.max_length is not None:
        noun += f" of at most {param.max_length} characters"
    if param.type == "array" and param.min_items is not None:
        noun += f" with at least {param.min_items} item{'' if param.min_items == 1 else 's'}"
    if param.type == "array" and param.max_items is not None:
        noun += f" of at most {param.max_items} items"
    return noun + (" or null" if param.nullable else "")


def _no_nul(value: Any) -> bool:
    """Text fields end up in the database; PostgreSQL text cannot hold NUL, so refuse it up front."""
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, list):
        return all(_no_nul(v) for v in value)
    return True


async def _read_body(request: web.Request, params: tuple[Param, ...] | None) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        data: Any = {}
    else:
        try:
            data = json.loads(
                raw.decode("utf-8"),
                parse_constant=refuse_constant,
                parse_float=finite_float,
                object_pairs_hook=no_duplicate_keys,
            )
        except DuplicateKey as exc:
            raise SwitchboardError(
                "duplicate_key", f"the request body names the key {str(exc)[:100]!r} more than once"
            ) from None
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise SwitchboardError("invalid_body", "the request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise SwitchboardError("invalid_body", "the request body must be a JSON object")
    known = {p.name: p for p in params or ()}
    unknown = sorted(set(data) - set(known))
    if unknown:
        # A name may hold a lone surrogate (a "\ud800" escape): written back as its escape, since
        # no UTF-8 answer can carry it.
        names = ", ".join(unknown).encode("utf-8", "backslashreplace").decode("utf-8")
        raise invalid(f"unknown field(s): {names}")
    for param in known.values():
        if param.name not in data:
            if param.required:
                raise invalid(f"field {param.name!r} is required")
            continue
        if not _type_ok(param, data[param.name]):
            raise invalid(f"field {param.name!r} must be {_describe(param)}")
        if param.type in ("string", "array") and not _no_nul(data[param.name]):
            raise invalid(f"field {param.name!r} must not contain NUL characters")
        # Only an escape makes one (the body decoded as strict UTF-8); a field of a documented shape
        # (a rule set, a trust setting) is checked by its own reader, with its own code.
        if b"\\u" in raw and param.shape is None and lone_surrogate(data[param.name]):
            raise invalid(f"field {param.name!r} must not contain a lone surrogate (\\ud800-\\udfff)")
    return data


def _read_query(request: web.Request, params: tuple[Param, ...]) -> dict[str, Any]:
    known = {p.name: p for p in params}
    unknown = sorted(set(request.query) - set(known))
    if unknown:
        raise invalid(f"unknown query parameter(s): {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for name, param in known.items():
        values = request.query.getall(name, [])
        if not values:
            if param.required:
                raise invalid(f"query parameter {name!r} is required")
            continue
        if len(values) > 1:
            raise invalid(f"query parameter {name!r} given more than once")
        value: Any = values[0]
        if not _no_nul(value):
            raise invalid(f"query parameter {name!r} must not contain NUL characters")
        if param.type == "integer":
            # ASCII digits only: ``\d`` (and ``int``) also take other scripts' digits (U+FF15, a
            # full-width five), which the document's ``integer`` and the client's parser do not.
            if not re.fullmatch(r"-?[0-9]{1,9}", value):
                raise invalid(f"query parameter {name!r} must be {_describe(param)}")
            value = int(value)
        elif param.type == "boolean":
            if value not in ("true", "false"):
                raise invalid(f"query parameter {name!r} must be true or false")
            value = value == "true"
        if not _type_ok(param, value):
            raise invalid(f"query parameter {name!r} must be {_describe(param)}")
        out[name] = value
    return out


# ---------------------------------------------------------------------------------------------
# Responses


def dumps(data: Any) -> str:
    """JSON as every API response is written: UTF-8 text, datetimes in RFC 3339, and standard JSON
    only: a NaN or Infinity (in a todo stored before ingest kept such payloads as text, or in an
    agent's result) is written as null, never as a bare ``NaN`` token most parsers refuse."""
    try:
        return json.dumps(data, default=_json_default, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(data), default=_json_default, ensure_ascii=False, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return rfc3339(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _error(status: int, code: str, message: str, **extra: Any) -> web.Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return web.json_response(
        {"error": code, "message": message, **extra},
        status=status,
        headers=headers,
        dumps=dumps,
    )


def wrap(op: Operation) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The aiohttp handler for ``op``: authenticate, validate, call, and answer JSON either way."""

    async def handle(request: web.Request) -> web.StreamResponse:
        services = services_of(request)
        try:
            caller = await authenticate(request)
            query = _read_query(request, op.query)
            body = await _read_body(request, op.body)
            path = {name: request.match_info[name] for name in op.path_params}
            if not all(_no_nul(v) and len(v) <= 200 for v in path.values()):
                # No id, slug or handle looks like this: it names nothing.
                raise not_found("no such resource")
            status, data = await op.handler(Request(request, caller, services, path, query, body))
        except Unauthorized:
            return _error(401, "unauthorized", "send Authorization: Bearer sbo_… (a human's token)")
        except SwitchboardError as exc:
            return _error(exc.http_status, exc.code, exc.message, **exc.extra)
        except EncryptionRequired:
            return _error(409, "encryption_required", "no SWITCHBOARD_SECRET_ENCRYPTION_KEY is configured")
        except VaultError as exc:
            # A stored secret the configured key cannot open: the operator's problem, not the caller's.
            log.error("vault error on %s %s: %s", request.method, request.path, exc)
            return _error(503, "unavailable", "a stored secret cannot be opened with the configured key")
        except IntegrityError:
            # A concurrent request made the same thing first.
            return _error(409, "conflict", "a conflicting change was made at the same time; retry")
        except Exception as exc:
            # The database being away is a 503 the caller may retry; anything else is a bug (500).
            if not is_unavailable(exc):
                raise
            log.warning("database unavailable on %s %s: %s", request.method, request.path, type(exc).__name__)
            return _error(503, "unavailable", "the database is unavailable; retry shortly")
        return web.json_response(data, status=status, dumps=dumps, headers={"Cache-Control": "no-store"})

    return handle
