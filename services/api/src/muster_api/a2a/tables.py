"""SQL tables of the a2a capability (all on the one service MetaData)."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Index, Integer, String, Table, Text

from muster_api.db.schema import JSONDocument, UTCDateTime, metadata

# One row per tool call: the remote task handle (agent, task id, context id, dialect, last state) is written before
# the call is followed, so that a restart can resume it with GetTask. `done` (indexed) says the result is final;
# a JSON column cannot tell SQL NULL from JSON null portably, so it is not used for that. `owner` is the instance
# following the call until `lease_expires_at` (an expiry from the injected clock, never computed in SQL); another
# instance claims the call only once that has lapsed. Claims look for unfinished calls by lease: (done, lease) index.
calls = Table(
    "a2a_calls",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("agent", String(200), nullable=False),
    Column("tool", String(64), nullable=False),
    Column("task", Text, nullable=False),
    Column("task_id", String(200), nullable=True),
    Column("context_id", String(200), nullable=True),
    Column("dialect", String(40), nullable=True),
    Column("state", String(40), nullable=False),
    Column("polls", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("done", Boolean, nullable=False, index=True),
    Column("result", JSONDocument, nullable=True),
    Column("owner", String(64), nullable=True),
    Column("lease_expires_at", UTCDateTime, nullable=True),
    Index("ix_a2a_calls_done_lease", "done", "lease_expires_at"),
)

__all__ = ["calls", "metadata"]
