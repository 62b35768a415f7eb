"""The schema's migrations (alembic, ``switchboard/migrations``): bring a database to head.

Apart from ``db`` so that the engine's module carries no migration machinery; alembic itself is
imported only when a migration runs (it takes ~0.15 s to import).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"


def head() -> str:
    """The revision ``upgrade`` brings a database to: the highest numbered migration script. Each
    script's revision is its four-digit number, in order (tests/test_migrations.py holds this to
    alembic's own reading of the scripts), which spares every CLI command alembic's import."""
    numbered = sorted(p.name[:4] for p in (MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    return numbered[-1]


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Run migrations up to ``revision`` (synchronous; call from a thread inside an event loop)."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)


async def upgrade_async(url: str) -> None:
    await asyncio.to_thread(upgrade, url)
