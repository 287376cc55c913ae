"""SQL tables of the mesh capability (all on the one service MetaData)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, ForeignKey, Index, Integer, String, Table, Text

from muster_api.db.schema import JSONDocument, UTCDateTime, metadata

# One row per agent_id: its current session, lease and inbox counters. last_seq is the per-recipient sequence:
# incrementing it with UPDATE … RETURNING in the sending transaction is what keeps inbox sequences gap-free and in
# commit order, across API instances. Listing pages walk ix_mesh_agents_roster in agent_id order and test the lease
# inside the index, so expired rows cost an index entry each, never a row fetch; inbox reads walk mesh_inbox's
# primary key (recipient, seq): both cost what the page holds, not what the table holds.
agents = Table(
    "mesh_agents",
    metadata,
    Column("agent_id", String(64), primary_key=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("role", String(64), nullable=True),
    Column("repo", String(200), nullable=True),
    Column("caps", JSONDocument, nullable=False),
    Column("status", String(280), nullable=False),
    Column("ttl_seconds", Integer, nullable=False),
    Column("last_seen_at", UTCDateTime, nullable=False),
    Column("status_since", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False, index=True),
    Column("last_seq", BigInteger, nullable=False),
    Column("read_cursor", BigInteger, nullable=False),
    Column("floor_seq", BigInteger, nullable=False),
    # Until when a reader waits on the inbox (a long-poll or a stream): a message sent before then wakes it.
    Column("followed_until", UTCDateTime, nullable=True),
    # The agent's last own call (muster_mesh.presence): written by the same UPDATE that renews the lease, left as it
    # is by a follower's. NULL only on rows older than the column, where last_seen_at stands in.
    Column("active_at", UTCDateTime, nullable=True),
    Index("ix_mesh_agents_roster", "agent_id", "expires_at"),
)

messages = Table(
    "mesh_messages",
    metadata,
    Column("message_id", String(32), primary_key=True),
    Column("sender", String(64), nullable=False),
    Column("body", Text, nullable=False),
    Column("thread_id", String(128), nullable=True),
    Column("sent_at", UTCDateTime, nullable=False, index=True),
    # Threads: a caller's threads are found from what it sent (sender) and its inbox; one thread's messages by
    # thread_id (a message without one is its own thread, found by its primary key).
    Index("ix_mesh_messages_sender", "sender"),
    Index("ix_mesh_messages_thread_id", "thread_id"),
)

# An entry's receipts: NULL until it first happens (a send writes none: the entry is stored when its message is).
inbox = Table(
    "mesh_inbox",
    metadata,
    Column("recipient", String(64), ForeignKey("mesh_agents.agent_id", ondelete="CASCADE"), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("message_id", String(32), ForeignKey("mesh_messages.message_id", ondelete="CASCADE"), nullable=False),
    Column("woken_at", UTCDateTime, nullable=True),
    Column("read_at", UTCDateTime, nullable=True),
    Column("acked_at", UTCDateTime, nullable=True),
    Index("ix_mesh_inbox_message_id", "message_id"),
    # What an agent may see (search, threads): its inbox's message ids read from the index alone.
    Index("ix_mesh_inbox_recipient_message", "recipient", "message_id"),
)

# A message stored before its recipient's sequence is bumped: a task claim writes the poster's message here in its
# own statement (locking no agent row), and ``muster_api.mesh.inbox_pending`` moves every pending row into the
# inbox in one statement shared by the claims of the moment (sequences bumped per recipient, in id order). Written
# only on PostgreSQL, where concurrent claimers would otherwise queue on the poster's row until each commit.
inbox_pending = Table(
    "mesh_inbox_pending",
    metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("recipient", String(64), nullable=False),
    Column("message_id", String(32), nullable=False),
    Column("sender", String(64), nullable=False),
    Column("body", Text, nullable=False),
    Column("thread_id", String(128), nullable=True),
    Column("sent_at", UTCDateTime, nullable=False),
)

idempotency = Table(
    "mesh_idempotency",
    metadata,
    Column("scope", String(100), primary_key=True),
    Column("idem_key", String(128), primary_key=True),
    Column("operation", String(32), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("result", JSONDocument, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False, index=True),
)

__all__ = ["agents", "idempotency", "inbox", "inbox_pending", "messages", "metadata"]
