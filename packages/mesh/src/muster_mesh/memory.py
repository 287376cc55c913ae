"""An in-memory ``MeshStore``: one process, whole transactions serialised by a lock, undone when they raise."""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial

import anyio

from muster_mesh.claims import ClaimRecord
from muster_mesh.directory import ShownRow, shown_row
from muster_mesh.memory_tasks import MemoryTasks
from muster_mesh.records import (
    ACKED,
    READ,
    WOKEN,
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
from muster_mesh.search import SearchQuery, SearchRow, matching_words, plain_snippet
from muster_mesh.tasks import ClaimedInOneStep, ClaimStep, TaskEvent, TaskRecord
from muster_mesh.threads import PREVIEW_CHARS, ThreadMessageRow, ThreadQuery, ThreadRow

READ_ONLY = frozenset({READ})


class _State:
    def __init__(self) -> None:
        self.agents: dict[str, AgentRecord] = {}
        self.by_token: dict[str, str] = {}
        self.messages: dict[str, MessageRecord] = {}
        # Per inbox: sequences (ascending) and the message id at each, kept side by side for bisect.
        self.inbox: dict[str, tuple[list[int], list[str]]] = {}
        self.idempotency: dict[tuple[str, str], IdempotencyRecord] = {}
        self.claims: dict[str, ClaimRecord] = {}
        self.tasks: dict[str, TaskRecord] = {}
        self.task_events: dict[str, list[TaskEvent]] = {}
        # (recipient, seq) → receipt mark → its first time; kept while the entry is.
        self.receipts: dict[tuple[str, int], dict[str, datetime]] = {}


def _popper(seq_list: list[int], ids: list[str]) -> Callable[[], object]:
    def undo() -> None:
        seq_list.pop()
        ids.pop()

    return undo


class _MemoryTx(MemoryTasks):
    _s: _State

    def __init__(self, state: _State) -> None:
        self._s = state
        self._undo: list[Callable[[], object]] = []

    def rollback(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def _set_agent(self, record: AgentRecord) -> None:
        s = self._s
        old = s.agents.get(record.agent_id)
        s.agents[record.agent_id] = record
        if old is not None:
            s.by_token.pop(old.token_hash, None)
        s.by_token[record.token_hash] = record.agent_id

        def undo() -> None:
            s.by_token.pop(record.token_hash, None)
            if old is None:
                s.agents.pop(record.agent_id, None)
            else:
                s.agents[record.agent_id] = old
                s.by_token[old.token_hash] = old.agent_id

        self._undo.append(undo)

    async def get_agent(self, agent_id: str, *, for_update: bool = False) -> AgentRecord | None:
        return self._s.agents.get(agent_id)

    async def find_by_token(self, token_hash: str) -> AgentRecord | None:
        agent_id = self._s.by_token.get(token_hash)
        return self._s.agents.get(agent_id) if agent_id is not None else None

    async def agent_id_for(self, token_hash: str) -> str | None:
        return self._s.by_token.get(token_hash)

    async def renew(self, token_hash: str, now: datetime, *, active: bool = True) -> AgentRecord | None:
        agent = await self.find_by_token(token_hash)
        if agent is None or not agent.live_at(now):
            return agent
        renewed = replace(
            agent,
            last_seen_at=now,
            expires_at=now + timedelta(seconds=agent.ttl_seconds),
            active_at=now if active else agent.active_at,
        )
        self._set_agent(renewed)
        return renewed

    async def touch(self, agent_id: str, token_hash: str, now: datetime, expires_at: datetime) -> bool:
        agent = self._s.agents.get(agent_id)
        if agent is None or agent.token_hash != token_hash or not agent.live_at(now):
            return False
        self._set_agent(replace(agent, last_seen_at=now, expires_at=expires_at, active_at=now))
        return True

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
        agent = self._s.agents.get(agent_id)
        if agent is None or agent.token_hash != token_hash or not agent.live_at(now):
            return None
        ttl = ttl_seconds if ttl_seconds is not None else agent.ttl_seconds
        status = changes.status if changes.status is not None else agent.status
        renewed = replace(
            agent,
            role=changes.role if changes.role is not None else agent.role,
            repo=changes.repo if changes.repo is not None else agent.repo,
            caps=changes.caps if changes.caps is not None else agent.caps,
            status=status,
            status_since=agent.status_since if status == agent.status else now,
            ttl_seconds=ttl,
            last_seen_at=now,
            expires_at=now + timedelta(seconds=ttl),
            active_at=now if active or (active is None and status != agent.status) else agent.active_at,
        )
        self._set_agent(renewed)
        return renewed

    async def create_agent(self, record: AgentRecord) -> bool:
        if record.agent_id in self._s.agents:
            return False
        self._set_agent(record)
        return True

    async def replace_agent(self, record: AgentRecord) -> None:
        self._set_agent(record)

    async def set_cursor(self, agent_id: str, read_cursor: int) -> None:
        self._set_agent(replace(self._s.agents[agent_id], read_cursor=read_cursor))

    async def end_lease(self, agent_id: str, now: datetime) -> None:
        self._set_agent(replace(self._s.agents[agent_id], last_seen_at=now, expires_at=now))

    async def end_holdings(self, agent_id: str) -> None:
        await self.delete_claims(agent_id, [c.claim_id for c in self._s.claims.values() if c.holder == agent_id])

    async def lock_repo_claims(self, repo: str) -> None:
        """Transactions are serial here: nothing to lock."""

    async def live_claims(self, live_at: datetime, *, repo: str | None, holder: str | None) -> list[ClaimRecord]:
        agents = self._s.agents
        found = [
            c
            for c in self._s.claims.values()
            if (repo is None or c.repo == repo)
            and (holder is None or c.holder == holder)
            and c.holder in agents
            and agents[c.holder].live_at(live_at)
        ]
        return sorted(found, key=lambda c: (c.repo, c.holder, c.pattern))

    async def put_claims(self, records: Sequence[ClaimRecord]) -> None:
        claims = self._s.claims
        for record in records:
            same = [
                k
                for k, c in claims.items()
                if (c.repo, c.holder, c.pattern) == (record.repo, record.holder, record.pattern)
            ]
            await self.delete_claims(record.holder, same)
            claims[record.claim_id] = record
            self._undo.append(partial(claims.pop, record.claim_id, None))

    async def delete_claims(self, holder: str, ids: Sequence[str]) -> None:
        claims = self._s.claims
        for claim_id in ids:
            old = claims.get(claim_id)
            if old is not None and old.holder == holder:
                del claims[claim_id]
                self._undo.append(partial(claims.__setitem__, claim_id, old))

    async def list_agents(self, where: AgentFilter, *, after: str | None, limit: int) -> list[AgentRecord]:
        ids = sorted(self._s.agents)
        start = 0 if after is None else bisect.bisect_right(ids, after)
        found: list[AgentRecord] = []
        for agent_id in ids[start:]:
            agent = self._s.agents[agent_id]
            if where.matches(agent):
                found.append(agent)
                if len(found) == limit:
                    break
        return found

    async def directory_rows(self, where: AgentFilter, *, after: str | None, limit: int) -> list[ShownRow]:
        return [shown_row(a) for a in await self.list_agents(where, after=after, limit=limit)]

    async def lock_agents(self, agent_ids: Sequence[str]) -> list[AgentRecord]:
        return [self._s.agents[i] for i in sorted(set(agent_ids)) if i in self._s.agents]

    async def bump(self, agent_ids: Sequence[str], live_at: datetime) -> dict[str, int]:
        seqs: dict[str, int] = {}
        for agent_id in sorted(set(agent_ids)):
            agent = self._s.agents.get(agent_id)
            if agent is not None and agent.live_at(live_at):
                seqs[agent_id] = agent.last_seq + 1
                self._set_agent(replace(agent, last_seq=agent.last_seq + 1))
        return seqs

    async def add_message(self, message: MessageRecord, seqs: Mapping[str, int]) -> None:
        self._s.messages[message.message_id] = message
        self._undo.append(lambda: self._s.messages.pop(message.message_id, None))
        for agent_id, seq in sorted(seqs.items()):
            seq_list, ids = self._s.inbox.setdefault(agent_id, ([], []))
            seq_list.append(seq)
            ids.append(message.message_id)
            self._undo.append(_popper(seq_list, ids))

    async def deliver(self, message: MessageRecord, to: str, live_at: datetime) -> dict[str, int]:
        seqs = await self.bump([to], live_at)
        if seqs:
            await self.add_message(message, seqs)
        return seqs

    async def read_inbox(self, agent_id: str, *, after: int, limit: int) -> list[InboxEntry]:
        seq_list, ids = self._s.inbox.get(agent_id, ([], []))
        start = bisect.bisect_right(seq_list, after)
        return [
            InboxEntry(seq=seq_list[i], message=self._s.messages[ids[i]])
            for i in range(start, min(start + limit, len(seq_list)))
        ]

    async def mark_inbox(self, agent_id: str, *, after: int, through: int, now: datetime, marks: Marks) -> None:
        seq_list, _ = self._s.inbox.get(agent_id, ([], []))
        start, end = bisect.bisect_right(seq_list, after), bisect.bisect_right(seq_list, through)
        for seq in seq_list[start:end]:
            times = self._s.receipts.setdefault((agent_id, seq), {})
            for mark in marks - times.keys():
                times[mark] = now
                self._undo.append(partial(times.pop, mark, None))

    async def followed(self, agent_ids: Sequence[str], now: datetime) -> set[str]:
        return {i for i in agent_ids if (a := self._s.agents.get(i)) is not None and a.followed_at(now)}

    async def message_receipts(self, message_id: str) -> tuple[MessageRecord, list[ReceiptRecord]] | None:
        s = self._s
        message = s.messages.get(message_id)
        if message is None:
            return None
        found: list[ReceiptRecord] = []
        for agent_id, (seq_list, ids) in sorted(s.inbox.items()):
            for seq, mid in zip(seq_list, ids, strict=True):
                if mid == message_id:
                    times = s.receipts.get((agent_id, seq), {})
                    found.append(ReceiptRecord(agent_id, seq, times.get(WOKEN), times.get(READ), times.get(ACKED)))
        return message, found

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
        # Sweeping is not undone on error: it only deletes what nobody can reach any more. Memory is cheap to sweep
        # whole, so the batch bound is not applied here.
        report = SweepReport()
        s = self._s
        for k in [k for k, r in s.idempotency.items() if r.expires_at <= policy.now]:
            del s.idempotency[k]
            report.idempotency_keys += 1
        for aid in [a.agent_id for a in s.agents.values() if a.expires_at < policy.agents_expired_before]:
            s.by_token.pop(s.agents.pop(aid).token_hash, None)
            for claim_id in [k for k, c in s.claims.items() if c.holder == aid]:
                del s.claims[claim_id]
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
        kept = {(aid, q) for aid, (seq_list, _) in s.inbox.items() for q in seq_list}
        for gone in [k for k in s.receipts if k not in kept]:
            del s.receipts[gone]
        referenced = {m for _, ids in s.inbox.values() for m in ids}
        for mid in [m for m, r in s.messages.items() if m not in referenced and r.sent_at < policy.read_before]:
            del s.messages[mid]
            report.messages += 1
        return report


class InMemoryMeshStore:
    """For tests, single-process tools and as the reference the conformance suite is written against."""

    serial = True

    def __init__(self) -> None:
        self._state = _State()
        self._lock = anyio.Lock()

    async def search_messages(self, query: SearchQuery) -> list[SearchRow]:
        """``SearchStore``: every message scanned; the score is how often the terms occur."""
        s = self._state
        visible = None if query.viewer is None else set(s.inbox.get(query.viewer, ([], []))[1])
        found: list[SearchRow] = []
        for m in s.messages.values():
            if visible is not None and m.sender != query.viewer and m.message_id not in visible:
                continue
            words = matching_words(m.body, query.terms)
            if words is None:
                continue
            score = float(sum(1 for w in words if w in query.terms))
            snippet = plain_snippet(m.body, query.terms)
            found.append(SearchRow(m.message_id, m.sender, m.thread_id, m.sent_at, snippet, score))
        found.sort(key=lambda r: r.message_id)
        found.sort(key=lambda r: (r.score, r.sent_at), reverse=True)
        return found[query.offset : query.offset + query.limit]

    def _visible(self, viewer: str | None) -> tuple[list[MessageRecord], dict[str, set[str]]]:
        """The messages ``viewer`` may see (all when None), and each message's recipients."""
        s = self._state
        recipients: dict[str, set[str]] = {}
        for agent_id, (_, ids) in s.inbox.items():
            for mid in ids:
                recipients.setdefault(mid, set()).add(agent_id)
        shown = [
            m
            for m in s.messages.values()
            if viewer is None or m.sender == viewer or viewer in recipients.get(m.message_id, ())
        ]
        return shown, recipients

    async def list_threads(self, query: ThreadQuery) -> list[ThreadRow]:
        """``ThreadStore``: every message scanned."""
        shown, recipients = self._visible(query.viewer)
        by_thread: dict[str, list[MessageRecord]] = {}
        for m in shown:
            by_thread.setdefault(m.thread_id or m.message_id, []).append(m)
        rows = []
        for key, found in by_thread.items():
            last = max(found, key=lambda m: (m.sent_at, m.message_id))
            people = {m.sender for m in found} | {r for m in found for r in recipients.get(m.message_id, ())}
            rows.append(
                ThreadRow(
                    key,
                    len(found),
                    tuple(people),
                    last.message_id,
                    last.sender,
                    last.body[: PREVIEW_CHARS + 1],
                    last.sent_at,
                )
            )
        rows.sort(key=lambda r: r.thread_id)
        rows.sort(key=lambda r: r.last_at, reverse=True)
        return rows[query.offset : query.offset + query.limit]

    async def thread_messages(self, query: ThreadQuery) -> list[ThreadMessageRow]:
        shown, recipients = self._visible(query.viewer)
        found = sorted(
            (m for m in shown if (m.thread_id or m.message_id) == query.thread_id),
            key=lambda m: (m.sent_at, m.message_id),
        )
        return [
            ThreadMessageRow(
                m.message_id, m.sender, tuple(sorted(recipients.get(m.message_id, ()))), m.body, m.thread_id, m.sent_at
            )
            for m in found[query.offset : query.offset + query.limit]
        ]

    async def renew_and_read(
        self, token_hash: str, now: datetime, *, after: int | None, limit: int, shown: int = 0, active: bool = True
    ) -> tuple[AgentRecord, list[InboxEntry]] | None:
        async with self.transaction() as tx:
            agent = await tx.find_by_token(token_hash)
            if agent is None or not agent.live_at(now) or (after is not None and after > agent.last_seq):
                return None
            renewed = await tx.renew(token_hash, now, active=active)
            assert renewed is not None
            start = renewed.read_cursor if after is None else max(after, renewed.floor_seq)
            entries = await tx.read_inbox(renewed.agent_id, after=start, limit=limit)
            if shown and entries:
                through = entries[: min(shown, len(entries))][-1].seq
                await tx.mark_inbox(renewed.agent_id, after=start, through=through, now=now, marks=READ_ONLY)
            return renewed, entries

    async def mark_inbox(self, agent_id: str, *, after: int, through: int, now: datetime, marks: Marks) -> None:
        async with self.transaction() as tx:
            await tx.mark_inbox(agent_id, after=after, through=through, now=now, marks=marks)

    async def renew_and_deliver(
        self, token_hash: str, to: str, now: datetime, *, message_id: str, body: str, thread_id: str | None
    ) -> tuple[InboxEntry, bool] | None:
        """Transactions here never overlap (``serial``): the mesh's own transaction is as short."""
        return None

    async def claim_in_one_step(self, step: ClaimStep) -> ClaimedInOneStep | None:
        """As a send: the tasks' own transaction is as short here."""
        return None

    async def renew_and_claims(self, token_hash: str, now: datetime, repo: str) -> list[ClaimRecord] | None:
        """As a send: a claims check's own statements are as short here."""
        return None

    async def follow(self, agent_id: str, until: datetime) -> None:
        async with self.transaction() as tx:
            agent = await tx.get_agent(agent_id)
            if agent is not None:
                await tx.replace_agent(replace(agent, followed_until=until))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_MemoryTx]:
        async with self._lock:
            tx = _MemoryTx(self._state)
            try:
                yield tx
            except BaseException:
                tx.rollback()
                raise

    def standalone(self) -> AbstractAsyncContextManager[_MemoryTx]:
        return self.transaction()
