"""The ``switchboard`` command: the instance operator's tool, working directly on the database.

It acts on any owner scope. Tokens and secrets are printed once, at the moment they are made, and
never again; secrets going in are read from stdin or a hidden prompt, never from an argument.

``group`` holds the click group ``main``; ``output`` the shared printing and the one-line error;
``runner`` opens the configured database for one command; ``inputs`` reads secrets and owner
scopes; ``trust`` turns the trusted-actor flags into a setting. Each other module registers one
noun's commands on the group, and importing them here, once, is what registers them.
"""

from __future__ import annotations

from switchboard.cli import (
    connections,
    endpoints,
    humans,
    instance,
    plugin_new,
    quarantine,
    routes,
    rules,
    teams,
    todos,
    webhooks,
)
from switchboard.cli.group import main

# Importing a command module registers its commands on `main`; naming the modules here says so
# (and keeps the imports from reading as unused).
COMMAND_MODULES = (
    instance,
    humans,
    teams,
    endpoints,
    webhooks,
    routes,
    rules,
    quarantine,
    connections,
    todos,
    plugin_new,
)

__all__ = ["COMMAND_MODULES", "main"]
