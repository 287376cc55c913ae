"""Wake-ups for run readers and workers: in-process on one instance, LISTEN/NOTIFY across instances.

Keys are run ids (new events, a finish: SSE readers), ``control_key(run_id)`` (a steer or cancel: the worker
executing the run) and ``NEW_RUN`` (a run was queued: idle workers look for it). Controls have a key of their own so
that the worker is not woken by its own events. The writing transaction NOTIFYs (delivered at its commit); after the
commit the writer fires its own instance's waiters, which skip the echo.

A write of a run's journal (or its end) hands its observations to the run's readers with the wake-up, on the writing
instance and, when they fit the NOTIFY payload, on the others: a reader whose cursor sits right before them sends
them without reading the rows (``RunTail``). Any other wake-up, a gap in sequence numbers or a payload that did not
fit says "look": the reader reads the rows.

SQLite has no NOTIFY: processes sharing the file wake each other through files beside it, one per kind of key and
one per bucket of runs (their readers alone), each process watching the files of what it has waited for: its
subscriptions, and the runs it queued (``wakefiles.py``).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import NamedTuple

import anyio
from anyio.abc import TaskStatus
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from muster_api.db.dialect import Dialect, dialect_of
from muster_api.db.notify import MAX_PAYLOAD, Listening, PgNotifier
from muster_api.db.url import sqlite_path
from muster_api.dispatch.models import Run
from muster_api.dispatch.wakefiles import RUN_PREFIX, WakeFiles, run_file
from muster_dispatch import Observation
from muster_mesh import InboxEntry, LocalNotifier
from muster_mesh.notify import LocalSubscription

log = logging.getLogger("muster.dispatch.notify")

CHANNEL = "muster_dispatch"
NEW_RUN = "queued"


CONTROL_PREFIX = "control:"


def shielded() -> anyio.CancelScope:
    """Around one database call: a shutdown waits for it rather than tearing the connection down in the middle of
    it (aiosqlite then leaves a close pending that the loop cannot finish)."""
    return anyio.CancelScope(shield=True)


def control_key(run_id: str) -> str:
    return f"{CONTROL_PREFIX}{run_id}"


def kind_of(key: str) -> str:
    """Which kind of wake file a key's waiters watch (``wakefiles.KINDS``)."""
    if key == NEW_RUN:
        return "queued"
    return "controls" if key.startswith(CONTROL_PREFIX) else "events"


def _file_of(key: str) -> str:
    """The wake file of a key: its kind's, or for a run (its rows, its end) the run's own."""
    kind = kind_of(key)
    return run_file(key) if kind == "events" else kind


class RunEnd(NamedTuple):
    """A run's end as its worker stored it: the last sequence number of its journal, and the run (JSON)."""

    seq: int
    run: str


class RunOver(NamedTuple):
    """A run's whole journal and its end, as the wake-up of its end handed them over."""

    observations: tuple[Observation, ...]
    end: RunEnd


class RunTail:
    """What wake-ups handed over for one run while this process follows it: its latest observations (consecutive
    sequence numbers), its end once that was handed over, and how many wake-ups carried nothing (each one says: read
    the rows)."""

    KEEP = 256

    def __init__(self) -> None:
        self.observations: deque[Observation] = deque(maxlen=self.KEEP)
        self.end: RunEnd | None = None
        self.looks = 0

    def add(self, batch: Sequence[Observation], end: RunEnd | None) -> None:
        if batch:
            if self.observations and batch[0].seq != self.observations[-1].seq + 1:
                self.observations.clear()  # a gap (a notification missed or too large): only newer ones are whole
            self.observations.extend(batch)
        if end is not None:
            self.end = end

    def since(self, after: int) -> list[Observation] | None:
        """Every observation after ``after`` when the wake-ups handed them all over ([] once the handed end is
        reached); None when only the rows can tell."""
        if self.end is not None and after == self.end.seq:
            return []
        kept = self.observations
        if not kept or after >= kept[-1].seq or after < kept[0].seq - 1:
            return None
        return list(itertools.islice(kept, after - kept[0].seq + 1, None))


