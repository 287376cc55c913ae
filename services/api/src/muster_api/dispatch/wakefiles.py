"""Wake-ups between processes sharing one SQLite file, through files beside it: after a commit that others wait for,
a process writes a byte to the file of its kind (``queued``: a run to claim; ``events``: a run's journal or its end;
``controls``: a steer or cancel) in ``<database>-wake/``, and every process watching that directory wakes its
waiters of that kind. A commit nobody waits for (the mesh's) touches none of them and wakes nobody.

On Linux the watch is inotify read on the event loop (``asyncinotify``: the loop polls the inotify descriptor beside
its sockets, so a touch wakes the waiters in the loop's next turn); elsewhere ``watchfiles``, whose thread looks at
what the platform's notifications gathered every ``STEP_MS`` and hands a batch over after one quiet step. Measured
(bench/runs/wake.py, six alternating pairs), a touch's wake-up took p50 0.25-0.38 ms against watchfiles' 3.3-3.5 ms,
and a run's SSE event on another API instance missed its goal (p99 within 3x of a no-op's) in every pair with
watchfiles; see docs/design.md.

A run's journal and its end wake only the readers of that run: the writer creates, writes and removes
``run.<run id>`` there (nothing is left behind), and a watcher wakes that run's readers alone. With one file for
all runs, every write woke every stream of every process, and each read the database to find nothing new: with
eight runs followed at once, eight reads for each write. A run's rows are written by one process at a time (its
worker), one write after the other, so no two writers race on one run's file.

Not the database's ``-wal`` file: every commit writes it, the mesh's and the process's own included, and each would
wake the idle workers to look for runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
from anyio.abc import TaskStatus
from watchfiles import awatch

if sys.platform == "linux":
    from asyncinotify import Inotify, Mask

KINDS = ("queued", "events", "controls")
RUN_PREFIX = "run."
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


class WakeFiles:
    def __init__(self, database: Path) -> None:
        self.directory = Path(f"{database}-wake")

    def touch(self, kind: str) -> None:
        """After a commit: wake the watching processes' waiters of this kind (this one's too: a spare look)."""
        self._write(self.directory / kind)

    def touch_run(self, run_id: str) -> None:
        """After a commit of a run's rows or its end: wake the readers of that run, in every watching process."""
        path = self.directory / f"{RUN_PREFIX}{run_id}"
        self._write(path)
        os.unlink(path)

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
        a kind (``KINDS``) or ``run.<run id>``."""
        if sys.platform == "linux":
            await self.watch_inotify(wake, task_status=task_status)
        else:
            await self.watch_watchfiles(wake, task_status=task_status)

    if sys.platform == "linux":

        async def watch_inotify(self, wake: Callable[[str], None], *, task_status: TaskStatus[None]) -> None:
            """``watch`` through inotify, read on the event loop."""
            self.directory.mkdir(exist_ok=True)
            with Inotify() as inotify:
                # Set up before it returns: a touch from now on is seen.
                inotify.add_watch(self.directory, Mask.MODIFY)
                task_status.started()
                async for event in inotify:
                    if Mask.Q_OVERFLOW in event.mask:  # touches were lost: every waiter looks
                        for kind in KINDS:
                            wake(kind)
                    elif event.name is not None and _wakes(name := event.name.name):
                        wake(name)

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
