"""Wake-ups across API instances sharing one PostgreSQL: LISTEN/NOTIFY on one channel per capability (the mesh's
recipients, the runs of dispatch).

The sending transaction itself NOTIFYs the recipients' agent ids (``notify_in_transaction``, run by the SQL store),
so the notification leaves exactly when the message commits and costs no transaction of its own. Each notification
carries the sending instance's id: that instance has already woken its own waiters through ``publish`` (in-process,
no round trip) and skips its own echo. A mesh notification carries the message itself when it fits: a waiter on
another instance then answers from it, as one on the sending instance does, without reading the store. Every
instance keeps one dedicated asyncpg connection listening. A lost listener connection is re-opened and then every
local waiter is woken once, since wake-ups may have been missed meanwhile: waiters re-read the store, so a spurious
wake costs one read, a missed one would cost a whole long-poll.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import anyio
import asyncpg  # type: ignore[import-untyped]
from anyio.abc import TaskStatus
from sqlalchemy import bindparam, select
from sqlalchemy import func as sqlfunc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from muster_mesh import InboxEntry, LocalNotifier, MessageRecord
from muster_mesh.notify import LocalSubscription

log = logging.getLogger("muster.notify")

CHANNEL = "muster_mesh"
# NOTIFY payloads must stay under 8000 bytes; agent ids are at most 64 characters.
MAX_PAYLOAD = 7000
RECONNECT_SECONDS = 1.0


def _chunks(agent_ids: Sequence[str]) -> list[str]:
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for agent_id in sorted(set(agent_ids)):
        if current and size + len(agent_id) + 1 > MAX_PAYLOAD:
            chunks.append(",".join(current))
            current, size = [], 0
        current.append(agent_id)
        size += len(agent_id) + 1
    if current:
        chunks.append(",".join(current))
    return chunks


def _handed(message: MessageRecord, seqs: Mapping[str, int]) -> str:
    """A message and its recipients' sequences as a notification payload (a JSON object: agent ids never hold
    ``{``)."""
    m = [message.message_id, message.sender, message.body, message.thread_id, message.sent_at.isoformat()]
    return json.dumps({"m": m, "s": dict(seqs)}, separators=(",", ":"), ensure_ascii=False)


def _handed_around_seq(message: MessageRecord, agent_id: str) -> tuple[str, str]:
    """``_handed(message, {agent_id: seq})`` cut around the sequence, for a statement that learns the sequence as it
    stores the message and writes it in between."""
    m = [message.message_id, message.sender, message.body, message.thread_id, message.sent_at.isoformat()]
    head = json.dumps({"m": m}, separators=(",", ":"), ensure_ascii=False)[:-1]
    return f'{head},"s":{{{json.dumps(agent_id, ensure_ascii=False)}:', "}}"


def _entries(payload: str) -> dict[str, InboxEntry]:
    doc = json.loads(payload)
    message_id, sender, body, thread_id, sent_at = doc["m"]
    message = MessageRecord(message_id, sender, body, thread_id, datetime.fromisoformat(sent_at))
    return {agent_id: InboxEntry(seq=seq, message=message) for agent_id, seq in doc["s"].items()}


def _setter(event: anyio.Event) -> Any:
    return lambda _conn: event.set()


class PgNotifier:
    def __init__(self, engine: AsyncEngine, *, channel: str = CHANNEL) -> None:
        # Another capability (dispatch runs) listens on its own channel with the same machinery.
        self.channel = channel
        self._notify = select(sqlfunc.pg_notify(channel, bindparam("p_payload")))
        self._engine = engine
        self._dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.instance = uuid.uuid4().hex[:12]
        self.local = LocalNotifier()
        self.listener_pid: int | None = None
        self.reconnects = 0

    @asynccontextmanager
    async def subscribe(self, agent_id: str) -> AsyncIterator[LocalSubscription]:
        async with self.local.subscribe(agent_id) as sub:
            yield sub

    @property
    def waiting(self) -> int:
        return self.local.waiting

    async def notify_in_transaction(self, conn: AsyncConnection, agent_ids: Sequence[str]) -> None:
        """NOTIFY the other instances from inside the sending transaction (delivered at its commit)."""
        for chunk in _chunks(agent_ids):
            await conn.execute(self._notify, {"p_payload": f"{self.instance}|{chunk}"})

    def payload(
        self, agent_ids: Sequence[str], message: MessageRecord | None = None, seqs: Mapping[str, int] | None = None
    ) -> tuple[str | None, str | None]:
        """(channel, payload) of the one NOTIFY for these recipients, or (None, None) when they need several. With
        the message and its sequences, the payload carries them when they fit."""
        chunks = _chunks(agent_ids)
        if len(chunks) != 1:
            return None, None
        if message is not None and seqs:
            handed = _handed(message, seqs)
            if len(handed.encode()) <= MAX_PAYLOAD:
                return self.channel, f"{self.instance}|{handed}"
        return self.channel, f"{self.instance}|{chunks[0]}"

    def payload_around_seq(self, agent_id: str, message: MessageRecord) -> tuple[str, str, str] | None:
        """(channel, head, tail) of the one notification of a direct send carrying its message, the recipient's
        sequence to be written between head and tail by the statement that takes it; None when it does not fit."""
        head, tail = _handed_around_seq(message, agent_id)
        # Room for the longest sequence (a bigint: at most 20 characters).
        if len(head.encode()) + len(tail) + 20 > MAX_PAYLOAD:
            return None
        return self.channel, f"{self.instance}|{head}", tail

    async def publish(self, agent_ids: Sequence[str], entries: Mapping[str, InboxEntry] | None = None) -> None:
        # Called after the commit: this instance's own waiters, without a round trip.
        self.local.fire(agent_ids, entries)

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        instance, _, rest = payload.partition("|")
        if instance == self.instance:
            return
        if not rest.startswith("{"):
            self.local.fire(rest.split(","))
            return
        try:
            entries = _entries(rest)
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable mesh notification; waking its readers without the message")
            self.local.fire_all()
            return
        self.local.fire(list(entries), entries)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled. The first connection must succeed (start-up fails loudly otherwise); later losses
        are retried every second."""
        started = False
        while True:
            try:
                conn = await asyncpg.connect(self._dsn)
            except (OSError, asyncpg.PostgresError) as exc:
                if not started:
                    raise
                log.warning("mesh listener cannot reconnect (%s); retrying", type(exc).__name__)
                await anyio.sleep(RECONNECT_SECONDS)
                continue
            lost = anyio.Event()
            conn.add_termination_listener(_setter(lost))
            try:
                await conn.add_listener(self.channel, self._on_notify)
                self.listener_pid = conn.get_server_pid()
                if started:
                    self.reconnects += 1
                    log.info("mesh listener reconnected; waking every waiter once")
                    self.local.fire_all()
                else:
                    started = True
                    task_status.started()
                await lost.wait()
                log.warning("mesh listener connection lost; reconnecting")
            finally:
                with anyio.CancelScope(shield=True):
                    if not conn.is_closed():
                        await conn.close(timeout=2)
