"""Mesh: delivery receipts on each inbox entry (woken, read, acknowledged: NULL until it first happens), and until
when a reader follows each agent's inbox (``mesh_agents.followed_until``).

Revision ID: 0009_receipts_inbox_receipts
Revises: 0008_people_threads

Stored needs no column: an entry is stored with its message, at the message's ``sent_at``. Nullable columns without a
default: adding them rewrites no row on either database, and a send writes none of them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from muster_api.db.schema import UTCDateTime

revision: str = "0009_receipts_inbox_receipts"
down_revision: str | None = "0008_people_threads"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

COLUMNS = ("woken_at", "read_at", "acked_at")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("mesh_inbox", sa.Column(name, UTCDateTime(), nullable=True))
    op.add_column("mesh_agents", sa.Column("followed_until", UTCDateTime(), nullable=True))


def downgrade() -> None:
    # Dropped one by one: SQLite (3.35+) drops a plain column in place, without the batch copy that would drop the
    # search index's triggers.
    op.drop_column("mesh_agents", "followed_until")
    for name in reversed(COLUMNS):
        op.drop_column("mesh_inbox", name)
