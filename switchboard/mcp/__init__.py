"""The agent surface: MCP over Streamable HTTP at ``/mcp`` (docs/agents.md), on the official SDK,
and the doorbell that pushes a hint into a live session when work lands ("The doorbell" there).

* ``tools``: one tool per granted verb (schema, validation, handler) and the SDK server.
* ``bridge``: aiohttp <-> ASGI, how a request reaches the SDK's transport.
* ``sessions``: the route, authentication, stateful sessions, their limits (per endpoint, per owner
  scope, per process) and the revocation pass.
* ``wire``: whether a tool result can be serialised, and its todo data as text when it cannot.
* ``doorbell``: rings, unicast across sessions and processes.

``app.py`` calls ``setup(app, services)`` and schedules the doorbell sweep and the revocation pass
with its other background jobs. The modules here import each other directly, never this package.
"""

from __future__ import annotations

from switchboard.mcp import doorbell
from switchboard.mcp.sessions import DOORBELL, MCP_SERVICE, REVOCATION_SWEEP_SECONDS, McpService, setup

__all__ = ["DOORBELL", "MCP_SERVICE", "REVOCATION_SWEEP_SECONDS", "McpService", "doorbell", "setup"]
