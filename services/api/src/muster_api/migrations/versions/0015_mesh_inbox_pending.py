"""Mesh: messages waiting for their recipient's sequence (a task claim's message to the poster).

Revision ID: 0015_mesh_inbox_pending
Revises: 0014_mesh_search_batched

A claim stored its message to the poster in its own statement, bumping the poster's ``last_seq``: every claimer of
one poster's tasks queued on that row until the claim before it committed. The claim now writes the message here,
and one statement moves every pending row into the inbox for the claims of the moment
(``muster_api.mesh.inbox_pending``). No foreign key on ``recipient``: checking one would share-lock the poster's row,
which a delivery holds for update. Created on SQLite too (one schema for both), where nothing writes it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from muster_api.db.schema import UTCDateTime

revision: str = "0015_mesh_inbox_pending"
down_revision: str | None = "0014_mesh_search_batched"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mesh_inbox_pending",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("recipient", sa.String(64), nullable=False),
        sa.Column("message_id", sa.String(32), nullable=False),
        sa.Column("sender", sa.String(64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.String(128), nullable=True),
        sa.Column("sent_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_mesh_inbox_pending"),
    )


def downgrade() -> None:
    op.drop_table("mesh_inbox_pending")
