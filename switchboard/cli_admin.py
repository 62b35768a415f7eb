"""Admin commands on the configured database: humans, teams, endpoints, webhooks, connections, todos."""

from __future__ import annotations
