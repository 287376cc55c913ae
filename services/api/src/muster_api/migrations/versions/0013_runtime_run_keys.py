"""Dispatch: a key per run for its MCP server (scoped to its agent), and a deferred wake kept as a row.

Revision ID: 0013_runtime_run_keys
Revises: 0012_presence_active_at
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from muster_api.db.schema import UTCDateTime

revision: str = "0013_runtime_run_keys"
down_revision: str | None = "0012_presence_active_at"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("dispatch_sleepers") as batch:
        batch.add_column(sa.Column("wake_due_at", UTCDateTime(), nullable=True))
    op.create_table(
        "dispatch_run_keys",
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("agent_id", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("key_hash", name="pk_dispatch_run_keys"),
    )
    op.create_index("ix_dispatch_run_keys_run_id", "dispatch_run_keys", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_dispatch_run_keys_run_id", table_name="dispatch_run_keys")
    op.drop_table("dispatch_run_keys")
    with op.batch_alter_table("dispatch_sleepers") as batch:
        batch.drop_column("wake_due_at")
