from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from muster_api.db.engine import create_engine
from muster_api.db.migrate import alembic_config, current_revision, downgrade, head_revision, upgrade
from muster_api.db.models import metadata
from muster_api.settings import Settings

pytestmark = pytest.mark.anyio


def test_single_linear_head() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert len(script.get_heads()) == 1
    assert len(script.get_bases()) == 1
    for rev in script.walk_revisions():
        assert not rev.is_merge_point, f"{rev.revision} merges branches: keep the chain linear"


async def test_upgrade_downgrade_upgrade_and_models_match(db_url: str) -> None:
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        await upgrade(engine)
        assert await current_revision(engine) == head_revision()
        await downgrade(engine, "base")
        assert await current_revision(engine) is None
        async with engine.connect() as conn:
            leftover = await conn.run_sync(lambda c: set(inspect(c).get_table_names()) - {"alembic_version"})
        assert leftover == set(), "downgrade to base must remove every table"
        await upgrade(engine)
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda c: compare_metadata(MigrationContext.configure(c, opts={"compare_type": True}), metadata)
            )
        assert diff == [], f"models and migrations disagree: {diff}"
    finally:
        await engine.dispose()
