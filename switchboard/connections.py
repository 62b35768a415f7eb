"""Connections: an owner's outbound credentials, which agents use through ``reply`` and never see.

Every function takes an ``Owner`` (the scope acting) or None (the instance operator, from the CLI,
acting on any scope). A connection outside the acting scope is ``not_found``: existence is not
revealed across scopes. The secret is sealed by the vault and bound to its row; it is write-only,
so no function here returns it, and surfaces show the keyed fingerprint instead.

Humans reach connections through the operator API and the web UI; ``authorize``,
``check_can_manage`` and ``connections_for_human`` apply the team rule there: a team's owners and
admins manage its connections, members see names, kinds, account keys and fingerprints only.
"""

from __future__ import annotations

import enum
import json
import logging
import re
from collections.abc import Mapping
from typing import Any, Protocol

from sqlalchemy import ColumnElement, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard import outbound
from switchboard.db import rfc3339, utcnow
from switchboard.errors import SwitchboardError, conflict, invalid, not_found
from switchboard.ids import new_id
from switchboard.models import Connection, Endpoint, Membership
from switchboard.plugins import UnknownKind
from switchboard.provider import CheckResult, ConnectionCheck, ConnectionKind
from switchboard.services import Services
from switchboard.tenancy import Owner, can_manage, can_see, owner_label
from switchboard.vault import VaultError, binding

log = logging.getLogger("switchboard.connections")

NAME_LIMIT = 100
SECRET_LIMIT = 4096
TARGETS_LIMIT = 100
# Each slug is looked up inside the connection's write transaction: an unbounded list held the
# database's writer, and every other tenant's writes, for as long as it took.
ENDPOINTS_LIMIT = 1000
TARGET_RE = re.compile(r"[A-Za-z0-9._/*?\[\]!-]{1,200}")
CONFIG_LIMIT = 8192
# Deeper config is refused before it is encoded: the column's encoder (orjson, then the standard
# library) recurses, and a config nested as deep as the request parser takes ran it out of stack.
CONFIG_DEPTH = 64


class _Unset(enum.Enum):
    """The default of an ``update_connection`` argument left out (None means "clear it")."""

    UNSET = enum.auto()


_UNSET = _Unset.UNSET


def _scope(owner: Owner) -> ColumnElement[bool]:
    if owner.human_id is not None:
        return Connection.owner_human_id == owner.human_id
    return Connection.owner_team_id == owner.team_id


async def _view(s: AsyncSession, c: Connection, *, full: bool = True) -> dict[str, Any]:
    owner = Owner.of(c)
    view: dict[str, Any] = {
        "id": c.id,
        "owner": await owner_label(s, owner),
        "owner_id": owner.id,
        "kind": c.kind,
        "name": c.name,
        "account_key": c.account_key,
        "fingerprint": c.fingerprint,
    }
    if not full:
        return view
    slugs: list[str] = []
    if c.endpoints:
        rows = await s.execute(select(Endpoint.id, Endpoint.slug).where(Endpoint.id.in_(c.endpoints)))
        by_id = {eid: slug for eid, slug in rows.all()}
        slugs = [by_id[e] for e in c.endpoints if e in by_id]
    last = c.last_test
    view.update(
        targets=list(c.targets) if c.targets else None,
        endpoints=slugs if c.endpoints else None,
        config=dict(c.config or {}),
        last_test=dict(last) if last else None,
        blocked_until=rfc3339(c.blocked_until),
        created_at=rfc3339(c.created_at),
        updated_at=rfc3339(c.updated_at),
    )
    return view


def _kind(services: Services, kind: str) -> ConnectionKind:
    try:
        return services.providers.connection(kind)
    except UnknownKind:
        known = ", ".join(sorted(services.providers.connections)) or "none installed"
        raise invalid(f"unknown connection kind {kind!r} (known: {known})") from None


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise invalid("name must not be empty")
    name = name.strip()
    if len(name) > NAME_LIMIT or not name.isprintable():
        raise invalid(f"name must be one line of at most {NAME_LIMIT} printable characters")
    return name


def _check_secret(secret: object) -> str:
    if not isinstance(secret, str) or not secret.strip():
        raise invalid("the secret must not be empty")
    secret = secret.strip()
    if len(secret) > SECRET_LIMIT or any(c.isspace() or not c.isprintable() for c in secret):
        raise invalid(f"the secret must be at most {SECRET_LIMIT} characters with no spaces")
    return secret


def _account_key(kind: ConnectionKind, account_key: object) -> str:
    if account_key is None or (isinstance(account_key, str) and not account_key.strip()):
        if kind.default_account_key is None:
            raise invalid(f"a {kind.name} connection needs an account key")
        account_key = kind.default_account_key
    if not isinstance(account_key, str) or len(account_key) > 300:
        raise invalid("the account key must be text of at most 300 characters")
    try:
        return kind.normalize_account_key(account_key.strip())
    except ValueError as exc:
        raise invalid(f"account key for {kind.name}: {exc}") from None


