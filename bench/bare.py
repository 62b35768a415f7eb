"""The ingest ceiling: a bare aiohttp handler that reads the body and answers 202.

The anchor row of ``bench/ingest.py``: the same framework, the same senders and the same signed
bodies as the Switchboard rows, with nothing behind the route (no verification, no database), so
the ratio of the two is what Switchboard's work costs. Run in its own process exactly as the
server is (``python -m bench.bare`` with ``SWITCHBOARD_HOST``/``SWITCHBOARD_PORT``), with
aiohttp's defaults (no access log unless logging is configured, which it is not here).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The shape of Switchboard's answer, so the senders parse a body of the same kind.
ANSWER = {"todos": [], "created": 0, "verified": False, "trust_mode": "bare", "disposition": "bare"}


async def accept(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response(ANSWER, status=202)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def make_app(handler: Handler = accept) -> web.Application:
    """The anchor's app: ``handler`` on the ingest route (``bench.bare_store`` passes its own)."""
    app = web.Application(client_max_size=5 * 1024 * 1024)
    app.router.add_post("/webhooks/{ingest_token}", handler)
    app.router.add_get("/healthz", healthz)
    return app


def serve(app: web.Application) -> None:
    """Run ``app`` as the benchmarks start a server (``SWITCHBOARD_HOST``/``SWITCHBOARD_PORT``)."""
    host = os.environ.get("SWITCHBOARD_HOST", "127.0.0.1")
    port = int(os.environ.get("SWITCHBOARD_PORT", "8080"))
    web.run_app(app, host=host, port=port, print=None, handle_signals=True, shutdown_timeout=5)


def main() -> None:
    serve(make_app())


if __name__ == "__main__":
    main()
