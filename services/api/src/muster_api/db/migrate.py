"""Alembic, driven programmatically on the app's own AsyncEngine (no alembic.ini, no second URL)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from muster_api.db.dialect import dialect_of

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(connection: Connection | None = None, *, versions: Sequence[Path] = ()) -> Config:
    """The chain's configuration; ``versions`` adds directories of steps on top of it (tests add one)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if versions:
        locations = [MIGRATIONS_DIR / "versions", *versions]
        cfg.set_main_option("version_locations", " ".join(str(p) for p in locations))
        cfg.set_main_option("path_separator", "space")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migration chain must have one head, found {heads}")
    return heads[0]


async def _run(engine: AsyncEngine, fn: Callable[[Config], None], versions: Sequence[Path] = ()) -> None:
    async with dialect_of(engine).migrating(engine) as conn:
        await conn.run_sync(lambda sync_conn: fn(alembic_config(sync_conn, versions=versions)))


async def upgrade(engine: AsyncEngine, revision: str = "head", *, versions: Sequence[Path] = ()) -> None:
    await _run(engine, lambda cfg: command.upgrade(cfg, revision), versions)


async def downgrade(engine: AsyncEngine, revision: str = "base", *, versions: Sequence[Path] = ()) -> None:
    await _run(engine, lambda cfg: command.downgrade(cfg, revision), versions)


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as conn:
        return await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())
