"""SQL tables of mesh tasks (on the one service MetaData). A claimed task's hold is its holder's lease: the claim
statement treats a task whose holder is not live as open, so no expiry column is kept."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, String, Table, Text

from muster_api.db.schema import UTCDateTime, metadata

tasks = Table(
    "mesh_tasks",
    metadata,
    Column("task_id", String(32), primary_key=True),
    Column("title", String(200), nullable=False),
    Column("body", Text, nullable=False),
    Column("poster", String(64), nullable=False),
    Column("to_agent", String(64), nullable=True),
    Column("role", String(64), nullable=True),
    Column("repo", String(200), nullable=True),
    Column("cap", String(64), nullable=True),
    Column("priority", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("holder", String(64), nullable=True),
    Column("fence", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("result", Text, nullable=True),
    Column("reason", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # A claim walks the claimable tasks in the order it hands them out.
    Index("ix_mesh_tasks_queue", "state", "priority", "created_at"),
    Index("ix_mesh_tasks_holder", "holder"),
)

task_events = Table(
    "mesh_task_events",
    metadata,
    Column("event_id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", String(32), nullable=False, index=True),
    Column("at", UTCDateTime, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("agent", String(64), nullable=True),
    Column("note", Text, nullable=True),
)

__all__ = ["task_events", "tasks"]
