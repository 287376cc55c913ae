"""The storage contract of the mesh. The rules live in ``Mesh``; a store only keeps rows, atomically.

A store hands out transactions. Everything done through one ``MeshTx`` commits together or not at all, and rows
written or read with ``for_update``/``lock_agents`` stay locked against other transactions until it ends (a store
that serialises whole transactions, like SQLite or the in-memory one, satisfies that trivially). Each method is meant
to be one statement (one round trip) on a SQL database: the hot paths of ``Mesh`` count them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol

from muster_mesh.directory import ShownRow
from muster_mesh.records import (
    AgentChanges,
    AgentFilter,
    AgentRecord,
    IdempotencyRecord,
    InboxEntry,
    Marks,
    MessageRecord,
    ReceiptRecord,
    SweepPolicy,
    SweepReport,
)


class MeshTx(Protocol):
    async def get_agent(self, agent_id: str, *, for_update: bool = False) -> AgentRecord | None:
        """The agent row, locked until the end of the transaction when ``for_update``."""

    async def find_by_token(self, token_hash: str) -> AgentRecord | None:
        """The agent whose current session has this token hash (no lock)."""

    async def agent_id_for(self, token_hash: str) -> str | None:
        """The agent_id this token was issued to, None when no agent holds it. May answer from a cache without a
        statement (a token belongs to one agent_id for good); callers verify it by the statement that follows."""

    async def renew(self, token_hash: str, now: datetime, *, active: bool = True) -> AgentRecord | None:
        """The agent whose session has this token hash. When its lease runs past ``now`` it is renewed first
        (``last_seen_at = now``, ``expires_at = now + ttl_seconds``, and ``active_at = now`` when ``active``; row
        locked); an expired one comes back unchanged. None when no agent has this token."""

    async def touch(self, agent_id: str, token_hash: str, now: datetime, expires_at: datetime) -> bool:
        """Renew this agent's lease if its session still has this token and is live at ``now`` (locks the row): an
        acting call, so ``active_at = now`` too."""

    async def renew_checkin(
        self,
        agent_id: str,
        token_hash: str,
        now: datetime,
        *,
        ttl_seconds: int | None,
        changes: AgentChanges,
        active: bool | None = None,
    ) -> AgentRecord | None:
        """Renew the live session of ``agent_id`` held by ``token_hash`` and return the new row: ``last_seen_at =
        now``, ``expires_at = now + ttl`` (``ttl_seconds``, or the row's own when None), each field of ``changes``
        that is not None, and ``status_since = now`` only when the status text changes. ``active_at = now`` when
        ``active``, never when it is False, and when it is None only when the status text changes. None, and no
        change, when the agent does not exist, is not live at ``now`` or holds another token."""

    async def create_agent(self, record: AgentRecord) -> bool:
        """Insert a new agent row; False (and no change) when the agent_id exists already."""

    async def replace_agent(self, record: AgentRecord) -> None:
        """Overwrite an existing agent row (the caller holds its lock)."""

    async def set_cursor(self, agent_id: str, read_cursor: int) -> None:
        """Store the acknowledged cursor of an inbox."""

    async def end_lease(self, agent_id: str, now: datetime) -> None:
        """Check out: the lease ends at ``now`` (``last_seen_at`` and ``expires_at`` set to it)."""

    async def end_holdings(self, agent_id: str) -> None:
        """The session of ``agent_id`` ended (check-out, or a new session after its lease expired): delete its
        path claims."""

    async def list_agents(self, where: AgentFilter, *, after: str | None, limit: int) -> list[AgentRecord]:
        """Up to ``limit`` matching agents with agent_id > ``after``, in agent_id order."""

    async def directory_rows(self, where: AgentFilter, *, after: str | None, limit: int) -> list[ShownRow]:
        """``list_agents`` as a directory page shows it (``muster_mesh.directory``)."""

    async def lock_agents(self, agent_ids: Sequence[str]) -> list[AgentRecord]:
        """Lock these agent rows (always in agent_id order, so concurrent fan-outs cannot deadlock)."""

    async def bump(self, agent_ids: Sequence[str], live_at: datetime) -> dict[str, int]:
        """Give each of these agents that is live at ``live_at`` its inbox's next sequence (``last_seq + 1``, stored,
        row locked). Returns agent_id → sequence for those bumped."""

    async def add_message(self, message: MessageRecord, seqs: Mapping[str, int]) -> None:
        """Store a message and an inbox entry per recipient at the sequence ``bump`` gave it."""

    async def deliver(self, message: MessageRecord, to: str, live_at: datetime) -> dict[str, int]:
        """``bump([to], live_at)`` then, when it gave a sequence, ``add_message`` at it: one statement where the
        database allows. Returns what ``bump`` returned (empty, and nothing stored, when ``to`` is not live)."""

    async def read_inbox(self, agent_id: str, *, after: int, limit: int) -> list[InboxEntry]:
        """Up to ``limit`` entries with sequence > ``after``, in sequence order."""

    async def mark_inbox(self, agent_id: str, *, after: int, through: int, now: datetime, marks: Marks) -> None:
        """Receipts: on the entries of this inbox with ``after < seq <= through``, set each of ``marks`` (``WOKEN``,
        ``READ``, ``ACKED``) to ``now`` where it is not set yet (the first time counts)."""

    async def followed(self, agent_ids: Sequence[str], now: datetime) -> set[str]:
        """Those of these agents whose inbox a reader follows at ``now`` (``AgentRecord.followed_at``)."""

    async def message_receipts(self, message_id: str) -> tuple[MessageRecord, list[ReceiptRecord]] | None:
        """The message and its inbox entries' receipts (in recipient order); None when no such message is kept."""

    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None: ...

    async def put_idempotency(self, record: IdempotencyRecord) -> bool:
        """Insert; False (and no change) when (scope, key) exists already."""

    async def sweep(self, policy: SweepPolicy) -> SweepReport:
        """Delete, at most ``policy.batch`` rows of each kind, what has outlived its use:

        - idempotency records whose ``expires_at`` <= ``policy.now``;
        - agents (with their inbox entries) whose lease ended before ``agents_expired_before``;
        - inbox entries at or below their inbox's ``read_cursor`` whose message was sent before ``read_before``;
        - messages sent before ``read_before`` that no inbox entry refers to any more.
        """


