"""Mesh: each agent's last own call (``mesh_agents.active_at``), from which the roster's ``state`` is derived.

Revision ID: 0012_presence_active_at
Revises: 0011_notify_outbox

A nullable column without a default (adding it rewrites no row), then filled from ``last_seen_at``: the best the
rows stored before it can tell.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from muster_api.db.schema import UTCDateTime

revision: str = "0012_presence_active_at"
down_revision: str | None = "0011_notify_outbox"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("mesh_agents", sa.Column("active_at", UTCDateTime(), nullable=True))
    op.execute("UPDATE mesh_agents SET active_at = last_seen_at")


def downgrade() -> None:
    # A plain column dropped in place (SQLite 3.35+), without the batch copy that would drop the search triggers.
    op.drop_column("mesh_agents", "active_at")
