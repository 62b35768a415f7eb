"""The server the HTTP benchmarks drive: plain ``switchboard serve``, configured by settings only.

Every benchmark sender shares 127.0.0.1, so the ingest flood guard (a token bucket per webhook,
``SWITCHBOARD_INGEST_RATE``/``SWITCHBOARD_INGEST_BURST``) would measure the limiter instead of the
service. ``bench.common.server_env`` turns it off the way an operator would, with
``SWITCHBOARD_INGEST_RATE=0``; nothing is patched. Run as ``python -m bench.serve`` with the usual
``SWITCHBOARD_*`` environment (the same as ``.venv/bin/switchboard serve``).

The one exception is ``bench.knockout``, which measures a step's cost by leaving it out: with
``BENCH_KNOCKOUT`` set (never by the other benchmarks), the steps it names are replaced first.
"""

from __future__ import annotations

import os


def main() -> None:
    from switchboard.cli import main as cli

    if os.environ.get("BENCH_KNOCKOUT"):
        from bench.knockout import apply_from_environment

        apply_from_environment()
    cli(["serve"], prog_name="switchboard")


if __name__ == "__main__":
    main()
