from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import func, inspect, select

from muster_api.db.engine import create_engine
from muster_api.db.migrate import alembic_config, current_revision, downgrade, head_revision, upgrade
from muster_api.db.models import metadata
from muster_api.errors import MigrationError
from muster_api.mesh.search import outside_metadata
from muster_api.mesh.tables import agents, inbox, messages
from muster_api.settings import Settings

pytestmark = pytest.mark.anyio


def test_single_linear_head() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert len(script.get_heads()) == 1
    assert len(script.get_bases()) == 1
    for rev in script.walk_revisions():
        assert not rev.is_merge_point, f"{rev.revision} merges branches: keep the chain linear"


async def test_upgrade_downgrade_upgrade_and_models_match(empty_db_url: str) -> None:
    engine = create_engine(Settings(database_url=empty_db_url).database_url)
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
                lambda c: compare_metadata(
                    MigrationContext.configure(c, opts={"compare_type": True, "include_name": outside_metadata}),
                    metadata,
                )
            )
        assert diff == [], f"models and migrations disagree: {diff}"
    finally:
        await engine.dispose()


_ALTER_AGENTS_STEP = """
import sqlalchemy as sa
from alembic import op

from muster_api.db.dialect import dialect_of

revision = "test_alter_agents"
down_revision = {down!r}
branch_labels = None
depends_on = None


def _recreate() -> str:
    # Where tables are altered by copy (SQLite), copy even for a column SQLite could add in place.
    return "always" if dialect_of(op.get_bind()).batch_migrations else "auto"


def upgrade() -> None:
    with op.batch_alter_table("mesh_agents", recreate=_recreate()) as batch:
        batch.add_column(sa.Column("test_note", sa.String(20), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("mesh_agents", recreate=_recreate()) as batch:
        batch.drop_column("test_note")
"""


async def test_altering_a_table_keeps_the_rows_that_reference_it(db_url: str, tmp_path: Path) -> None:
    """A migration that rebuilds ``mesh_agents`` must not cascade into ``mesh_inbox``."""
    (tmp_path / "test_alter_agents.py").write_text(_ALTER_AGENTS_STEP.format(down=head_revision()))
    engine = create_engine(Settings(database_url=db_url).database_url)
    now = datetime.now(UTC)
    try:
        await upgrade(engine)
        async with engine.begin() as conn:
            await conn.execute(agents.insert(), [_agent_row(f"a{i}", now) for i in range(3)])
            await conn.execute(
                messages.insert(),
                [
                    {"message_id": f"m{i}", "sender": "a0", "body": "hi", "thread_id": None, "sent_at": now}
                    for i in range(5)
                ],
            )
            await conn.execute(
                inbox.insert(), [{"recipient": f"a{i % 3}", "seq": i + 1, "message_id": f"m{i}"} for i in range(5)]
            )
        await upgrade(engine, "heads", versions=[tmp_path])
        async with engine.connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(inbox))).scalar_one() == 5
            assert (await conn.execute(select(func.count()).select_from(agents))).scalar_one() == 3
            columns = await conn.run_sync(lambda c: {col["name"] for col in inspect(c).get_columns("mesh_agents")})
        assert "test_note" in columns
        await downgrade(engine, head_revision(), versions=[tmp_path])
        async with engine.connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(inbox))).scalar_one() == 5
    finally:
        await engine.dispose()


def _agent_row(agent_id: str, now: datetime) -> dict[str, object]:
    return {
        "agent_id": agent_id,
        "token_hash": f"hash-{agent_id}",
        "role": None,
        "repo": None,
        "caps": [],
        "status": "",
        "ttl_seconds": 60,
        "last_seen_at": now,
        "status_since": now,
        "expires_at": now + timedelta(seconds=60),
        "last_seq": 0,
        "read_cursor": 0,
        "floor_seq": 0,
    }


_ORPHAN_STEP = """
from alembic import op

revision = "test_orphan"
down_revision = {down!r}
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("INSERT INTO mesh_messages (message_id, sender, body, sent_at) VALUES ('m1', 'a', 'b', '2026-01-01')")
    op.execute("INSERT INTO mesh_inbox (recipient, seq, message_id) VALUES ('nobody', 1, 'm1')")


def downgrade() -> None:
    pass
"""


async def test_a_sqlite_migration_that_breaks_a_foreign_key_is_rolled_back(tmp_path: Path) -> None:
    """Foreign keys are off while the chain runs on SQLite: what they would have refused is found before the commit.
    (PostgreSQL keeps them on and refuses the row itself.)"""
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "test_orphan.py").write_text(_ORPHAN_STEP.format(down=head_revision()))
    engine = create_engine(Settings(database_url=f"sqlite:///{tmp_path / 'muster.db'}").database_url)
    try:
        await upgrade(engine)
        with pytest.raises(MigrationError, match="mesh_inbox"):
            await upgrade(engine, "heads", versions=[steps])
        assert await current_revision(engine) == head_revision()
        async with engine.connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(inbox))).scalar_one() == 0
    finally:
        await engine.dispose()
