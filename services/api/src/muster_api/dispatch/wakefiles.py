"""Wake-ups between processes sharing one SQLite file, through files beside it: after a commit that others wait for,
a process writes a byte to the file of its kind (``queued``: a run to claim; ``events``: a run's journal or its end;
``controls``: a steer or cancel) in ``<database>-wake/``, and every process watching that directory through inotify
wakes its waiters of that kind within milliseconds. A commit nobody waits for (the mesh's) touches none of them and
wakes nobody; an idle process makes no system call at all.

Not the database's ``-wal`` file: every commit writes it, the mesh's and the process's own included, and each would
wake the idle workers to look for runs.

inotify is Linux's, reached through ctypes: ``inotify()`` is None elsewhere, and the notifier polls the file's
``data_version`` instead (``FileWatch``).
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

KINDS = ("queued", "events", "controls")
IN_MODIFY = 0x2
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name


def inotify() -> Any | None:
    """The C library when it has inotify, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1  # noqa: B018  (missing on a C library without it)
    except (OSError, AttributeError):
        return None
    return libc


def kinds_of(buffer: bytes) -> set[str]:
    """The file names of the inotify events read at once (a burst of touches wakes each kind once)."""
    names: set[str] = set()
    offset = 0
    while offset + _HEADER.size <= len(buffer):
        _wd, _mask, _cookie, length = _HEADER.unpack_from(buffer, offset)
        start = offset + _HEADER.size
        names.add(buffer[start : start + length].rstrip(b"\0").decode(errors="replace"))
        offset = start + length
    return names


def _checked(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


class WakeFiles:
    def __init__(self, database: Path, libc: Any) -> None:
        self.directory = Path(f"{database}-wake")
        self._libc = libc

    def touch(self, kind: str) -> None:
        """After a commit: wake the watching processes' waiters of this kind (this one's too: a spare look)."""
        path = self.directory / kind
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
        """Call ``wake(kind)`` for the touches of every process, until cancelled; started once watching."""
        fd = _checked(self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC), "inotify_init1")
        try:
            self.directory.mkdir(exist_ok=True)
            _checked(self._libc.inotify_add_watch(fd, bytes(self.directory), IN_MODIFY), "inotify_add_watch")
            task_status.started()
            while True:
                await anyio.wait_readable(fd)
                try:
                    buffer = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                for kind in kinds_of(buffer):
                    wake(kind)
        finally:
            os.close(fd)
