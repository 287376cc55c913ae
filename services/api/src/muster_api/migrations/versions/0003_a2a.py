"""A2A: remote call handles, held by the instance following them (owner + lease).

Revision ID: 0003_a2a
Revises: 0002_mesh
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from muster_api.db.schema import JSONDocument, UTCDateTime

revision: str = "0003_a2a"
down_revision: str | None = "0002_mesh"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "a2a_calls",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("agent", sa.String(200), nullable=False),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("task_id", sa.String(200), nullable=True),
        sa.Column("context_id", sa.String(200), nullable=True),
        sa.Column("dialect", sa.String(40), nullable=True),
        sa.Column("state", sa.String(40), nullable=False),
        sa.Column("polls", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("done", sa.Boolean(), nullable=False),
        sa.Column("result", JSONDocument(), nullable=True),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_a2a_calls"),
    )
    op.create_index("ix_a2a_calls_done", "a2a_calls", ["done"])
    op.create_index("ix_a2a_calls_done_lease", "a2a_calls", ["done", "lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_a2a_calls_done_lease", table_name="a2a_calls")
    op.drop_index("ix_a2a_calls_done", table_name="a2a_calls")
    op.drop_table("a2a_calls")
