"""An in-memory ``MeshStore``: one process, whole transactions serialised by a lock, undone when they raise."""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime

import anyio

from muster_mesh.records import (
    AgentRecord,
    IdempotencyRecord,
    InboxEntry,
    MessageRecord,
    SweepPolicy,
    SweepReport,
)


class _State:
    def __init__(self) -> None:
        self.agents: dict[str, AgentRecord] = {}
        self.messages: dict[str, MessageRecord] = {}
        # Per inbox: sequences (ascending) and the message id at each, kept side by side for bisect.
        self.inbox: dict[str, tuple[list[int], list[str]]] = {}
        self.idempotency: dict[tuple[str, str], IdempotencyRecord] = {}


def _popper(seq_list: list[int], ids: list[str]) -> Callable[[], object]:
    def undo() -> None:
        seq_list.pop()
        ids.pop()

    return undo


class _MemoryTx:
    def __init__(self, state: _State) -> None:
        self._s = state
        self._undo: list[Callable[[], object]] = []

    def rollback(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def _set_agent(self, record: AgentRecord) -> None:
        old = self._s.agents.get(record.agent_id)
        self._s.agents[record.agent_id] = record
        if old is None:
            self._undo.append(lambda: self._s.agents.pop(record.agent_id, None))
        else:
            self._undo.append(lambda: self._s.agents.__setitem__(record.agent_id, old))

    async def get_agent(self, agent_id: str, *, for_update: bool = False) -> AgentRecord | None:
        return self._s.agents.get(agent_id)

    async def find_by_token(self, token_hash: str) -> AgentRecord | None:
        return next((a for a in self._s.agents.values() if a.token_hash == token_hash), None)

    async def create_agent(self, record: AgentRecord) -> bool:
        if record.agent_id in self._s.agents:
            return False
        self._set_agent(record)
        return True

    async def replace_agent(self, record: AgentRecord) -> None:
        self._set_agent(record)

    async def touch_agent(self, agent_id: str, last_seen_at: datetime, expires_at: datetime) -> None:
        agent = self._s.agents[agent_id]
        self._set_agent(replace(agent, last_seen_at=last_seen_at, expires_at=expires_at))

    async def set_cursor(self, agent_id: str, read_cursor: int) -> None:
        self._set_agent(replace(self._s.agents[agent_id], read_cursor=read_cursor))

    async def list_agents(self, *, live_at: datetime | None) -> list[AgentRecord]:
        agents = sorted(self._s.agents.values(), key=lambda a: a.agent_id)
        return [a for a in agents if live_at is None or a.live_at(live_at)]

    async def lock_agents(self, agent_ids: Sequence[str]) -> list[AgentRecord]:
        return [self._s.agents[i] for i in sorted(set(agent_ids)) if i in self._s.agents]

    async def add_message(self, message: MessageRecord, recipients: Sequence[str]) -> dict[str, int]:
        self._s.messages[message.message_id] = message
        self._undo.append(lambda: self._s.messages.pop(message.message_id, None))
        seqs: dict[str, int] = {}
        for rid in sorted(set(recipients)):
            agent = self._s.agents[rid]
            seq = agent.last_seq + 1
            self._set_agent(replace(agent, last_seq=seq))
            seq_list, ids = self._s.inbox.setdefault(rid, ([], []))
            seq_list.append(seq)
            ids.append(message.message_id)
            self._undo.append(_popper(seq_list, ids))
            seqs[rid] = seq
        return seqs

    async def read_inbox(self, agent_id: str, *, after: int, limit: int) -> list[InboxEntry]:
        seq_list, ids = self._s.inbox.get(agent_id, ([], []))
        start = bisect.bisect_right(seq_list, after)
        return [
            InboxEntry(seq=seq_list[i], message=self._s.messages[ids[i]])
            for i in range(start, min(start + limit, len(seq_list)))
        ]

    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        return self._s.idempotency.get((scope, key))

    async def put_idempotency(self, record: IdempotencyRecord) -> bool:
        k = (record.scope, record.key)
        if k in self._s.idempotency:
            return False
        self._s.idempotency[k] = record
        self._undo.append(lambda: self._s.idempotency.pop(k, None))
        return True

    async def sweep(self, policy: SweepPolicy) -> SweepReport:
        # Sweeping is not undone on error: it only deletes what nobody can reach any more.
        report = SweepReport()
        s = self._s
        for k in [k for k, r in s.idempotency.items() if r.expires_at <= policy.now]:
            del s.idempotency[k]
            report.idempotency_keys += 1
        for aid in [a.agent_id for a in s.agents.values() if a.expires_at < policy.agents_expired_before]:
            del s.agents[aid]
            report.agents += 1
            report.inbox_entries += len(s.inbox.pop(aid, ([], []))[0])
        for aid, (seq_list, ids) in s.inbox.items():
            cursor = s.agents[aid].read_cursor
            keep = [
                (q, m)
                for q, m in zip(seq_list, ids, strict=True)
                if q > cursor or s.messages[m].sent_at >= policy.read_before
            ]
            report.inbox_entries += len(seq_list) - len(keep)
            seq_list[:] = [q for q, _ in keep]
            ids[:] = [m for _, m in keep]
        referenced = {m for _, ids in s.inbox.values() for m in ids}
        for mid in [m for m, r in s.messages.items() if m not in referenced and r.sent_at < policy.read_before]:
            del s.messages[mid]
            report.messages += 1
        return report


class InMemoryMeshStore:
    """For tests, single-process tools and as the reference the conformance suite is written against."""

    def __init__(self) -> None:
        self._state = _State()
        self._lock = anyio.Lock()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_MemoryTx]:
        async with self._lock:
            tx = _MemoryTx(self._state)
            try:
                yield tx
            except BaseException:
                tx.rollback()
                raise
