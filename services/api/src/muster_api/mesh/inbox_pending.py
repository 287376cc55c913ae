"""Pending messages into their recipients' inboxes on PostgreSQL, in one statement shared by the claims of the moment.

A task claim writes its message to the poster into ``mesh_inbox_pending`` (``tasks_store.CLAIM_PG``) and answers once
the message is in the poster's inbox. Storing it in the claim's own statement would bump the poster's sequence
there, holding the poster's row until the claim commits (fsync included): every claimer of one poster's tasks would
queue on that row. Here one statement delivers every pending row, and the claims that arrive while it runs wait
for the next one together (group commit): the poster's row is taken once per delivery, not once per claim.

The statement takes the pending rows with a plain ``FOR UPDATE`` (not ``SKIP LOCKED``): when it returns, every row
that was pending when it began is in an inbox, delivered by it or by another statement that committed first (another
instance's, or the sweeper's). A row whose recipient is not live is dropped, as a send to it would be. Rows a killed
process left are delivered by the next delivery of any instance, by the mesh sweeper and at start; whoever delivers
them wakes their recipients (a claim wakes its own poster, with the message).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import anyio

log = logging.getLogger("muster.mesh")

Fetch = Callable[..., Awaitable[list[Any]]]
Wake = Callable[[Sequence[str]], Awaitable[None]]

# How many pending rows one statement takes (more wait for the next one, run at once).
BATCH = 500

# $1 now (a recipient is live when its lease runs past it), $2 the batch. ``p`` takes the oldest pending rows; ``l``
# locks their live recipients' rows in agent_id order, as every writer of several agent rows locks them (a send or
# another delivery cannot deadlock with this one); ``b`` bumps each recipient's sequence by its count of messages,
# and ``s`` numbers them in pending order below the new sequence. One row per pending row taken: its message, its
# recipient and its sequence (NULL: dropped, the recipient not live).
DELIVER_PENDING = """
WITH p AS MATERIALIZED (
    DELETE FROM mesh_inbox_pending
    WHERE id IN (SELECT id FROM mesh_inbox_pending ORDER BY id LIMIT $2 FOR UPDATE)
    RETURNING id, recipient, message_id, sender, body, thread_id, sent_at
), l AS MATERIALIZED (
    SELECT agent_id FROM mesh_agents
    WHERE agent_id IN (SELECT recipient FROM p) AND expires_at > $1
    ORDER BY agent_id
    FOR UPDATE
), n AS (
    SELECT recipient, count(*) AS k FROM p WHERE recipient IN (SELECT agent_id FROM l) GROUP BY recipient
), b AS (
    UPDATE mesh_agents SET last_seq = mesh_agents.last_seq + n.k
    FROM n WHERE mesh_agents.agent_id = n.recipient
    RETURNING mesh_agents.agent_id, mesh_agents.last_seq, n.k
), s AS MATERIALIZED (
    SELECT p.*, b.last_seq - b.k + row_number() OVER (PARTITION BY p.recipient ORDER BY p.id) AS seq
    FROM p JOIN b ON b.agent_id = p.recipient
), m AS (
    INSERT INTO mesh_messages (message_id, sender, body, thread_id, sent_at)
    SELECT message_id, sender, body, thread_id, sent_at FROM s
), i AS (
    INSERT INTO mesh_inbox (recipient, seq, message_id)
    SELECT recipient, seq, message_id FROM s
)
SELECT p.message_id, p.recipient, s.seq FROM p LEFT JOIN s ON s.id = p.id
"""

# A message another statement delivered: its sequence (none: dropped, or already swept).
_DELIVERED_SEQ = "SELECT seq FROM mesh_inbox WHERE message_id = $1"


class Delivered(NamedTuple):
    message_id: str
    recipient: str
    seq: int | None  # None: dropped, the recipient not live


async def deliver_pending(fetch: Fetch, now: datetime) -> list[Delivered]:
    """Every pending row delivered (or dropped)."""
    done: list[Delivered] = []
    while True:
        rows = await fetch(DELIVER_PENDING, now, BATCH)
        done.extend(Delivered(r["message_id"], r["recipient"], r["seq"]) for r in rows)
        if len(rows) < BATCH:
            return done


def reached(delivered: Sequence[Delivered]) -> set[str]:
    """The agents these rows went into the inbox of (not those dropped)."""
    return {d.recipient for d in delivered if d.seq is not None}


@dataclass
class _Round:
    """The claims waiting for one delivery statement."""

    message_ids: set[str] = field(default_factory=set)
    now: datetime | None = None
    done: bool = False

    def join(self, message_id: str, now: datetime) -> None:
        self.message_ids.add(message_id)
        self.now = now if self.now is None else max(self.now, now)


class Deliverer:
    """Group commit of pending messages, per process: while one delivery runs, the claims that arrive gather for the
    next, which one of them runs for all (the lock hands it on in turn). Recipients of rows no claim here waits for
    (another instance's, or a killed process's) are handed to ``wake``: the claim that waits for a row wakes its
    recipient itself, with the message; another instance's claim wakes its own again, which costs its readers a
    spare look."""

    def __init__(self, fetch: Fetch, wake: Wake | None = None) -> None:
        self._fetch = fetch
        self._wake = wake
        self._lock = anyio.Lock()
        self._gathering: _Round | None = None
        # The sequences of the messages this process's claims wait for, as deliveries found them.
        self._seqs: dict[str, int | None] = {}
        self._waiting: set[str] = set()

    async def deliver(self, message_id: str, now: datetime) -> int | None:
        """The sequence of a pending message once it is in its recipient's inbox (None: dropped, the recipient not
        live)."""
        round_ = self._gathering
        if round_ is None:
            round_ = self._gathering = _Round()
        round_.join(message_id, now)
        self._waiting.add(message_id)
        try:
            async with self._lock:
                if not round_.done:
                    await self._run(round_)
            if message_id in self._seqs:
                return self._seqs[message_id]
            # Delivered by another instance's statement (or the sweeper's), which this one waited for.
            rows = await self._fetch(_DELIVERED_SEQ, message_id)
            return rows[0]["seq"] if rows else None
        finally:
            self._waiting.discard(message_id)
            self._seqs.pop(message_id, None)

    async def _run(self, round_: _Round) -> None:
        if self._gathering is round_:
            self._gathering = None
        # An earlier statement may have delivered them all already (their claims committed before it began).
        if not round_.message_ids <= self._seqs.keys():
            assert round_.now is not None
            delivered = await deliver_pending(self._fetch, round_.now)
            self._seqs.update((d.message_id, d.seq) for d in delivered if d.message_id in self._waiting)
            await self._wake_others([d for d in delivered if d.message_id not in self._waiting])
        round_.done = True

    async def deliver_leftovers(self, now: datetime) -> None:
        """Every pending row delivered now (a killed process's, at start), its recipient woken."""
        await self._wake_others(await deliver_pending(self._fetch, now))

    async def _wake_others(self, delivered: list[Delivered]) -> None:
        others = reached(delivered)
        if not others or self._wake is None:
            return
        try:
            await self._wake(sorted(others))
        except Exception:  # committed: they see the messages at their next read
            log.warning("wake-up publish failed after delivering held-back messages", exc_info=True)


__all__ = ["BATCH", "DELIVER_PENDING", "Delivered", "Deliverer", "Wake", "deliver_pending", "reached"]
