"""(being built: see the open issues)"""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application) -> None:
    """Add this module's routes and lifetimes to the app."""
