"""SQL tables of the dispatch capability (all on the one service MetaData)."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, Index, Integer, LargeBinary, PrimaryKeyConstraint, String, Table, Text

from muster_api.db.schema import JSONDocument, UTCDateTime, metadata

# One row per run. Ids are time-ordered (newest first is `id DESC`, the list cursor is an id). `worker` executes the
# run until `lease_expires_at` (an expiry from the injected clock); a running run whose lease lapsed is interrupted.
# `active_workspace` repeats `workspace` while the run is queued or running and is NULL once it finished: its unique
# index refuses a second active run on one workspace in the database itself, whatever the instance (NULLs never
# collide). `request` keeps what was asked (continuation, replay, live input) to compare idempotent retries.
runs = Table(
    "dispatch_runs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("agent", String(200), nullable=False),
    Column("status", String(16), nullable=False),
    Column("prompt", Text, nullable=False),
    Column("workspace", String(255), nullable=False),
    Column("active_workspace", String(255), nullable=True),
    Column("request", JSONDocument, nullable=False),
    Column("idempotency_key", String(200), nullable=True),
    Column("deadline_s", Float, nullable=True),
    Column("selected", String(200), nullable=True),
    Column("attempts", JSONDocument, nullable=True),
    Column("text", Text, nullable=True),
    Column("usage", JSONDocument, nullable=True),
    Column("error", JSONDocument, nullable=True),
    Column("conversation", String(200), nullable=True),
    Column("queued_at", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime, nullable=True),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("worker", String(64), nullable=True),
    Column("lease_expires_at", UTCDateTime, nullable=True),
    Index("ix_dispatch_runs_status_id", "status", "id"),
    Index("ix_dispatch_runs_agent_id", "agent", "id"),
    Index("ix_dispatch_runs_active_workspace", "active_workspace", unique=True),
    Index("ix_dispatch_runs_idempotency_key", "idempotency_key", unique=True),
)

# The journal of a run: one row per observation, in the package's shape ({seq, at, source, scope, event}).
events = Table(
    "dispatch_events",
    metadata,
    Column("run_id", String(32), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("at", String(40), nullable=False),
    Column("source", String(16), nullable=False),
    Column("scope", JSONDocument, nullable=False),
    Column("event", JSONDocument, nullable=False),
    PrimaryKeyConstraint("run_id", "seq"),
)

# Steering and cancel requests, read by whichever worker executes the run (woken through the notifier).
controls = Table(
    "dispatch_controls",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(32), nullable=False, index=True),
    Column("kind", String(16), nullable=False),
    Column("text", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
)

# Conversation snapshots: one row per captured conversation, one per file of its snapshot (replaced whole).
conversations = Table(
    "dispatch_conversations",
    metadata,
    Column("harness", String(200), nullable=False),
    Column("conversation", String(200), nullable=False),
    Column("captured_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("harness", "conversation"),
)

conversation_files = Table(
    "dispatch_conversation_files",
    metadata,
    Column("harness", String(200), nullable=False),
    Column("conversation", String(200), nullable=False),
    Column("path", String(1000), nullable=False),
    Column("content", LargeBinary, nullable=False),
    PrimaryKeyConstraint("harness", "conversation", "path"),
)

# Agents with ``wake = true``: the mesh session the service keeps for each between its runs (its token, which every
# instance renews and a run's MCP server is given), the last wake (at most one per interval, decided by the UPDATE that
# sets it, whichever instance asks), a wake owed once the active run ends, and a wake owed once the interval has passed
# (`wake_due_at`: a row, so that whichever instance is alive then makes it).
sleepers = Table(
    "dispatch_sleepers",
    metadata,
    Column("agent_id", String(64), primary_key=True),
    Column("agent", String(200), nullable=False),
    Column("token", String(200), nullable=True),
    Column("last_wake_at", UTCDateTime, nullable=True),
    Column("pending", Boolean, nullable=False),
    Column("wake_due_at", UTCDateTime, nullable=True),
)

# The key a run's MCP server presents on a service with API keys, in place of the service's own: one per run, kept as
# its SHA-256 with the hash of the agent's session token it is good with. It is honoured only while its run is running
# (so a dead worker's keys die with the run's lease) and deleted at the run's end.
run_keys = Table(
    "dispatch_run_keys",
    metadata,
    Column("key_hash", String(64), primary_key=True),
    Column("run_id", String(32), nullable=False, index=True),
    Column("agent_id", String(64), nullable=False),
    Column("token_hash", String(64), nullable=False),
)

__all__ = ["controls", "conversation_files", "conversations", "events", "metadata", "run_keys", "runs", "sleepers"]