class MeshStore(Protocol):
    serial: bool
    """True when transactions never overlap (one lock over them all): lock ordering is then moot, and ``Mesh`` may
    renew a sender before locking its recipients, saving a statement."""

    def transaction(self) -> AbstractAsyncContextManager[MeshTx]:
        """A transaction: committed when the block exits normally, rolled back when it raises."""

    async def renew_and_read(
        self, token_hash: str, now: datetime, *, after: int | None, limit: int, shown: int = 0, active: bool = True
    ) -> tuple[AgentRecord, list[InboxEntry]] | None:
        """An inbox read as one atomic step: renew the lease of the live agent holding this token (as
        ``MeshTx.renew``, with ``active``) and read up to ``limit`` entries of its inbox after ``after`` (None: after
        its ``read_cursor``; otherwise after ``max(after, floor_seq)``), only when ``after`` is at most its
        ``last_seq``, recording the first ``shown`` of them as read at ``now`` (as ``MeshTx.mark_inbox``). Returns the
        renewed agent and the entries. None, and no change, when any of that does not hold or the store cannot do it
        in one step: the caller then takes a transaction, which refuses as it must."""

    async def mark_inbox(self, agent_id: str, *, after: int, through: int, now: datetime, marks: Marks) -> None:
        """``MeshTx.mark_inbox`` in one step of its own (for a follower's or a woken reader's receipts)."""

    async def renew_and_deliver(
        self, token_hash: str, to: str, now: datetime, *, message_id: str, body: str, thread_id: str | None
    ) -> tuple[InboxEntry, bool] | None:
        """A direct send as one atomic step: renew the lease of the live agent holding this token (as
        ``MeshTx.renew``) and deliver a message from it, sent at ``now``, to the live agent ``to`` (as
        ``MeshTx.deliver``), with its wake-up. Returns the entry stored and whether a reader follows ``to``'s inbox
        at ``now``. None, and no change, when any of that does not hold or the store cannot do it in one step: the
        caller then takes a transaction, which refuses as it must."""

    async def follow(self, agent_id: str, until: datetime) -> None:
        """A reader waits on this agent's inbox until ``until``: set its ``followed_until`` (one step of its own)."""

    def standalone(self) -> AbstractAsyncContextManager[MeshTx]:
        """Statements that each stand alone: where the database allows, each is its own transaction (no BEGIN and
        COMMIT round trips around it), and a row lock lasts as long as its statement. For a read that is one
        statement, or a write that is one statement re-checking its own conditions; a store may also hand out a
        plain transaction here."""


class Subscription(Protocol):
    async def wait(self) -> None:
        """Return once something was published for this agent since the subscription began or the last wait."""

    def take(self) -> list[InboxEntry]:
        """Committed entries handed over with the wake-ups since the last ``take`` (may be empty: a wake-up from
        another process carries none, and the reader reads the store)."""


class Notifier(Protocol):
    """Wakes readers that wait on an inbox. Only a hint: readers always re-read the store after a wake."""

    def subscribe(self, agent_id: str) -> AbstractAsyncContextManager[Subscription]: ...

    async def publish(self, agent_ids: Sequence[str], entries: Mapping[str, InboxEntry] | None = None) -> None:
        """Wake the readers of these inboxes, after the commit; ``entries`` (agent_id → the entry just committed)
        lets a reader positioned right before it answer without reading the store."""
