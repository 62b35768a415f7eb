"""Test helpers for Switchboard and for provider plugins, shipped in the wheel.

Everything a provider's tests need to exercise it as Switchboard runs it, without the core's own
``tests/`` folder:

* stand-in provider APIs on 127.0.0.1 over real TLS that record every request (:class:`FakeProvider`),
  and the production outbound client trusting their CA (:func:`guarded_client`);
* deliveries signed the way GitHub, Gitea/Forgejo, Slack, Stripe and Cairn sign them
  (:func:`github_headers`, …), posted to a running app (:func:`post`);
* the world a test needs, made through the same functions as the CLI (:func:`make_webhook`,
  :func:`vend`, :func:`claimed_todo`, …), and what was stored (:func:`counts`, :func:`events`);
* an agent on the official MCP SDK client (:func:`connect`);
* a real ``switchboard serve`` process configured by settings (:class:`ServeProcess`);
* a migrated database per test on SQLite or PostgreSQL (``SWITCHBOARD_TEST_DATABASE_URL``).

The pytest fixtures built on these live in :mod:`switchboard.testing.pytest_plugin`, which pytest
loads by itself once switchboard is installed; this package imports without pytest. Nothing in
switchboard outside this package imports it: it is for tests only.
"""

from __future__ import annotations

from switchboard.services import Services
from switchboard.testing.database import (
    TEST_DATABASE_ENV,
    TEST_ENCRYPTION_KEY,
    Statements,
    engine_name,
    postgres_url,
    watch_statements,
)
from switchboard.testing.mcp_client import (
    MCP_ACCEPT,
    MCP_INITIALIZE,
    Agent,
    ChannelListener,
    ChannelParams,
    connect,
    http_client,
    open_raw_session,
)
from switchboard.testing.providers import FakeProvider, FakeProviders, Recorded, Scripted, StalledHost
from switchboard.testing.serve import (
    CliRun,
    ServeProcess,
    ServeProcesses,
    free_port,
    serve_env,
    serve_process,
)
from switchboard.testing.signing import (
    cairn_headers,
    gitea_headers,
    github_form,
    github_headers,
    hexmac,
    now_rfc3339,
    slack_headers,
    stripe_headers,
)
from switchboard.testing.tls import LoopbackTLS, guarded_client, make_tls, tls
from switchboard.testing.world import (
    PROVIDER_SECRETS,
    add_todo,
    cairn_address,
    claimed_todo,
    counts,
    events,
    forge_address,
    human_and_endpoint,
    make_webhook,
    post,
    slack_address,
    todo,
    todo_payload,
    ui_login,
    vend,
)

__all__ = [
    "MCP_ACCEPT",
    "MCP_INITIALIZE",
    "PROVIDER_SECRETS",
    "TEST_DATABASE_ENV",
    "TEST_ENCRYPTION_KEY",
    "Agent",
    "ChannelListener",
    "ChannelParams",
    "CliRun",
    "FakeProvider",
    "FakeProviders",
    "LoopbackTLS",
    "Recorded",
    "Scripted",
    "ServeProcess",
    "ServeProcesses",
    "Services",
    "StalledHost",
    "Statements",
    "add_todo",
    "cairn_address",
    "cairn_headers",
    "claimed_todo",
    "connect",
    "counts",
    "engine_name",
    "events",
    "forge_address",
    "free_port",
    "gitea_headers",
    "github_form",
    "github_headers",
    "guarded_client",
    "hexmac",
    "http_client",
    "human_and_endpoint",
    "make_tls",
    "make_webhook",
    "now_rfc3339",
    "open_raw_session",
    "post",
    "postgres_url",
    "serve_env",
    "serve_process",
    "slack_address",
    "slack_headers",
    "stripe_headers",
    "tls",
    "todo",
    "todo_payload",
    "ui_login",
    "vend",
    "watch_statements",
]
