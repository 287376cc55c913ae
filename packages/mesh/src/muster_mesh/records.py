"""What a store keeps: plain frozen records, no behaviour beyond small derived values."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class AgentRecord:
    """One agent_id and its current session.

    ``last_seq`` is the highest sequence ever given to this inbox; ``read_cursor`` the acknowledged one;
    ``floor_seq`` the sequence at the session's start (earlier messages belong to a previous session).
    """

    agent_id: str
    session_id: str
    token_hash: str
    role: str | None
    repo: str | None
    caps: tuple[str, ...]
    status: str
    ttl_seconds: int
    checked_in_at: datetime
    last_seen_at: datetime
    status_changed_at: datetime
    expires_at: datetime
    last_seq: int = 0
    read_cursor: int = 0
    floor_seq: int = 0

    def live_at(self, now: datetime) -> bool:
        return self.expires_at > now


@dataclass(frozen=True)
class MessageRecord:
    message_id: str
    sender: str
    address: dict[str, str]
    subject: str | None
    body: str
    sent_at: datetime


@dataclass(frozen=True)
class InboxEntry:
    seq: int
    message: MessageRecord


@dataclass(frozen=True)
class IdempotencyRecord:
    scope: str
    key: str
    operation: str
    fingerprint: str
    result: dict[str, Any]
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class SweepPolicy:
    """What the sweeper may delete at ``now``: see ``MeshTx.sweep``."""

    now: datetime
    read_before: datetime
    agents_expired_before: datetime


@dataclass
class SweepReport:
    agents: int = 0
    inbox_entries: int = 0
    messages: int = 0
    idempotency_keys: int = 0
