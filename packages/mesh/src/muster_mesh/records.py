"""What a store keeps: plain frozen records, no behaviour beyond small derived values."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class AgentRecord:
    """One agent_id and its current session.

    ``last_seq`` is the highest sequence ever given to this inbox; ``read_cursor`` the acknowledged one;
    ``floor_seq`` the sequence at the session's start (earlier messages belong to a previous session).
    ``followed_until`` the end of the wait of the last reader that waited on the inbox (a long-poll, an SSE stream).
    ``active_at`` the agent's last own call (``muster_mesh.presence``; None on a row stored before it was kept: its
    ``last_seen_at`` stands in).
    """

    agent_id: str
    token_hash: str
    role: str | None
    repo: str | None
    caps: tuple[str, ...]
    status: str
    ttl_seconds: int
    last_seen_at: datetime
    status_since: datetime
    expires_at: datetime
    last_seq: int = 0
    read_cursor: int = 0
    floor_seq: int = 0
    followed_until: datetime | None = None
    active_at: datetime | None = None

    @property
    def last_activity(self) -> datetime:
        return self.active_at if self.active_at is not None else self.last_seen_at

    def followed_at(self, now: datetime) -> bool:
        """A reader follows the inbox at ``now``: a long-poll or a stream is waiting on it (``Mesh.read_inbox``)."""
        return self.followed_until is not None and self.followed_until > now

    def live_at(self, now: datetime) -> bool:
        return self.expires_at > now


@dataclass(frozen=True, slots=True)
class MessageRecord:
    message_id: str
    sender: str
    body: str
    thread_id: str | None
    sent_at: datetime


@dataclass(frozen=True, slots=True)
class InboxEntry:
    seq: int
    message: MessageRecord


# What an inbox records of its entries, each the first time it happens: handed to a live follower (a long-poll that
# waited, an SSE stream, an MCP follower), returned by an inbox read, acknowledged (the cursor moved past it).
WOKEN = "woken"
READ = "read"
ACKED = "acked"
Marks = frozenset[str]


@dataclass(frozen=True, slots=True)
class ReceiptRecord:
    """One recipient's entry of a message: stored when the message was (its ``sent_at``), then each first time."""

    recipient: str
    seq: int
    woken_at: datetime | None = None
    read_at: datetime | None = None
    acked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AgentChanges:
    """The fields a check-in renewal sets; None leaves a field as it is."""

    role: str | None = None
    repo: str | None = None
    caps: tuple[str, ...] | None = None
    status: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectoryQuery:
    """What a page of the directory (or of its backlog) asks for: the filters, expired agents or not, the page."""

    repo: str | None = None
    role: str | None = None
    cap: str | None = None
    include_expired: bool = False
    limit: int | None = None
    cursor: str | None = None

    def where(self, now: datetime) -> AgentFilter:
        return AgentFilter(live_at=None if self.include_expired else now, role=self.role, repo=self.repo, cap=self.cap)


@dataclass(frozen=True, slots=True)
class AgentFilter:
    """Which agents a listing or a fan-out covers: all given fields must match; ``live_at`` None includes expired."""

    live_at: datetime | None
    role: str | None = None
    repo: str | None = None
    cap: str | None = None

    def matches(self, agent: AgentRecord) -> bool:
        return (
            (self.live_at is None or agent.live_at(self.live_at))
            and (self.role is None or agent.role == self.role)
            and (self.repo is None or agent.repo == self.repo)
            and (self.cap is None or self.cap in agent.caps)
        )


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    scope: str
    key: str
    operation: str
    fingerprint: str
    result: dict[str, Any]
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class SweepPolicy:
    """What the sweeper may delete at ``now``: see ``MeshTx.sweep``. ``batch`` bounds each kind of row per call."""

    now: datetime
    read_before: datetime
    agents_expired_before: datetime
    batch: int = 1000


@dataclass(slots=True)
class SweepReport:
    agents: int = 0
    inbox_entries: int = 0
    messages: int = 0
    idempotency_keys: int = 0
    # Agents whose inbox the sweep added to (messages a store held back for them): woken once it commits.
    woken: set[str] = field(default_factory=set)

    def total(self) -> int:
        return self.agents + self.inbox_entries + self.messages + self.idempotency_keys

    def add(self, other: SweepReport) -> None:
        self.agents += other.agents
        self.inbox_entries += other.inbox_entries
        self.messages += other.messages
        self.idempotency_keys += other.idempotency_keys
        self.woken |= other.woken
