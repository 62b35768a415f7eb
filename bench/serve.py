"""The server the HTTP benchmarks drive: the app exactly as ``switchboard serve`` builds it.

One difference, and only for load from 127.0.0.1: the per-client-IP ingest rate limit (a flood
guard of 50 deliveries/s with a burst of 500, SPEC §4 step 1) is lifted, because every benchmark
sender shares one address and would otherwise measure the limiter instead of the service. Run as
``python -m bench.serve`` with the usual ``SWITCHBOARD_*`` environment.
"""

from __future__ import annotations

import logging

from aiohttp import web

from switchboard import db
from switchboard.app import make_app
from switchboard.ingest import INGEST_LIMITER
from switchboard.logs import RedactingAccessLogger, configure_logging
from switchboard.services import build_services
from switchboard.settings import ConfigError, load_settings


def main() -> None:
    try:
        settings = load_settings()
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    configure_logging(settings.log_level_number)
    db.upgrade(settings.database_url)
    services = build_services(settings)
    app = make_app(services)
    app[INGEST_LIMITER].configure(rate=1_000_000.0, burst=1_000_000.0)
    logging.getLogger("switchboard").info("bench server on http://%s:%s", settings.host, settings.port)
    web.run_app(
        app,
        host=settings.host,
        port=settings.port,
        print=None,
        access_log_class=RedactingAccessLogger,
        handle_signals=True,
        shutdown_timeout=10,
    )


if __name__ == "__main__":
    main()