def _targets(targets: object) -> list[str] | None:
    if targets is None:
        return None
    if isinstance(targets, str) or not isinstance(targets, list | tuple):
        raise invalid("targets must be a list of globs")
    if not targets:
        # Read as "no allowlist" before, which serves every target: the opposite of a list that
        # names none. Leaving it out (or null) is how to ask for that.
        raise invalid("targets must name at least one glob; leave it out (or null) to allow every target")
    if len(targets) > TARGETS_LIMIT:
        raise invalid(f"at most {TARGETS_LIMIT} targets")
    out: list[str] = []
    for t in targets:
        if not isinstance(t, str) or not TARGET_RE.fullmatch(t):
            raise invalid(f"target {t!r} must be a glob of letters, digits and . _ / - * ? [ ] !")
        if t not in out:
            out.append(t)
    return out or None


async def _endpoints(s: AsyncSession, owner: Owner, endpoints: object) -> list[str] | None:
    """Endpoint slugs (or ids) to ids, each in the connection's own scope."""
    if endpoints is None:
        return None
    if isinstance(endpoints, str) or not isinstance(endpoints, list | tuple):
        raise invalid("endpoints must be a list of endpoint slugs")
    if not endpoints:
        # As for targets: an empty list is not "every endpoint of the owner".
        raise invalid(
            "endpoints must name at least one endpoint; leave it out (or null) to allow all of them"
        )
    if len(endpoints) > ENDPOINTS_LIMIT:
        raise invalid(f"at most {ENDPOINTS_LIMIT} endpoints")
    for ref in endpoints:
        if not isinstance(ref, str) or not ref or len(ref) > 63:
            raise invalid(f"endpoint {ref!r} is not an endpoint slug")
    refs: list[str] = list(dict.fromkeys(endpoints))
    # One read for the whole list: each ref a slug, or an id when it looks like one (a slug has no
    # underscore, so the two never meet).
    rows = await s.scalars(
        select(Endpoint).where(
            Endpoint.slug.in_([r for r in refs if not r.startswith("ep_")])
            | Endpoint.id.in_([r for r in refs if r.startswith("ep_")])
        )
    )
    found: dict[str, Endpoint] = {}
    for row in rows.all():
        found[row.id] = found[row.slug] = row
    ids: list[str] = []
    for ref in refs:
        ep = found.get(ref)
        if ep is None or Owner.of(ep) != owner:
            raise invalid(f"endpoint {ref!r} is not an endpoint of this connection's owner")
        if ep.id not in ids:
            ids.append(ep.id)
    return ids


def _config(config: object) -> dict[str, Any]:
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise invalid("config must be an object")
    if _depth(config) > CONFIG_DEPTH:
        raise invalid(f"config must be nested at most {CONFIG_DEPTH} levels deep")
    try:
        encoded = json.dumps(dict(config))
    except (TypeError, ValueError):
        raise invalid("config must be plain JSON") from None
    if len(encoded) > CONFIG_LIMIT:
        raise invalid(f"config must be at most {CONFIG_LIMIT} bytes of JSON")
    plain: dict[str, Any] = json.loads(encoded)
    return plain