class RunWaiters(LocalNotifier):
    """The process's waiters, with the tails of the runs they follow: a wake-up without observations counts as a look
    for the runs it names. Beside them, the runs this process queued that no wake-up has named since (``unheard``):
    each is still as it was queued, since whatever writes a run's rows, its end or its cancellation wakes its readers
    (a lost listening connection or lost wake files wake them all, and forget these). And the runs this process queued
    whose first wake-up handed over their whole journal with their end (``ended``): a short run's end is one write,
    and its stream, opened once the POST answered, would otherwise read what that wake-up said. An end is final, so
    later wake-ups do not forget these; the oldest go beyond ``UNHEARD``."""

    UNHEARD = 1000

    def __init__(self, group: Callable[[str], str] | None = None) -> None:
        """``group``: the wake file of a run (SQLite), by which its unheard runs are also kept, so that a wake of one
        file forgets its runs in one lookup."""
        super().__init__()
        self.tails: dict[str, RunTail] = {}
        self.unheard: dict[str, Run] = {}
        self.ended: dict[str, RunOver] = {}
        self._group = group
        self._grouped: dict[str, set[str]] = {}

    def queued(self, run: Run) -> None:
        self.unheard[run.id] = run
        if self._group is not None:
            self._grouped.setdefault(self._group(run.id), set()).add(run.id)
        if len(self.unheard) > self.UNHEARD:  # the oldest goes: its reader reads it, as any other
            self.forget(next(iter(self.unheard)))

    def forget(self, run_id: str) -> None:
        if self.unheard.pop(run_id, None) is not None and self._group is not None:
            name = self._group(run_id)
            grouped = self._grouped[name]
            grouped.discard(run_id)
            if not grouped:
                del self._grouped[name]

    def forget_group(self, name: str) -> None:
        """Forget the unheard runs of this wake file (``group``)."""
        for run_id in self._grouped.pop(name, ()):
            del self.unheard[run_id]

    def forget_all(self) -> None:
        self.unheard.clear()
        self._grouped.clear()

    def fire(self, agent_ids: Iterable[str], entries: Mapping[str, InboxEntry] | None = None) -> None:
        keys = list(agent_ids)
        for key in keys:
            self.forget(key)
            if (tail := self.tails.get(key)) is not None:
                tail.looks += 1
        super().fire(keys, entries)

    def fire_all(self) -> None:
        self.forget_all()
        for tail in self.tails.values():
            tail.looks += 1
        super().fire_all()

    def hand(self, run_id: str, batch: Sequence[Observation], end: RunEnd | None) -> None:
        if end is not None and run_id in self.unheard:
            self._keep_ended(run_id, batch, end)
        self.forget(run_id)
        if (tail := self.tails.get(run_id)) is not None:
            tail.add(batch, end)
        super().fire([run_id])

    def _keep_ended(self, run_id: str, batch: Sequence[Observation], end: RunEnd) -> None:
        """Kept when the batch is the whole journal (1, 2, … up to the end's last sequence number), not too long."""
        whole = len(batch) == end.seq and all(o.seq == seq for seq, o in enumerate(batch, start=1))
        if whole and len(batch) <= RunTail.KEEP:
            self.ended[run_id] = RunOver(tuple(batch), end)
            if len(self.ended) > self.UNHEARD:
                del self.ended[next(iter(self.ended))]


# How ``RunListener.handing`` begins a payload, up to the run id.
_HANDED_RUN = '{"r":"'


# Built once: ``json.dumps`` with options builds an encoder at each call.
_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def encode_rows(batch: Sequence[Observation]) -> str:
    """A batch of journal rows as one JSON array of ``[seq, at, source, scope, event]``: what a PostgreSQL write of
    them sends as its one parameter and what its NOTIFY carries, encoded once (one call of the C encoder where a
    column each for scope and event was forty calls, and asyncpg's array encoding checked every element)."""
    return _compact([[o.seq, o.at, o.source, o.scope, o.event] for o in batch])


class RunListener(PgNotifier):
    """The dispatch channel: a payload is either keys (``a,b``) or a run's observations (``{"r": run id, "o":
    [[seq, at, source, scope, event], …], "e": [last seq, run JSON] or null}``)."""

    def __init__(self, engine: AsyncEngine, waiters: RunWaiters, listening: Listening | None = None) -> None:
        super().__init__(engine, channel=CHANNEL, local=waiters, listening=listening)
        self.waiters = waiters

    def handing(self, run_id: str, rows: str, end: RunEnd | None) -> str:
        """The payload for a run's rows already encoded (``encode_rows``: the same text the statement stores)."""
        ended = _compact(end)
        payload = f'{self.instance}|{{"r":{_compact(run_id)},"o":{rows},"e":{ended}}}'
        return payload if len(payload.encode()) <= MAX_PAYLOAD else f"{self.instance}|{run_id}"

    def handed(self, rest: str) -> None:
        # Every instance hears every run's rows: one that follows none of them and queued none of them reads the run
        # id, not the rows.
        if rest.startswith(_HANDED_RUN) and (end := rest.find('"', len(_HANDED_RUN))) > 0:
            run_id = rest[len(_HANDED_RUN) : end]
            if "\\" not in run_id and run_id not in self.waiters.tails and run_id not in self.waiters.unheard:
                return
        try:
            doc = json.loads(rest)
            run_id, end = str(doc["r"]), doc["e"]
            batch = [Observation(int(seq), at, source, scope, event) for seq, at, source, scope, event in doc["o"]]
            ended = RunEnd(int(end[0]), str(end[1])) if end is not None else None
        except (ValueError, KeyError, TypeError, IndexError):
            log.warning("unreadable run notification; waking every reader to read the rows")
            self.waiters.fire_all()
            return
        self.waiters.hand(run_id, batch, ended)


