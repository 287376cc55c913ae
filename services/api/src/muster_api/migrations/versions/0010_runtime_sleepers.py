"""Dispatch: agents kept on the mesh between their runs, to be woken by a message (``wake = true``).

Revision ID: 0010_runtime_sleepers
Revises: 0009_receipts_inbox_receipts
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from muster_api.db.schema import UTCDateTime

revision: str = "0010_runtime_sleepers"
down_revision: str | None = "0009_receipts_inbox_receipts"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dispatch_sleepers",
        sa.Column("agent_id", sa.String(64), nullable=False),
        sa.Column("agent", sa.String(200), nullable=False),
        sa.Column("token", sa.String(200), nullable=True),
        sa.Column("last_wake_at", UTCDateTime(), nullable=True),
        sa.Column("pending", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("agent_id", name="pk_dispatch_sleepers"),
    )


def downgrade() -> None:
    op.drop_table("dispatch_sleepers")
