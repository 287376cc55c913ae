"""Mesh: agents (presence leases), messages, inbox entries, idempotency keys.

Revision ID: 0002_mesh
Revises: 0001_foundation
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from muster_api.db.schema import JSONDocument, UTCDateTime

revision: str = "0002_mesh"
down_revision: str | None = "0001_foundation"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mesh_agents",
        sa.Column("agent_id", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("role", sa.String(64), nullable=True),
        sa.Column("repo", sa.String(200), nullable=True),
        sa.Column("caps", JSONDocument(), nullable=False),
        sa.Column("status", sa.String(280), nullable=False),
        sa.Column("ttl_seconds", sa.Integer(), nullable=False),
        sa.Column("last_seen_at", UTCDateTime(), nullable=False),
        sa.Column("status_since", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("read_cursor", sa.BigInteger(), nullable=False),
        sa.Column("floor_seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("agent_id", name="pk_mesh_agents"),
        sa.UniqueConstraint("token_hash", name="uq_mesh_agents_token_hash"),
    )
    op.create_index("ix_mesh_agents_expires_at", "mesh_agents", ["expires_at"])
    op.create_index("ix_mesh_agents_roster", "mesh_agents", ["agent_id", "expires_at"])
    op.create_table(
        "mesh_messages",
        sa.Column("message_id", sa.String(32), nullable=False),
        sa.Column("sender", sa.String(64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.String(128), nullable=True),
        sa.Column("sent_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("message_id", name="pk_mesh_messages"),
    )
    op.create_index("ix_mesh_messages_sent_at", "mesh_messages", ["sent_at"])
    op.create_table(
        "mesh_inbox",
        sa.Column("recipient", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("message_id", sa.String(32), nullable=False),
        sa.ForeignKeyConstraint(
            ["recipient"],
            ["mesh_agents.agent_id"],
            name="fk_mesh_inbox_recipient_mesh_agents",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["mesh_messages.message_id"],
            name="fk_mesh_inbox_message_id_mesh_messages",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("recipient", "seq", name="pk_mesh_inbox"),
    )
    op.create_index("ix_mesh_inbox_message_id", "mesh_inbox", ["message_id"])
    op.create_table(
        "mesh_idempotency",
        sa.Column("scope", sa.String(100), nullable=False),
        sa.Column("idem_key", sa.String(128), nullable=False),
        sa.Column("operation", sa.String(32), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("result", JSONDocument(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "idem_key", name="pk_mesh_idempotency"),
    )
    op.create_index("ix_mesh_idempotency_expires_at", "mesh_idempotency", ["expires_at"])


def downgrade() -> None:
    op.drop_table("mesh_idempotency")
    op.drop_table("mesh_inbox")
    op.drop_table("mesh_messages")
    op.drop_table("mesh_agents")
