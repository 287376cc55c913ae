"""Mesh: indexes for threads (a caller's messages by sender, a thread's by thread_id).

Revision ID: 0008_people_threads
Revises: 0007_mesh_search
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008_people_threads"
down_revision: str | None = "0007_mesh_search"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_mesh_messages_sender", "mesh_messages", ["sender"])
    op.create_index("ix_mesh_messages_thread_id", "mesh_messages", ["thread_id"])


def downgrade() -> None:
    op.drop_index("ix_mesh_messages_thread_id", table_name="mesh_messages")
    op.drop_index("ix_mesh_messages_sender", table_name="mesh_messages")
