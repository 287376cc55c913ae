"""Dispatch: runs (claimed by workers with owner + lease), their journals, controls and conversation snapshots.

Revision ID: 0004_dispatch
Revises: 0003_a2a
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from muster_api.db.schema import JSONDocument, UTCDateTime

revision: str = "0004_dispatch"
down_revision: str | None = "0003_a2a"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dispatch_runs",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("agent", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("workspace", sa.String(255), nullable=False),
        sa.Column("active_workspace", sa.String(255), nullable=True),
        sa.Column("request", JSONDocument(), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("deadline_s", sa.Float(), nullable=True),
        sa.Column("selected", sa.String(200), nullable=True),
        sa.Column("attempts", JSONDocument(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("usage", JSONDocument(), nullable=True),
        sa.Column("error", JSONDocument(), nullable=True),
        sa.Column("conversation", sa.String(200), nullable=True),
        sa.Column("queued_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("worker", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_dispatch_runs"),
    )
    op.create_index("ix_dispatch_runs_status_id", "dispatch_runs", ["status", "id"])
    op.create_index("ix_dispatch_runs_agent_id", "dispatch_runs", ["agent", "id"])
    op.create_index("ix_dispatch_runs_active_workspace", "dispatch_runs", ["active_workspace"], unique=True)
    op.create_index("ix_dispatch_runs_idempotency_key", "dispatch_runs", ["idempotency_key"], unique=True)
    op.create_table(
        "dispatch_events",
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("at", sa.String(40), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("scope", JSONDocument(), nullable=False),
        sa.Column("event", JSONDocument(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq", name="pk_dispatch_events"),
    )
    op.create_table(
        "dispatch_controls",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_dispatch_controls"),
    )
    op.create_index("ix_dispatch_controls_run_id", "dispatch_controls", ["run_id"])
    op.create_table(
        "dispatch_conversations",
        sa.Column("harness", sa.String(200), nullable=False),
        sa.Column("conversation", sa.String(200), nullable=False),
        sa.Column("captured_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("harness", "conversation", name="pk_dispatch_conversations"),
    )
    op.create_table(
        "dispatch_conversation_files",
        sa.Column("harness", sa.String(200), nullable=False),
        sa.Column("conversation", sa.String(200), nullable=False),
        sa.Column("path", sa.String(1000), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("harness", "conversation", "path", name="pk_dispatch_conversation_files"),
    )


def downgrade() -> None:
    op.drop_table("dispatch_conversation_files")
    op.drop_table("dispatch_conversations")
    op.drop_index("ix_dispatch_controls_run_id", table_name="dispatch_controls")
    op.drop_table("dispatch_controls")
    op.drop_table("dispatch_events")
    op.drop_index("ix_dispatch_runs_idempotency_key", table_name="dispatch_runs")
    op.drop_index("ix_dispatch_runs_active_workspace", table_name="dispatch_runs")
    op.drop_index("ix_dispatch_runs_agent_id", table_name="dispatch_runs")
    op.drop_index("ix_dispatch_runs_status_id", table_name="dispatch_runs")
    op.drop_table("dispatch_runs")
