"""``ProcessRun``: one CLI process of a turn, read to its end.

It owns the process's two readers (stdout lines decoded into events, stderr lines as ``stderr`` events, both from the
loop's read callbacks, no reader task or stream), its live input, and the stuck-pipe timer: if the CLI exits but a
child keeps its pipes open, the readers would wait forever, so the process group is swept a grace period after the
exit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from muster_dispatch.errors import DispatchError
from muster_dispatch.events import AgentEvent
from muster_dispatch.live import LiveInput
from muster_dispatch.local_process import LocalProcess

READ_GRACE = 2.0  # seconds to drain the pipes after the CLI exited, before its group is swept


def _text(raw: bytes) -> str:
    """A line of the CLI's output as text, without its line ending (bytes that are not UTF-8 replaced)."""
    return raw.decode("utf-8", "replace").rstrip("\r\n")


class ProcessRun:
    def __init__(
        self,
        process: LocalProcess,
        decode: Callable[[str], list[AgentEvent]],
        on_event: Callable[[AgentEvent], None],
        live: LiveInput | None,
    ) -> None:
        self.process = process
        self._decode = decode
        self._on_event = on_event
        self.live = live
        self._running = False
        self._timers: list[asyncio.TimerHandle] = []

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def open(self) -> None:
        """Write the live input's opening lines."""
        if self.live is not None:
            for line in self.live.opening():
                await self.process.write(line)

    async def steer(self, text: str) -> bool:
        """Deliver a steering message through stdin; False when the turn takes no (more) live input."""
        if self.live is None:
            return False
        for line in self.live.steer(text):
            await self.process.write(line)
        return True

    async def run(self) -> int:
        """Read both streams to their end and wait for the exit; the process group is swept afterwards."""
        self._running = True
        stdout, stderr = self.process.stdout, self.process.stderr
        stderr.consume(self._stderr_line)
        stdout.consume(self._stdout_line)
        self.process.notices.consume(self._on_event)
        self._timers.append(asyncio.get_running_loop().call_later(READ_GRACE, self._check_exit))
        try:
            await stdout.closed
        except asyncio.CancelledError:
            stdout.detach()  # a stopped run decodes nothing more of its output
            raise
        await stderr.closed
        code = await self.process.wait()
        self._running = False
        self.process.sweep()
        return code

    async def kill(self) -> None:
        self._running = False
        await self.process.kill()

    def close(self) -> None:
        """Leave nothing running (also when cancelled from outside, e.g. the loop shuts down)."""
        self._running = False
        if self.returncode is None:
            self.process.kill_now()
        self.process.stdout.detach()
        self.process.stderr.detach()
        for handle in self._timers:
            handle.cancel()
        self.process.close()
        self.live = None

    def _stdout_line(self, raw: bytes) -> None:
        text = _text(raw)
        events = self._decode(text)
        for event in events:
            self._on_event(event)
        live = self.live
        if live is not None:
            with contextlib.suppress(DispatchError, ConnectionError):
                for line in live.on_line(text, events):
                    self.process.write_now(line)
            if live.done:
                self.live = None
                self.process.close_stdin()  # the protocol is over: the CLI ends the turn and exits

    def _stderr_line(self, raw: bytes) -> None:
        self._on_event(AgentEvent("stderr", text=_text(raw)))

    def _check_exit(self) -> None:
        # A timer, not an exit watcher: a short turn ends before it ever fires, so it costs no wake-up.
        if not self._running:
            return
        later = self._sweep_if_stuck if self.returncode is not None else self._check_exit
        self._timers.append(asyncio.get_running_loop().call_later(READ_GRACE, later))

    def _sweep_if_stuck(self) -> None:
        if self._running:
            self.process.sweep()


__all__ = ["READ_GRACE", "ProcessRun"]
