"""Automatic wake of an agent running in a Herdr-managed terminal pane.

Purely local: the pane id never leaves this process (it is not a field of any mesh request). When the mesh says
messages arrived, a fixed, content-free prompt is submitted to that exact pane with
``herdr agent prompt <pane> <text>``, so the agent gets a real turn. The text never carries a remote message: only
the count of unread messages, so a peer cannot inject instructions into another agent's terminal.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio

from muster_mesh.errors import InvalidRequest

log = logging.getLogger("muster.mesh.wake")

# The exact words typed into the agent's pane: agents and the people watching them know this line (a test pins it),
# and it carries no content from any message.
WAKE_TEMPLATE = "[auto-wake #2540] Hay {count} mensajes de Agent Mesh; llamá agent_inbox"
PANE_ID = re.compile(r"^[A-Za-z0-9%][A-Za-z0-9_.:%@-]{0,127}$")
DEFAULT_MIN_INTERVAL = 30.0

Runner = Callable[[Sequence[str]], Awaitable[int]]


def wake_text(count: int) -> str:
    return WAKE_TEMPLATE.format(count=count)


def pane_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The agent's own pane id, only when it runs inside a Herdr-managed pane (``HERDR_ENV=1``)."""
    env = os.environ if environ is None else environ
    if env.get("HERDR_ENV") != "1":
        return None
    pane = env.get("HERDR_PANE_ID", "")
    return pane or None


async def run_command(argv: Sequence[str]) -> int:
    result = await anyio.run_process(list(argv), check=False)
    return result.returncode


class PaneWaker:
    """Wakes one pane for one agent: never for an empty inbox, several arrivals coalesced into one wake, and at most
    one wake per ``min_interval`` seconds.

    Call ``notify()`` whenever the mesh reports an arrival (cheap, never blocks); run ``run()`` in a task. The count
    is asked from ``unread`` at wake time, so a wake reflects everything that arrived while it was held back.
    """

    def __init__(
        self,
        pane_id: str,
        *,
        unread: Callable[[], Awaitable[int]],
        min_interval: float = DEFAULT_MIN_INTERVAL,
        herdr: Sequence[str] = ("herdr",),
        runner: Runner = run_command,
    ) -> None:
        if not PANE_ID.fullmatch(pane_id):
            raise InvalidRequest("herdr pane id must be letters, digits and _ . : % @ -, at most 128 characters")
        self.pane_id = pane_id
        self._unread = unread
        self._min_interval = min_interval
        self._herdr = tuple(herdr)
        self._runner = runner
        self._pending = anyio.Event()
        self._last_wake: float | None = None
        self.wakes = 0

    def notify(self) -> None:
        self._pending.set()

    def command(self, count: int) -> list[str]:
        return [*self._herdr, "agent", "prompt", self.pane_id, wake_text(count)]

    async def run(self) -> None:
        while True:
            await self._pending.wait()
            if self._last_wake is not None:
                hold = self._last_wake + self._min_interval - anyio.current_time()
                if hold > 0:
                    await anyio.sleep(hold)
            # Re-armed before counting: an arrival after the count triggers the next round.
            self._pending = anyio.Event()
            await self.wake_once()

    async def wake_once(self) -> bool:
        """Wake now if the inbox holds anything; True when a prompt was submitted."""
        count = await self._unread()
        if count <= 0:
            return False
        self._last_wake = anyio.current_time()
        try:
            code = await self._runner(self.command(count))
        except OSError as exc:
            log.warning("wake failed: cannot run herdr (%s)", type(exc).__name__)
            return False
        if code != 0:
            log.warning("wake failed: herdr exited %d", code)
            return False
        self.wakes += 1
        return True