class RunNotifier:
    def __init__(self, engine: AsyncEngine, dialect: Dialect | None = None, listening: Listening | None = None) -> None:
        """``listening``: the process's listening connection (PostgreSQL), else one of this notifier's own."""
        dialect = dialect or dialect_of(engine)
        on_postgresql: bool = dialect.pick(sqlite=False, postgresql=True)
        # An in-memory SQLite database has no other process to hear from.
        database = None if on_postgresql else sqlite_path(engine.url.render_as_string())
        self._files = WakeFiles(database) if database is not None else None
        self._local = RunWaiters(run_file if self._files is not None else None)
        self._pg = RunListener(engine, self._local, listening) if on_postgresql else None
        self._keys: Counter[str] = Counter()
        # The run keys subscribed here, by wake file (SQLite): a wake of one file fires its readers in one lookup.
        self._readers: dict[str, set[str]] = {}

    @property
    def shared(self) -> bool:
        """Whether other processes' writes wake this one (otherwise waiters also look again now and then)."""
        return self._pg is not None or self._files is not None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        if self._pg is not None:
            await self._pg.run(task_status=task_status)
        elif self._files is not None:
            await self._files.watch(self._wake_name, task_status=task_status)
        else:
            task_status.started()

    @asynccontextmanager
    async def subscribe(self, key: str) -> AsyncIterator[LocalSubscription]:
        self._keys[key] += 1
        self._local.tails.setdefault(key, RunTail())
        if self._files is not None:
            name = _file_of(key)
            self._files.follow(name)
            if kind_of(key) == "events":
                self._readers.setdefault(name, set()).add(key)
        try:
            async with self._local.subscribe(key) as sub:
                yield sub
        finally:
            self._keys[key] -= 1
            if not self._keys[key]:
                del self._keys[key]
                del self._local.tails[key]
                self._unread(key)

    def _unread(self, key: str) -> None:
        """``key`` no longer followed here: out of its file's readers."""
        if self._files is None or kind_of(key) != "events":
            return
        name = _file_of(key)
        readers = self._readers[name]
        readers.discard(key)
        if not readers:
            del self._readers[name]

    def tail(self, run_id: str) -> RunTail:
        """The run's tail while this process has a subscription to it."""
        return self._local.tails[run_id]

    @contextmanager
    def queuing(self, run: Run) -> Iterator[None]:
        """Around the write that queues ``run``: from before it, any wake-up naming the run (even one that comes
        before the write's answer) says it changed; if the write fails, the run is not known here."""
        if self._files is not None:  # its writes wake this process while it is unheard of
            self._files.follow(run_file(run.id))
        self._local.queued(run)
        try:
            yield
        except BaseException:
            self._local.forget(run.id)
            raise

    def unheard(self, run_id: str) -> Run | None:
        """The run as this process queued it, when no wake-up has named it since: what a reader subscribed from now
        on would read (a queued run, no rows), without reading it."""
        return self._local.unheard.get(run_id)

    def ended(self, run_id: str) -> RunOver | None:
        """The run's whole journal and its end, when this process queued it and the first wake-up naming it handed
        them over: what a reader would read, without reading it."""
        return self._local.ended.get(run_id)

    def _wake_name(self, name: str) -> None:
        if name.startswith(RUN_PREFIX):  # the runs of that file: their readers, and those queued here unheard of
            self._local.forget_group(name)
            self._local.fire(list(self._readers.get(name, ())))
            return
        if name == "events":  # every run's readers look (touches were lost)
            self._local.forget_all()
        self._local.fire([key for key in self._keys if kind_of(key) == name])

    def _touch(self, keys: Iterable[str]) -> None:
        if self._files is None:
            return
        for name in {_file_of(key) for key in keys}:  # a run's rows or its end: the readers of its file alone
            self._files.touch(name)

    async def in_transaction(self, conn: AsyncConnection, keys: Sequence[str]) -> None:
        if self._pg is not None:
            await self._pg.notify_in_transaction(conn, keys)

    def payload(self, keys: Sequence[str]) -> tuple[str | None, str | None]:
        """(channel, payload) of the one NOTIFY for these keys, for a statement that notifies itself; (None, None)
        without LISTEN/NOTIFY or when the keys need several notifications."""
        return self._pg.payload(keys) if self._pg is not None else (None, None)

    def fire(self, keys: Sequence[str]) -> None:
        """After a commit: wake the waiters of these keys, in this process and (SQLite) in the others."""
        self._local.fire(keys)
        self._touch(keys)

    def hand(self, run_id: str, batch: Sequence[Observation], end: RunEnd | None = None) -> None:
        """After a commit of these journal rows (and of the run's end): wake this instance's readers of the run,
        handing the rows (and the end) over."""
        self._local.hand(run_id, batch, end)
        self._touch([run_id])

    def handing(self, run_id: str, rows: str, end: RunEnd | None = None) -> tuple[str, str] | None:
        """(channel, payload) of the one NOTIFY for such a write (its rows as ``encode_rows`` gave them), carrying
        the rows when they fit; None without LISTEN/NOTIFY."""
        return (CHANNEL, self._pg.handing(run_id, rows, end)) if self._pg is not None else None
