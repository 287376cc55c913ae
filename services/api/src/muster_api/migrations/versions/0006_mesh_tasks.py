"""Mesh: tasks with one owner (claimed atomically, fenced, bound to the holder's lease) and their history.

Revision ID: 0006_mesh_tasks
Revises: 0005_mesh_path_claims
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from muster_api.db.schema import UTCDateTime

revision: str = "0006_mesh_tasks"
down_revision: str | None = "0005_mesh_path_claims"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mesh_tasks",
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("poster", sa.String(64), nullable=False),
        sa.Column("to_agent", sa.String(64), nullable=True),
        sa.Column("role", sa.String(64), nullable=True),
        sa.Column("repo", sa.String(200), nullable=True),
        sa.Column("cap", sa.String(64), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("holder", sa.String(64), nullable=True),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", name="pk_mesh_tasks"),
    )
    op.create_index("ix_mesh_tasks_queue", "mesh_tasks", ["state", "priority", "created_at"])
    op.create_index("ix_mesh_tasks_holder", "mesh_tasks", ["holder"])
    op.create_table(
        "mesh_task_events",
        sa.Column("event_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("agent", sa.String(64), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("event_id", name="pk_mesh_task_events"),
    )
    op.create_index("ix_mesh_task_events_task_id", "mesh_task_events", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_mesh_task_events_task_id", table_name="mesh_task_events")
    op.drop_table("mesh_task_events")
    op.drop_index("ix_mesh_tasks_holder", table_name="mesh_tasks")
    op.drop_index("ix_mesh_tasks_queue", table_name="mesh_tasks")
    op.drop_table("mesh_tasks")
