"""The server the HTTP benchmarks drive: ``switchboard serve`` itself, with the ingest flood guard off.

Every benchmark sender shares 127.0.0.1, so the per-client ingest rate limit (a flood guard, SPEC
§4 step 1) would measure the limiter instead of the service. When the settings have an
``ingest_rate`` field, the guard is turned off the way an operator would, with
``SWITCHBOARD_INGEST_RATE=0``, and this is plain ``switchboard serve``. Until then the app that the
CLI builds gets its limiter lifted (``switchboard.app.make_app`` wrapped before the CLI imports it).
Run as ``python -m bench.serve`` with the usual ``SWITCHBOARD_*`` environment.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def rate_is_a_setting() -> bool:
    from switchboard.settings import Settings

    return "ingest_rate" in Settings.model_fields


def lift_by_patching() -> None:
    """Wrap the app factory so every app it builds has the per-IP limiter opened wide."""
    try:
        import switchboard.app as app_module
        from switchboard.ingest import INGEST_LIMITER
    except ImportError as exc:
        raise SystemExit(f"bench.serve: cannot lift the ingest limiter ({exc}); see bench/serve.py") from None
    build = app_module.make_app

    def make_app(services: Any) -> Any:
        app = build(services)
        app[INGEST_LIMITER].configure(rate=1_000_000.0, burst=1_000_000.0)
        return app

    app_module.make_app = make_app


def main() -> None:
    if rate_is_a_setting():
        os.environ["SWITCHBOARD_INGEST_RATE"] = "0"
    else:
        lift_by_patching()
    # Imported after the patch, so a module-level import of make_app in the CLI sees it too.
    from switchboard.cli import main as cli

    cli(["serve"], prog_name="switchboard")


if __name__ == "__main__":
    sys.exit(main())
