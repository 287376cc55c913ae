"""Mesh: indexes for threads and for what an agent may see; the search index without a pending list.

Revision ID: 0008_people_threads
Revises: 0007_mesh_search

- ``ix_mesh_messages_sender`` and ``ix_mesh_messages_thread_id``: a caller's threads start from what it sent; one
  thread's messages are found by their thread_id.
- ``ix_mesh_inbox_recipient_message``: the message ids of an agent's inbox read from the index alone (search and
  threads test every candidate message against that set).
- PostgreSQL: the GIN index of the search writes each message into its posting lists at once (``fastupdate = off``).
  With the default, new entries wait in a pending list of up to 4 MB that every search reads whole: after a burst of
  sends, a one-word search read hundreds of pages it did not need.
"""

from collections.abc import Sequence

from alembic import op

from muster_api.db.dialect import dialect_of

revision: str = "0008_people_threads"
down_revision: str | None = "0007_mesh_search"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

SEARCH_INDEX = "ix_mesh_messages_search_doc"


def upgrade() -> None:
    op.create_index("ix_mesh_messages_sender", "mesh_messages", ["sender"])
    op.create_index("ix_mesh_messages_thread_id", "mesh_messages", ["thread_id"])
    op.create_index("ix_mesh_inbox_recipient_message", "mesh_inbox", ["recipient", "message_id"])
    if dialect_of(op.get_bind()).name == "postgresql":
        op.execute(f"ALTER INDEX {SEARCH_INDEX} SET (fastupdate = off)")
        op.execute(f"SELECT gin_clean_pending_list('{SEARCH_INDEX}'::regclass)")


def downgrade() -> None:
    if dialect_of(op.get_bind()).name == "postgresql":
        op.execute(f"ALTER INDEX {SEARCH_INDEX} RESET (fastupdate)")
    op.drop_index("ix_mesh_inbox_recipient_message", table_name="mesh_inbox")
    op.drop_index("ix_mesh_messages_thread_id", table_name="mesh_messages")
    op.drop_index("ix_mesh_messages_sender", table_name="mesh_messages")
