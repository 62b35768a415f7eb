"""A real browser for the web UI's tests: Debian's Chromium (``/usr/bin/chromium``) driven by
Playwright, never a browser Playwright downloads itself (``playwright install`` is not used).

``scripts/setup`` installs the Debian package where it may (root, as in CI). Where it is missing
the browser tests skip and say why, except under CI (``CI=true``), where a missing browser fails
them: a green CI must have run them.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.async_api import Browser

CHROMIUM = "/usr/bin/chromium"
# Headless in a container as root, with no network of its own to talk to: no sandbox (root), no GPU,
# and none of the background traffic (updates, sync, QUIC probes) a desktop browser starts.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def missing() -> str | None:
    """Why the browser cannot run here, or None when it can."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (apt-get install chromium; scripts/setup does it as root)"
    return None


def required() -> bool:
    """Under CI the browser tests must run: a missing browser is a failure there, not a skip."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless Chromium for the length of the block."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=list(CHROMIUM_ARGS), headless=True
        )
        try:
            yield browser
        finally:
            await browser.close()
