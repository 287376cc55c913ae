"""Notifications: the outbox of events and the deliveries made of them.

Revision ID: 0011_notify_outbox
Revises: 0010_runtime_sleepers
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from muster_api.db.schema import UTCDateTime

revision: str = "0011_notify_outbox"
down_revision: str | None = "0010_runtime_sleepers"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "notify_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dedup", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("subject", sa.String(200), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=True),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("delivery_id", sa.Integer(), nullable=True),
        sa.Column("packed", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_notify_events"),
        sa.UniqueConstraint("dedup", name="uq_notify_events_dedup"),
    )
    op.create_index("ix_notify_events_unpacked", "notify_events", ["packed", "id"])
    op.create_index("ix_notify_events_subject", "notify_events", ["kind", "subject", "seq"])
    op.create_table(
        "notify_deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("subject", sa.String(200), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("url_digest", sa.String(64), nullable=False),
        sa.Column("service", sa.String(100), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.String(100), nullable=True),
        sa.Column("due_at", UTCDateTime(), nullable=False),
        sa.Column("claimed_until", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_notify_deliveries"),
    )
    op.create_index("ix_notify_deliveries_due", "notify_deliveries", ["state", "due_at"])


def downgrade() -> None:
    op.drop_table("notify_deliveries")
    op.drop_table("notify_events")
