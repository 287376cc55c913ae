"""Live input: steering a running CLI through its stdin, one small strategy per protocol.

- ``StreamJsonInput`` (Claude Code ``--input-format stream-json``): every user message is one stdin line and gets
  one result; stdin closes once every message sent has its result, which lets the CLI end the turn.
- ``AppServerInput`` (Codex ``app-server``): a stateful JSON-RPC conversation held by the harness's driver; stdin
  closes when the driver says the protocol is over.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from muster_dispatch.events import AgentEvent
from muster_dispatch.harness import Command, Harness, LiveDriver
from muster_dispatch.inputs import AgentInput


class LiveInput(Protocol):
    """A live-input protocol spoken on a running CLI's stdin."""

    @property
    def done(self) -> bool:
        """The protocol is over: stdin closes and the CLI ends."""
        ...

    def opening(self) -> list[str]:
        """Lines to write once the process started (after ``Command.stdin``)."""
        ...

    def steer(self, text: str) -> list[str]:
        """Lines that deliver a steering message."""
        ...

    def on_line(self, line: str, events: Sequence[AgentEvent]) -> list[str]:
        """Lines to write in answer to one stdout line (decoded into ``events``)."""
        ...


class StreamJsonInput:
    def __init__(self, message: Callable[[str], str]) -> None:
        self._message = message
        self._sent = 1  # the prompt, written as the command's stdin
        self._answered = 0

    @property
    def done(self) -> bool:
        return self._answered >= self._sent

    def opening(self) -> list[str]:
        return []

    def steer(self, text: str) -> list[str]:
        self._sent += 1
        return [self._message(text)]

    def on_line(self, line: str, events: Sequence[AgentEvent]) -> list[str]:
        self._answered += sum(1 for event in events if event.type == "finished")
        return []


class AppServerInput:
    def __init__(self, driver: LiveDriver) -> None:
        self._driver = driver

    @property
    def done(self) -> bool:
        return self._driver.done

    def opening(self) -> list[str]:
        return self._driver.opening()

    def steer(self, text: str) -> list[str]:
        return self._driver.steer(text)

    def on_line(self, line: str, events: Sequence[AgentEvent]) -> list[str]:
        return self._driver.feed(line)


def live_input(
    harness: Harness, command: Command, input: AgentInput, model: str | None, workspace: Path
) -> LiveInput | None:
    """The strategy for a command that keeps stdin open, or None when the turn takes no live input."""
    if not command.keep_stdin:
        return None
    if harness.live_driver is not None:
        return AppServerInput(harness.live_driver(input, model, workspace))
    if harness.live_message is not None:
        return StreamJsonInput(harness.live_message)
    return None


__all__ = ["AppServerInput", "LiveInput", "StreamJsonInput", "live_input"]
