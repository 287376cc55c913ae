"""Wake-ups across API instances sharing one PostgreSQL: LISTEN/NOTIFY on one channel per capability (the mesh's
recipients, the runs of dispatch), heard on one connection per process (``Listening``).

A mesh wake-up leaves right after the message commits, in a statement of its own (``publish``), before the send
answers. Not from inside the sending statement: PostgreSQL serialises the commits of transactions that NOTIFY (a
lock held through the commit's WAL flush), so senders that notified in their own statement committed one flush at a
time, all their row locks held meanwhile; a statement that only notifies writes no WAL and holds that lock for
moments. These statements run one at a time, each carrying the wake-ups of every send that published meanwhile, on
the instance's listening connection: no checkout from the engine's pool, which costs more CPU than the statement.
Dispatch's run writes still notify from inside their transaction (``notify_in_transaction``).

Each notification carries the sending instance's id: that instance has already woken its own waiters (in-process, no
round trip) and skips its own echo. A mesh notification carries the message itself when it fits: a waiter on another
instance then answers from it, as one on the sending instance does, without reading the store. Every instance keeps
one dedicated asyncpg connection listening. A lost listener connection is re-opened and then every local waiter is
woken once, since wake-ups may have been missed meanwhile: waiters re-read the store, so a spurious wake costs one
read, a missed one would cost a whole long-poll.

The capabilities of a process share that one listening connection (``Runtime.listening``): PostgreSQL signals every
listening backend of the database at every NOTIFY, whatever its channel, so a connection per channel doubled what
each notification cost the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import anyio
import asyncpg  # type: ignore[import-untyped]
from anyio.abc import TaskStatus
from sqlalchemy import bindparam, select
from sqlalchemy import func as sqlfunc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from muster_api.db.driver_pool import asyncpg_dsn
from muster_api.errors import NotReadyError
from muster_mesh import InboxEntry, LocalNotifier, MessageRecord
from muster_mesh.notify import LocalSubscription

log = logging.getLogger("muster.notify")

CHANNEL = "muster_mesh"
# NOTIFY payloads must stay under 8000 bytes; agent ids are at most 64 characters.
MAX_PAYLOAD = 7000
RECONNECT_SECONDS = 1.0
# One statement for any number of notifications; it writes nothing, so its commit waits for no WAL flush.
_NOTIFY_ALL = "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p"


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


def _entries(payload: str) -> dict[str, InboxEntry]:
    doc = json.loads(payload)
    message_id, sender, body, thread_id, sent_at = doc["m"]
    message = MessageRecord(message_id, sender, body, thread_id, datetime.fromisoformat(sent_at))
    return {agent_id: InboxEntry(seq=seq, message=message) for agent_id, seq in doc["s"].items()}


def _setter(event: anyio.Event) -> Any:
    return lambda _conn: event.set()


Callback = Callable[[Any, int, str, str], None]


class Listening:
    """The one listening connection of a process, for every channel its capabilities listen on (``add``); re-opened
    when it is lost, and each channel's ``on_reconnect`` called then. ``run`` (or ``running``) keeps it; the first
    connection must succeed (start-up fails loudly otherwise), later losses are retried every second."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._channels: dict[str, tuple[Callback, Callable[[], None]]] = {}
        # Held while the connection is set up and while a channel is added, so that none is missed between them.
        self._setting_up = anyio.Lock()
        self.connection: Any = None
        self.pid: int | None = None
        self.active = False  # run is keeping it

    async def add(self, channel: str, on_notify: Callback, on_reconnect: Callable[[], None]) -> None:
        """Listen on ``channel`` from now on (at once when connected, else as soon as the connection is up)."""
        async with self._setting_up:
            self._channels[channel] = (on_notify, on_reconnect)
            if self.connection is not None:
                await self.connection.add_listener(channel, on_notify)

    async def remove(self, channel: str) -> None:
        async with self._setting_up:
            on_notify, _ = self._channels.pop(channel)
            conn = self.connection
            if conn is not None and not conn.is_closed():
                with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                    await conn.remove_listener(channel, on_notify)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Kept while in it."""
        async with anyio.create_task_group() as tg:
            await tg.start(self.run)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self.active = True
        try:
            await self._keep(task_status)
        finally:
            self.active = False

    async def _keep(self, task_status: TaskStatus[None]) -> None:
        started = False
        while True:
            try:
                conn = await asyncpg.connect(self._dsn)
            except (OSError, asyncpg.PostgresError) as exc:
                if not started:
                    raise
                log.warning("listening connection cannot reconnect (%s); retrying", type(exc).__name__)
                await anyio.sleep(RECONNECT_SECONDS)
                continue
            lost = anyio.Event()
            conn.add_termination_listener(_setter(lost))
            try:
                async with self._setting_up:
                    for channel, (on_notify, _) in self._channels.items():
                        await conn.add_listener(channel, on_notify)
                    self.pid = conn.get_server_pid()
                    self.connection = conn
                if started:
                    log.info("listening connection reconnected; waking every waiter once")
                    for _, on_reconnect in list(self._channels.values()):
                        on_reconnect()
                else:
                    started = True
                    task_status.started()
                await lost.wait()
                log.warning("listening connection lost; reconnecting")
            finally:
                self.connection = None
                with anyio.CancelScope(shield=True):
                    if not conn.is_closed():
                        await conn.close(timeout=2)


class PgNotifier:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        channel: str = CHANNEL,
        local: LocalNotifier | None = None,
        listening: Listening | None = None,
    ) -> None:
        """``listening``: the process's listening connection, kept by whoever made it (``Runtime``); without it,
        ``run`` keeps a connection of this notifier's own."""
        # Another capability (dispatch runs) listens on its own channel with the same machinery, its own waiters
        # and its own payloads (``handed``).
        self.channel = channel
        self._notify = select(sqlfunc.pg_notify(channel, bindparam("p_payload")))
        self._listening = listening or Listening(asyncpg_dsn(engine))
        self._own = listening is None
        self.instance = uuid.uuid4().hex[:12]
        self.local = local or LocalNotifier()
        # Mesh wake-ups waiting for the statement that sends them (see _send), and the last batch that failed.
        self._queued: list[str] = []
        # asyncio's lock: anyio's yields to the event loop on every acquire, a loop pass per send.
        self._sending = asyncio.Lock()
        self._failed: tuple[list[str], Exception] | None = None
        self.reconnects = 0

    @property
    def listener_pid(self) -> int | None:
        """The server process of the listening connection (the NOTIFY statements of ``publish`` run on it too)."""
        return self._listening.pid

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

    async def publish(self, agent_ids: Sequence[str], entries: Mapping[str, InboxEntry] | None = None) -> None:
        """After the commit: this instance's own waiters at once (no round trip), then the other instances'. The
        statement runs to its end if the caller is cancelled meanwhile: the message is committed, and a wake-up left
        in the queue would wait for the next send to leave."""
        self.local.fire(agent_ids, entries)
        with anyio.CancelScope(shield=True):
            await self._send(self._wake_payloads(agent_ids, entries))

    def _wake_payloads(self, agent_ids: Sequence[str], entries: Mapping[str, InboxEntry] | None) -> list[str]:
        """One payload carrying the message when every recipient got the same one and it fits, else the agent
        ids."""
        messages = {entry.message for entry in entries.values()} if entries else set()
        if entries and len(messages) == 1 and set(entries) == set(agent_ids):
            _, payload = self.payload(agent_ids, messages.pop(), {a: e.seq for a, e in entries.items()})
            if payload is not None:
                return [payload]
        return [f"{self.instance}|{chunk}" for chunk in _chunks(agent_ids)]

    async def _send(self, payloads: list[str]) -> None:
        """NOTIFY these payloads, in one statement with those of every publish waiting meanwhile: one statement at a
        time, each taking what has queued up while the previous one ran."""
        batch = self._queued
        batch.extend(payloads)
        async with self._sending:
            if batch is self._queued:  # not sent yet by a publish ahead of this one
                self._queued = []
                self._failed = None
                try:
                    await self._notify_now(batch)
                except Exception as error:
                    self._failed = (batch, error)
                    raise
            elif self._failed is not None and self._failed[0] is batch:
                raise self._failed[1]

    async def _notify_now(self, payloads: list[str]) -> None:
        conn = self._listening.connection
        if conn is None:
            # Between a lost listening connection and the next: the other instances' waiters read the store when
            # it comes back (every waiter is woken then), or at the end of their long-poll.
            raise NotReadyError("the notifier is not connected to PostgreSQL")
        await conn.execute(_NOTIFY_ALL, self.channel, payloads)

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        instance, _, rest = payload.partition("|")
        if instance == self.instance:
            return
        if not rest.startswith("{"):
            self.local.fire(rest.split(","))
            return
        self.handed(rest)

    def handed(self, rest: str) -> None:
        """A notification that carries what changed (a JSON object): here a mesh message and its sequences."""
        try:
            entries = _entries(rest)
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable mesh notification; waking its readers without the message")
            self.local.fire_all()
            return
        self.local.fire(list(entries), entries)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled (started once listening)."""
        async with anyio.create_task_group() as tg:
            if self._own:
                await tg.start(self._listening.run)
            elif not self._listening.active:
                raise RuntimeError("the process's listening connection is not kept: run Runtime.running() first")
            await self._listening.add(self.channel, self._on_notify, self._reconnected)
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                with anyio.CancelScope(shield=True):
                    await self._listening.remove(self.channel)

    def _reconnected(self) -> None:
        self.reconnects += 1
        self.local.fire_all()
