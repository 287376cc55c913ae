"""``LocalProcess``: one CLI process, its output as lines, its stdin as an asyncio stream, its exit, and the kill of
its whole tree.

Started with ``subprocess.Popen``, its pipes connected to the running loop, its exit watched through a pidfd (Linux;
a waiting thread elsewhere). Not ``asyncio.create_subprocess_exec``: on Python 3.11 that starts a thread per process to
wait for it (and hands the exit over through the loop's self-pipe), the largest cost of a short turn on a busy machine,
and its ``wait()`` also waits for the pipes, which a surviving tool may hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from asyncio.streams import FlowControlMixin
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from muster_dispatch.errors import DispatchError
from muster_dispatch.events import AgentEvent
from muster_dispatch.line_pipe import LinePipe
from muster_dispatch.processes import descendants, signal_all

STREAM_LIMIT = 64 * 1024 * 1024  # one JSON line can carry a whole file read by a tool


class Notices:
    """Events the sandbox itself reports about a process (a refused connection): held until a reader attaches, then
    handed to it as they come."""

    def __init__(self) -> None:
        self._held: list[AgentEvent] = []
        self._reader: Callable[[AgentEvent], None] | None = None

    def put(self, event: AgentEvent) -> None:
        if self._reader is not None:
            self._reader(event)
        else:
            self._held.append(event)

    def consume(self, reader: Callable[[AgentEvent], None]) -> None:
        self._reader = reader
        held, self._held = self._held, []
        for event in held:
            reader(event)

    def detach(self) -> None:
        self._reader = None


class LocalProcess:
    """A running CLI: line streams, stdin, its exit, and a group kill. ``notices``: what its sandbox reports about
    it; ``on_close``: what the sandbox releases with it (an egress proxy)."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdout: LinePipe,
        stderr: LinePipe,
        stdin: asyncio.StreamWriter | None,
        transports: list[asyncio.BaseTransport],
        marker: str | None = None,
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.stdout = stdout
        self.stderr = stderr
        self.stdin = stdin
        self.marker = marker
        self.notices = Notices()
        self.on_close: list[Callable[[], None]] = []
        self._transports = transports
        loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = loop.create_future()
        self._unwatch = _watch_exit(loop, popen, self._on_exit)

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def _on_exit(self) -> None:
        code = self.popen.poll()  # reaps it
        if not self._exited.done():
            self._exited.set_result(code if code is not None else 0)

    async def write(self, text: str) -> None:
        self.write_now(text)
        assert self.stdin is not None
        await self.stdin.drain()

    def write_now(self, text: str) -> None:
        """Write without waiting for the pipe to drain (a protocol's answer to a line, written from the read
        callback; the pipe's buffer holds it)."""
        stdin = self.stdin
        if stdin is None or stdin.is_closing():
            raise DispatchError("steering", "the turn no longer accepts input")
        stdin.write(text.encode())

    def close_stdin(self) -> None:
        stdin = self.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()

    async def wait(self) -> int:
        """The exit code once the CLI itself exited (a child may still hold its pipes)."""
        code = self.popen.returncode
        if code is not None:
            return code
        return await asyncio.shield(self._exited)

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    async def kill(self, grace: float = 1.0) -> None:
        """SIGTERM the CLI's group and every descendant (tools in their own sessions too), SIGKILL what is left
        after ``grace`` seconds; leaves no process behind."""
        tree = descendants(self.pid, self.marker)
        self.signal_group(signal.SIGTERM)
        signal_all(tree, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._exited), grace)
        tree |= descendants(self.pid, self.marker)  # forked meanwhile, or re-parented: found by the marker
        self.signal_group(signal.SIGKILL)
        signal_all(tree, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._exited), 5.0)

    def kill_now(self) -> None:
        """SIGKILL the group and every descendant at once (no grace, no await: usable while being cancelled)."""
        tree = descendants(self.pid, self.marker)
        self.signal_group(signal.SIGKILL)
        signal_all(tree, signal.SIGKILL)

    def sweep(self) -> None:
        """After a normal exit: kill what the CLI left running in its group (helpers, servers)."""
        self.signal_group(signal.SIGKILL)

    def close(self) -> None:
        """Close the pipes; a CLI still running is reaped by a thread once it died (the loop may be ending)."""
        for transport in self._transports:
            if not transport.is_closing():
                transport.close()
        self._unwatch()
        self.notices.detach()
        for release in self.on_close:
            release()
        self.on_close.clear()
        if self.popen.poll() is None:
            threading.Thread(target=self.popen.wait, name=f"muster-reap-{self.pid}", daemon=True).start()


async def spawn(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin: bool,
    new_session: bool,
    marker: str | None,
) -> LocalProcess:
    """Start ``argv`` in its own process group (and session when ``new_session``); raises ``OSError``."""
    popen = _popen(argv, cwd=cwd, env=env, stdin=stdin, new_session=new_session)
    loop = asyncio.get_running_loop()
    transports: list[asyncio.BaseTransport] = []
    try:
        assert popen.stdout is not None and popen.stderr is not None
        stdout = await _lines(loop, popen.stdout, transports)
        stderr = await _lines(loop, popen.stderr, transports)
        writer: asyncio.StreamWriter | None = None
        if popen.stdin is not None:
            pipe, protocol = await loop.connect_write_pipe(FlowControlMixin, popen.stdin)
            transports.append(pipe)
            writer = asyncio.StreamWriter(pipe, protocol, None, loop)
    except BaseException:
        for opened in transports:
            opened.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGKILL)
        threading.Thread(target=popen.wait, daemon=True).start()
        raise
    return LocalProcess(popen, stdout, stderr, writer, transports, marker)


def _popen(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdin: bool, new_session: bool
) -> subprocess.Popen[bytes]:
    # In the loop's thread, as asyncio's own subprocess support does: the fork and exec do not wait for the program.
    return subprocess.Popen(
        argv,
        bufsize=0,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=new_session,
        process_group=None if new_session else 0,
    )


async def _lines(loop: asyncio.AbstractEventLoop, pipe: object, transports: list[asyncio.BaseTransport]) -> LinePipe:
    lines = LinePipe(loop, STREAM_LIMIT)
    transport, _ = await loop.connect_read_pipe(lambda: lines, pipe)
    transports.append(transport)
    return lines


def _watch_exit(
    loop: asyncio.AbstractEventLoop, popen: subprocess.Popen[bytes], callback: Callable[[], None]
) -> Callable[[], None]:
    """Call ``callback`` in the loop once the process exits; returns a function that stops watching. A pidfd where
    the system has one (no thread, no polling), else a thread waiting for it, as asyncio itself does."""
    try:
        fd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):
        return _thread_watch(loop, popen, callback)
    closed = False

    def stop() -> None:
        nonlocal closed
        if not closed:
            closed = True
            loop.remove_reader(fd)
            os.close(fd)

    def fired() -> None:
        stop()
        callback()

    loop.add_reader(fd, fired)
    return stop


def _thread_watch(
    loop: asyncio.AbstractEventLoop, popen: subprocess.Popen[bytes], callback: Callable[[], None]
) -> Callable[[], None]:
    watching = True

    def wait() -> None:
        popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(lambda: callback() if watching else None)

    def stop() -> None:
        nonlocal watching
        watching = False

    threading.Thread(target=wait, name=f"muster-wait-{popen.pid}", daemon=True).start()
    return stop


__all__ = ["STREAM_LIMIT", "LocalProcess", "Notices", "spawn"]
