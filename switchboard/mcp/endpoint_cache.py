"""The endpoint a bearer token names, kept in this process so that the hot tool calls cost no read.

Every ``/mcp`` request is authenticated with its endpoint's ``sbk_`` token. Reading the endpoint's
row for each one was about a tenth of the server's time on a ``claim_next`` + ``complete`` loop
(bench/HISTORY.md, "Where the time goes, as each session saw it"), so the rows are kept here, by
token hash, and served from memory to the calls that a stale row cannot make wrong:

* **Expiry** is judged at every call, from the kept ``expires_at`` and the clock; a verdict is never
  kept.
* **Only the lifecycle verbs** (``claim``, ``claim_next``, ``heartbeat``, ``complete``, ``fail``,
  ``release``) are served from memory (``tool_calls.ToolCall.lifecycle``). A revocation
  dead-letters every open todo of the endpoint in its own transaction
  (``tenancy.revoke_endpoint``), and nothing makes a revoked endpoint's todo pending or claimed
  again (ingest, the operator's create and requeue all refuse it), so once a revocation has
  committed these verbs find nothing to act on, whether or not this process has heard of it yet.
  Every other request (the handshake, ``tools/list``, the GET stream, the reads, ``reply``, the
  connection verbs) reads the row as before.
* **A change is heard** through ``config_changes``: this process empties the cache when it
  changes an endpoint, webhook or route (``changing``, at commit), and on PostgreSQL when another
  process does (``NOTIFY switchboard_config``, heard by the app's ``LISTEN`` connection in
  ``ingest_config.listen_for_changes``). A row read while such a change was heard is not kept
  (it may predate the change). Revocations made here also ``forget`` at once
  (``Services.revocation_listeners``).
* **What no notification reaches** (the CLI on SQLite, a notification still in flight or lost
  while the ``LISTEN`` connection reconnected) is caught by the revocation pass, which runs every
  second and re-reads the rows of every kept endpoint (``McpService.sweep_revoked``).

Unknown tokens are not kept (an endpoint vended by another process must work on its first call),
and neither are endpoints that are not live when read.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from switchboard import bearers, config_changes, tenancy
from switchboard.db import Database
from switchboard.ids import token_hash
from switchboard.models import Endpoint

# Tokens whose endpoint one process keeps; beyond it the oldest entry goes.
CACHE_ENTRIES = 10_000
# The tool calls a cached row may serve (see the module's docstring for why these).
LIFECYCLE_VERBS = frozenset({"claim", "claim_next", "heartbeat", "complete", "fail", "release"})


class EndpointCache:
    """Live endpoints by token hash, for this process (see the module's docstring)."""

    def __init__(self, max_entries: int = CACHE_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: dict[str, Endpoint] = {}
        self._generation = config_changes.generation()
        # How many lookups were answered here, and how many read the database (tests, tuning).
        self.hits = 0
        self.reads = 0

    async def endpoint(
        self, db: Database, token: str, *, cached: bool, now: datetime | None = None
    ) -> Endpoint | None:
        """The live endpoint ``token`` names, or None (unknown, revoked, expired). ``cached``: the
        request may be served from memory (``tool_calls.ToolCall.lifecycle``); otherwise the row is read (and
        kept for the next lifecycle call)."""
        if not token.startswith("sbk_"):
            return None
        key = token_hash(token)
        self._catch_up()
        endpoint = self._entries.get(key) if cached else None
        if endpoint is not None:
            self.hits += 1
        else:
            endpoint = await self._read(db, key)
        return endpoint if endpoint is not None and tenancy.endpoint_is_live(endpoint, now) else None

    async def _read(self, db: Database, key: str) -> Endpoint | None:
        generation = self._generation
        endpoint = await bearers.endpoint_by_hash(db, key)
        self.reads += 1
        self._catch_up()
        if endpoint is None or not tenancy.endpoint_is_live(endpoint):
            self._entries.pop(key, None)
        elif generation == self._generation:
            if len(self._entries) >= self.max_entries and key not in self._entries:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = endpoint
        return endpoint

    def endpoint_ids(self) -> set[str]:
        """The ids of the endpoints kept now (the revocation pass re-reads them)."""
        self._catch_up()
        return {endpoint.id for endpoint in self._entries.values()}

    def forget(self, endpoint_ids: Iterable[str]) -> None:
        """Drop the entries of these endpoints (revoked, expired or gone)."""
        gone = set(endpoint_ids)
        if gone:
            for key in [k for k, e in self._entries.items() if e.id in gone]:
                del self._entries[key]

    def _catch_up(self) -> None:
        current = config_changes.generation()
        if current != self._generation:
            self._entries.clear()
            self._generation = current
