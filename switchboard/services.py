"""The service container every surface is handed: settings, database, vault, providers, metrics,
the guarded outbound client, and the listener lists through which a lower layer tells a higher one
what happened (todos became available; endpoints were revoked) without importing it.

This module sits below every surface (ingest, MCP, the API, the web UI, the CLI); ``app.py`` sits
above them all and is the only place that builds the aiohttp application.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web

from switchboard.db import Database
from switchboard.jq_sandbox import Sandbox
from switchboard.metrics import Metrics, standard
from switchboard.outbound import Outbound
from switchboard.plugins import Providers
from switchboard.plugins import load as load_providers
from switchboard.settings import Settings
from switchboard.vault import Vault

log = logging.getLogger("switchboard")

# A listener is told a list of ids after the transaction that produced them has committed.
Listener = Callable[[list[str]], Awaitable[object]]


@dataclass
class Services:
    settings: Settings
    db: Database
    vault: Vault
    providers: Providers
    metrics: Metrics = field(default_factory=standard)
    # The process's guarded HTTP client; the server sets it for its lifetime. A CLI command leaves
    # it unset and borrows a client for one call (``outbound.borrowed``).
    outbound: Outbound | None = None
    # Told the ids of todos that became available (created, requeued): the doorbell listens here.
    todo_listeners: list[Listener] = field(default_factory=list)
    # Told the same ids for the other processes (PostgreSQL: the doorbell's NOTIFY), unless the
    # statement that made the todos told them itself (``todos_created``'s ``published``).
    todo_publishers: list[Listener] = field(default_factory=list)
    # Told when endpoints were revoked in this process: the MCP sessions listen here to close at
    # once (other processes notice at their next revocation pass).
    revocation_listeners: list[Listener] = field(default_factory=list)
    # How many MCP sessions this process holds, per endpoint id: set by the MCP service while it
    # runs (read-only for the pages that show it); None where no MCP service runs (the CLI).
    live_sessions: Callable[[], Mapping[str, int]] | None = None
    # The routing rules' worker pool (docs/routing.md, "The sandbox"), made from the settings. It
    # starts no process until a rule runs; whoever runs the services closes it.
    sandbox: Sandbox = field(init=False)

    def __post_init__(self) -> None:
        self.sandbox = Sandbox.from_settings(self.settings)

    async def todos_created(self, todo_ids: list[str], *, published: bool = False) -> None:
        """Tell listeners about committed todos, and publishers unless ``published`` (their own
        statement already notified the other processes: ``todo_notices``). A listener's failure
        never loses a todo: the queue is the record and pull alone is complete, so it is logged
        and swallowed."""
        await self._tell(self.todo_listeners, todo_ids)
        if not published:
            await self._tell(self.todo_publishers, todo_ids)

    async def endpoints_revoked(self, endpoint_ids: list[str]) -> None:
        """Tell listeners that endpoints were revoked (their tokens are already refused)."""
        await self._tell(self.revocation_listeners, endpoint_ids)

    @staticmethod
    async def _tell(listeners: list[Listener], ids: list[str]) -> None:
        for listener in list(listeners):
            try:
                await listener(ids)
            except Exception:
                log.exception("listener %r failed", listener)


SERVICES = web.AppKey("services", Services)


def services_of(request_or_app: web.Request | web.Application) -> Services:
    app = request_or_app.app if isinstance(request_or_app, web.Request) else request_or_app
    return app[SERVICES]


def build_services(settings: Settings, providers: Providers | None = None) -> Services:
    """The services of a server or a CLI command. Loads the providers ``settings`` choose (unless
    given) and checks their kinds' settings: a bad one raises ConfigError, as a bad core one does."""
    providers = providers or load_providers(settings)
    providers.check_settings(settings)
    vault = Vault(settings.encryption_key)
    if not vault.has_key:
        log.warning(
            "no SWITCHBOARD_SECRET_ENCRYPTION_KEY: webhook signing secrets are stored in plaintext and "
            "connections cannot be created (run `switchboard keygen`)"
        )
    return Services(
        settings=settings,
        db=Database(settings.database_url),
        vault=vault,
        providers=providers,
    )