def _depth(value: object) -> int:
    """How deep objects and arrays nest in ``value`` (walked without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping | list | tuple):
            deepest = max(deepest, level)
            if deepest > CONFIG_DEPTH:
                break
            stack.extend(
                (child, level + 1) for child in (item.values() if isinstance(item, Mapping) else item)
            )
    return deepest


def _require_key(services: Services) -> None:
    if not services.vault.has_key:
        raise SwitchboardError(
            "encryption_required",
            "connections cannot be stored without SWITCHBOARD_SECRET_ENCRYPTION_KEY "
            "(run `switchboard keygen` and restart with it set)",
        )


async def _row(
    s: AsyncSession, owner: Owner | None, connection_id: object, *, lock: bool = False
) -> Connection:
    if not isinstance(connection_id, str) or not connection_id:
        raise not_found("connection")
    query = select(Connection).where(Connection.id == connection_id)
    if owner is not None:
        query = query.where(_scope(owner))
    if lock:
        query = query.with_for_update()
    row = await s.scalar(query)
    if row is None:
        raise not_found(f"connection {connection_id!r}")
    return row


async def _conflict_reason(s: AsyncSession, owner: Owner, kind: str, name: str, account_lower: str) -> str:
    same_name = await s.scalar(select(Connection.id).where(_scope(owner), Connection.name == name))
    if same_name is not None:
        return f"a connection named {name!r} already exists in this scope"
    return f"this scope already has a {kind} connection for that account"


async def create_connection(
    services: Services,
    owner: Owner | None,
    *,
    kind: str,
    name: str,
    account_key: str | None,
    secret: str,
    targets: list[str] | None = None,
    endpoints: list[str] | None = None,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    if owner is None:
        raise invalid("a connection needs an owner: a human or a team")
    _require_key(services)
    ck = _kind(services, kind)
    name = _check_name(name)
    key = _account_key(ck, account_key)
    secret = _check_secret(secret)
    target_list = _targets(targets)
    config_dict = _config(config)
    now = utcnow()
    row_id = new_id("cn")
    ciphertext, key_id = services.vault.seal(secret, binding("connections", "secret", row_id))
    try:
        async with services.db.write() as s:
            row = Connection(
                id=row_id,
                kind=ck.name,
                name=name,
                account_key=key,
                account_key_lower=key.lower(),
                secret_ciphertext=ciphertext,
                secret_key_id=key_id,
                fingerprint=services.vault.fingerprint(secret),
                targets=target_list,
                endpoints=await _endpoints(s, owner, endpoints),
                config=config_dict,
                last_test=None,
                blocked_until=None,
                created_at=now,
                updated_at=now,
                **owner.columns(),
            )
            s.add(row)
            await s.flush()
            return await _view(s, row)
    except IntegrityError:
        async with services.db.read() as s:
            raise conflict(await _conflict_reason(s, owner, ck.name, name, key.lower())) from None


async def list_connections(services: Services, owner: Owner | None) -> list[dict[str, Any]]:
    async with services.db.read() as s:
        query = select(Connection).order_by(Connection.created_at, Connection.id)
        if owner is not None:
            query = query.where(_scope(owner))
        return [await _view(s, c) for c in (await s.scalars(query)).all()]


async def get_connection(services: Services, owner: Owner | None, connection_id: str) -> dict[str, Any]:
    async with services.db.read() as s:
        return await _view(s, await _row(s, owner, connection_id))


async def update_connection(
    services: Services,
    owner: Owner | None,
    connection_id: str,
    *,
    name: str | None = None,
    targets: list[str] | _Unset | None = _UNSET,
    endpoints: list[str] | _Unset | None = _UNSET,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Change the name, allowlists or config (``targets=None`` clears the allowlist; leaving an
    argument out keeps it). The secret changes only through ``rotate_connection``."""
    new_name = _check_name(name) if name is not None else None
    new_targets = _targets(targets) if targets is not _UNSET else _UNSET
    new_config = _config(config) if config is not None else None
    try:
        async with services.db.write() as s:
            row = await _row(s, owner, connection_id, lock=True)
            if new_name is not None:
                row.name = new_name
            if new_targets is not _UNSET:
                row.targets = new_targets
            if endpoints is not _UNSET:
                row.endpoints = await _endpoints(s, Owner.of(row), endpoints)
            if new_config is not None:
                row.config = new_config
            row.updated_at = utcnow()
            await s.flush()
            return await _view(s, row)
    except IntegrityError:
        raise conflict(f"a connection named {new_name!r} already exists in this scope") from None


async def rotate_connection(
    services: Services, owner: Owner | None, connection_id: str, secret: str
) -> dict[str, Any]:
    _require_key(services)
    secret = _check_secret(secret)
    async with services.db.write() as s:
        row = await _row(s, owner, connection_id, lock=True)
        row.secret_ciphertext, row.secret_key_id = services.vault.seal(
            secret, binding("connections", "secret", row.id)
        )
        row.fingerprint = services.vault.fingerprint(secret)
        # The facts (a Slack bot id) usually survive a rotation and echo suppression needs them;
        # the verdict does not, so the connection shows as untested until tested again.
        facts = dict((row.last_test or {}).get("facts") or {})
        row.last_test = {
            "ok": None,
            "error_class": None,
            "detail": "secret rotated; not tested since",
            "tested_at": None,
            "facts": facts,
        }
        row.updated_at = utcnow()
        await s.flush()
        return await _view(s, row)


async def delete_connection(services: Services, owner: Owner | None, connection_id: str) -> None:
    async with services.db.write() as s:
        await s.delete(await _row(s, owner, connection_id, lock=True))


class SealedSecret(Protocol):
    """A connection's sealed secret and the row it is bound to: the ORM row, or the reply path's
    Core read of it (``reply_statements.Candidate``)."""

    @property
    def id(self) -> str: ...
    @property
    def secret_ciphertext(self) -> bytes: ...
    @property
    def secret_key_id(self) -> str: ...


def open_secret(services: Services, row: SealedSecret) -> str:
    """The plaintext credential, for a dial only (never kept: each dial opens it again). Raises
    ``unavailable`` if it cannot be opened."""
    try:
        return services.vault.open(
            row.secret_ciphertext, row.secret_key_id, binding("connections", "secret", row.id)
        )
    except VaultError as exc:
        raise SwitchboardError("unavailable", f"the connection's secret cannot be opened: {exc}") from None


