"""Wake-ups between processes sharing one SQLite file, through files beside it: after a commit that others wait for,
a process writes a byte to the file of its kind (``queued``: a run to claim; ``controls``: a steer or cancel; a run's
journal or its end: the run's file, ``run.<bucket>``) in ``<database>-wake/``, and the processes watching that file
wake their waiters of it. A commit nobody waits for (the mesh's) touches none of them and wakes nobody.

On Linux a process watches only the files of what it has waited for since it started (``follow``), each file an
inotify watch read on the event loop (``asyncinotify``: the loop polls the inotify descriptor beside its sockets, so
a touch wakes the waiters in the loop's next turn). An instance that followed no run hears no run's writes, and a
worker hears the queue and the controls, not every run's rows: with the directory watched, each process woke at every
write of every run. A watch once set stays: there are at most ``BUCKETS`` and three more, and removing an inotify
watch took 0.3 ms here (the kernel waits for its readers to let go), a stall of the loop at every run's end.
Elsewhere ``watchfiles`` watches the directory (every file), its thread looking at what the platform's notifications
gathered every ``STEP_MS`` and handing a batch over after one quiet step. Measured (bench/runs/wake.py, six
alternating pairs), a touch's wake-up took p50 0.25-0.38 ms on inotify against watchfiles' 3.3-3.5 ms, and a run's
SSE event on another API instance missed its goal (p99 within 3x of a no-op's) in every pair with watchfiles; see
docs/design.md.

A run's file is one of ``BUCKETS`` files, picked by a hash of the run id, created once and kept: its touch is one
write of an existing file (a file created and removed for each write cost a dozen times more here), and its
watchers wake the readers of the runs of that bucket, a run sharing it with another now and then (a spare read).

Not the database's ``-wal`` file: every commit writes it, the mesh's and the process's own included, and each would
wake the idle workers to look for runs.
"""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import anyio
from anyio.abc import TaskStatus
from watchfiles import awatch

if sys.platform == "linux":
    from asyncinotify import Inotify, Mask

KINDS = ("queued", "events", "controls")
RUN_PREFIX = "run."
BUCKETS = 256
WATCHING = "watching"
"""The file a process touches once its watch is set up: seeing its own touch come back is how it knows it watches
(a touch of another kind before that could be missed)."""
STEP_MS = 2
"""How often watchfiles' thread looks at what the notifications gathered: a wake-up lands within two steps of its
touch (it waits one quiet step for a burst to end). A smaller step costs an idle process more wake-ups of that
thread; a larger one is added to every run event a reader on another process waits for."""
RETURN_MS = 200
"""How long watchfiles' thread waits for a change before it returns to the loop. A cancelled watch ends only when
that thread returns (its stop event is set after the wait, not during it): with watchfiles' default of 5 s, every
shutdown of a process waited that long while the rest of it (an A2A call it follows) went on working."""


def run_file(run_id: str) -> str:
    """The name of the file a run's writes touch."""
    return f"{RUN_PREFIX}{zlib.crc32(run_id.encode()) % BUCKETS:02x}"


class WakeFiles:
    def __init__(self, database: Path) -> None:
        self.directory = Path(f"{database}-wake")
        self._followed: set[str] = set()
        self._inotify: Inotify | None = None

    def touch(self, name: str) -> None:
        """After a commit: wake the waiters of this file (a kind, or ``run_file``) in every process watching it (this
        one's too: a spare look)."""
        self._write(self.directory / name)

    def follow(self, name: str) -> None:
        """Watch this file from now on: a touch after this returns wakes this process."""
        if name in self._followed:
            return
        self._followed.add(name)
        if self._inotify is not None:
            self._add(self._inotify, name)

    def _add(self, inotify: Inotify, name: str) -> None:
        path = self.directory / name
        if not path.exists():
            self._write(path)
        inotify.add_watch(path, Mask.MODIFY)

    def _write(self, path: Path) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            self.directory.mkdir(exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.pwrite(fd, b"\0", 0)
        finally:
            os.close(fd)

    async def watch(self, wake: Callable[[str], None], *, task_status: TaskStatus[None]) -> None:
        """Call ``wake(name)`` for the touches of every process, until cancelled; started once watching. A name is
        a kind (``KINDS``) or a ``run_file``."""
        if sys.platform == "linux":
            await self.watch_inotify(wake, task_status=task_status)
        else:
            await self.watch_watchfiles(wake, task_status=task_status)

    if sys.platform == "linux":

        async def watch_inotify(self, wake: Callable[[str], None], *, task_status: TaskStatus[None]) -> None:
            """``watch`` through inotify, read on the event loop: a watch for each file followed."""
            self.directory.mkdir(exist_ok=True)
            with Inotify() as inotify:
                # Set up before it returns: a touch from now on is seen.
                for name in self._followed:
                    self._add(inotify, name)
                self._inotify = inotify
                task_status.started()
                try:
                    async for event in inotify:
                        if Mask.Q_OVERFLOW in event.mask:  # touches were lost: every waiter looks
                            for kind in KINDS:
                                wake(kind)
                        elif Mask.MODIFY in event.mask and event.watch is not None:
                            wake(event.watch.path.name)
                finally:
                    self._inotify = None

    async def watch_watchfiles(self, wake: Callable[[str], None], *, task_status: TaskStatus[None]) -> None:
        """``watch`` through watchfiles."""
        self.directory.mkdir(exist_ok=True)
        changes = awatch(
            self.directory, watch_filter=None, debounce=STEP_MS, step=STEP_MS, rust_timeout=RETURN_MS, recursive=False
        )
        watching = False
        first = anext(changes)
        async with anyio.create_task_group() as group:
            # Runs once the first anext suspends, which is after watchfiles set its watch up: the touch is seen.
            group.start_soon(self._announce)
            batch = await first
        try:
            while True:
                kinds = {Path(path).name for _change, path in batch}
                if not watching and WATCHING in kinds:
                    watching = True
                    task_status.started()
                for name in kinds:
                    if _wakes(name):
                        wake(name)
                batch = await anext(changes)
        finally:
            await changes.aclose()

    async def _announce(self) -> None:
        self.touch(WATCHING)


def _wakes(name: str) -> bool:
    return name in KINDS or name.startswith(RUN_PREFIX)
