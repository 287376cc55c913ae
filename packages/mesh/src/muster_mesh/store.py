"""The storage contract of the mesh. The rules live in ``Mesh``; a store only keeps rows, atomically.

A store hands out transactions. Everything done through one ``MeshTx`` commits together or not at all, and rows
read with ``for_update``/``lock_agents`` stay locked against other transactions until it ends (a store that
serialises whole transactions, like SQLite or the in-memory one, satisfies that trivially).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol

from muster_mesh.records import (
    AgentRecord,
    IdempotencyRecord,
    InboxEntry,
    MessageRecord,
    SweepPolicy,
    SweepReport,
)


class MeshTx(Protocol):
    async def get_agent(self, agent_id: str, *, for_update: bool = False) -> AgentRecord | None:
        """The agent row, locked until the end of the transaction when ``for_update``."""

    async def find_by_token(self, token_hash: str) -> AgentRecord | None:
        """The agent whose current session has this token hash."""

    async def create_agent(self, record: AgentRecord) -> bool:
        """Insert a new agent row; False (and no change) when the agent_id exists already."""

    async def replace_agent(self, record: AgentRecord) -> None:
        """Overwrite an existing agent row (the caller holds its lock)."""

    async def touch_agent(self, agent_id: str, last_seen_at: datetime, expires_at: datetime) -> None:
        """Renew a lease without touching anything else of the row."""

    async def set_cursor(self, agent_id: str, read_cursor: int) -> None:
        """Store the acknowledged cursor of an inbox."""

    async def list_agents(self, *, live_at: datetime | None) -> list[AgentRecord]:
        """Agents ordered by agent_id; only those whose lease runs past ``live_at`` unless it is None."""

    async def lock_agents(self, agent_ids: Sequence[str]) -> list[AgentRecord]:
        """Lock these agent rows (always in agent_id order, so concurrent fan-outs cannot deadlock)."""

    async def add_message(self, message: MessageRecord, recipients: Sequence[str]) -> dict[str, int]:
        """Store a message and append it to each recipient's inbox with that inbox's next sequence.

        The recipients' rows must be locked by this transaction. Returns recipient → sequence.
        """

    async def read_inbox(self, agent_id: str, *, after: int, limit: int) -> list[InboxEntry]:
        """Up to ``limit`` entries with sequence > ``after``, in sequence order."""

    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None: ...

    async def put_idempotency(self, record: IdempotencyRecord) -> bool:
        """Insert; False (and no change) when (scope, key) exists already."""

    async def sweep(self, policy: SweepPolicy) -> SweepReport:
        """Delete what has outlived its use.

        - idempotency records whose ``expires_at`` <= ``policy.now``;
        - inbox entries at or below their inbox's ``read_cursor`` whose message was sent before ``read_before``;
        - agents (with their inbox entries) whose lease expired before ``agents_expired_before``;
        - messages sent before ``read_before`` that no inbox entry refers to any more.
        """


class MeshStore(Protocol):
    def transaction(self) -> AbstractAsyncContextManager[MeshTx]:
        """A transaction: committed when the block exits normally, rolled back when it raises."""


class Subscription(Protocol):
    async def wait(self) -> None:
        """Return once something was published for this agent since the subscription began or the last wait."""


class Notifier(Protocol):
    """Wakes readers that wait on an inbox. Only a hint: readers always re-read the store after a wake."""

    def subscribe(self, agent_id: str) -> AbstractAsyncContextManager[Subscription]: ...

    async def publish(self, agent_ids: Sequence[str]) -> None: ...
