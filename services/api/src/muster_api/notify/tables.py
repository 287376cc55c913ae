"""SQL tables of notifications (on the one service MetaData).

``notify_events`` is the outbox: one row per event, written once (``dedup`` is unique, so several instances scanning
the same source write it once). The sender packs the events nobody packed yet into ``notify_deliveries``: one row
per coalesced group (one person's burst of messages; any other event alone) and per URL, each with its own attempts
and outcome. A URL is known here only by its digest and its service's name, never by itself.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, String, Table, Text

from muster_api.db.schema import UTCDateTime, metadata

events = Table(
    "notify_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("dedup", String(200), nullable=False, unique=True),
    Column("kind", String(32), nullable=False),
    # What the event is about (the person, the run, the task, the agent); a person's messages coalesce on it.
    Column("subject", String(200), nullable=False),
    # Messages: the recipient's inbox sequence, the scan's watermark.
    Column("seq", BigInteger, nullable=True),
    Column("title", String(300), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("delivery_id", Integer, nullable=True),
    # 0 until the sender packs it into deliveries (one transaction: each event is packed once).
    Column("packed", Integer, nullable=False),
    Index("ix_notify_events_unpacked", "packed", "id"),
    Index("ix_notify_events_subject", "kind", "subject", "seq"),
)

deliveries = Table(
    "notify_deliveries",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(32), nullable=False),
    Column("subject", String(200), nullable=False),
    Column("events", Integer, nullable=False),
    Column("title", String(300), nullable=False),
    Column("body", Text, nullable=False),
    Column("url_digest", String(64), nullable=False),
    Column("service", String(100), nullable=False),
    # pending → sending → delivered | failed; a sending row whose claim lapsed (its instance died) is pending again.
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("last_error", String(100), nullable=True),
    Column("due_at", UTCDateTime, nullable=False),
    Column("claimed_until", UTCDateTime, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=True),
    Index("ix_notify_deliveries_due", "state", "due_at"),
)

__all__ = ["deliveries", "events"]