def _clean_detail(detail: str, secret: str) -> str:
    flat = " ".join(str(detail).split())
    # Belt and braces: a plugin must never echo the credential, but if it did it stops here. Before
    # the cut: a secret across it would otherwise keep its first characters.
    if secret:
        flat = flat.replace(secret, "[redacted]")
    return flat[:200]


async def test_connection(services: Services, owner: Owner | None, connection_id: str) -> dict[str, Any]:
    """One harmless authenticated read through the guarded client; the verdict is kept on the row."""
    async with services.db.read() as s:
        row = await _row(s, owner, connection_id)
    ck = _kind(services, row.kind)
    secret = open_secret(services, row)
    try:
        async with outbound.borrowed(services) as http:
            check = ConnectionCheck(
                http=http,
                kind=row.kind,
                account_key=row.account_key,
                secret=secret,
                settings=services.providers.settings_of(row.kind, services.settings),
            )
            # A test shares the pool with every tenant's replies: it takes one of its owner's
            # in-flight slots as a reply does, so a flood of tests cannot starve other tenants.
            async with http.slot(Owner.of(row).id):
                result = await ck.test(check)
    except outbound.OutboundRefused as exc:
        result = CheckResult(ok=False, error_class="network", detail=str(exc))
    except outbound.OutboundError:
        result = CheckResult(ok=False, error_class="network", detail="no answer from the provider")
    except Exception as exc:
        log.error("connection test of %s failed: %s", row.id, type(exc).__name__)
        result = CheckResult(ok=False, error_class="server", detail="the test call failed unexpectedly")
    tested_at = utcnow()
    verdict = {
        "ok": bool(result.ok),
        "error_class": None if result.ok else (result.error_class or "invalid"),
        "detail": _clean_detail(result.detail, secret),
        "tested_at": rfc3339(tested_at),
    }
    # Facts (a Slack bot id, which echo suppression trusts) are kept only from a passing test: a
    # token of the wrong workspace must not teach us another bot.
    learned = dict(result.facts) if result.ok else {}
    facts = {str(k): _clean_detail(str(v), secret) for k, v in learned.items()}
    async with services.db.write() as s:
        live = await s.get(Connection, row.id, with_for_update=True)
        # A rotation while the test ran: this verdict is about a secret the row no longer holds, and
        # must not replace its "not tested since" (nor teach it the old token's facts).
        if live is not None and live.secret_ciphertext == row.secret_ciphertext:
            kept = dict((live.last_test or {}).get("facts") or {})
            live.last_test = {**verdict, "facts": facts or kept}
    return verdict


# ---------------------------------------------------------------------------------------------
# The team rule for the operator API and the web UI (humans acting through a session or token).


async def check_can_manage(services: Services, human_id: str, owner: Owner) -> None:
    """Raise unless ``human_id`` may manage connections of ``owner``: ``not_found`` if the scope is
    not theirs at all, ``forbidden`` if they are a team member without owner/admin role."""
    async with services.db.read() as s:
        if not await can_see(s, human_id, owner):
            raise not_found("owner")
        if not await can_manage(s, human_id, owner):
            raise SwitchboardError("forbidden", "only the team's owners and admins manage its connections")


async def authorize(services: Services, human_id: str, connection_id: str, *, manage: bool = True) -> Owner:
    """The owner scope of a connection this human may see (``manage=False``) or manage; another
    scope's connection is ``not_found``, a member's attempt to manage is ``forbidden``."""
    async with services.db.read() as s:
        row = await _row(s, None, connection_id)
        owner = Owner.of(row)
        if not await can_see(s, human_id, owner):
            raise not_found(f"connection {connection_id!r}")
        if manage and not await can_manage(s, human_id, owner):
            raise SwitchboardError("forbidden", "only the team's owners and admins manage its connections")
    return owner


async def connections_for_human(services: Services, human_id: str) -> list[dict[str, Any]]:
    """Every connection of the human's own scope and teams: the full view (with ``can_manage:
    true``) where they manage it, names, kinds, account keys and fingerprints only elsewhere."""
    async with services.db.read() as s:
        memberships = await s.execute(
            select(Membership.team_id, Membership.role).where(Membership.human_id == human_id)
        )
        roles: dict[str, str] = {team_id: role for team_id, role in memberships.all()}
        rows = await s.scalars(
            select(Connection)
            .where((Connection.owner_human_id == human_id) | Connection.owner_team_id.in_(list(roles)))
            .order_by(Connection.created_at, Connection.id)
        )
        out = []
        for c in rows.all():
            manage = c.owner_human_id == human_id or roles.get(c.owner_team_id or "") in ("owner", "admin")
            out.append({**await _view(s, c, full=manage), "can_manage": manage})
        return out
