"""What a fake model server answers, planned per test.

A fake holds a queue of planned answers. Each model request the CLI makes for the conversation takes the next one;
a ``Fail`` with ``times=None`` stays at the head of the queue (a persistent failure). An empty queue answers the
``default`` reply, so a CLI never hangs on an unplanned request; the request is still recorded for the test to see.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """A call of the CLI's shell tool. ``command`` is the shell command line the model asks the CLI to run.

    ``name``/``arguments`` call another tool instead (Claude: e.g. ``Write`` with ``file_path``/``content``, or an
    MCP tool ``mcp__<server>__<tool>``; codex: a function of ``namespace``, or ``tool_search`` whose arguments are
    the search's); ``patch`` makes codex's freeform ``apply_patch`` call with that patch text.
    """

    command: str = ""
    call_id: str = "call_1"
    name: str | None = None
    arguments: dict[str, Any] | None = None
    patch: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class Reply:
    """A successful streamed answer: optional reasoning, then text, then optionally a tool call."""

    text: str = ""
    thinking: str | None = None
    tool: ToolCall | None = None
    input_tokens: int = 120
    output_tokens: int = 30
    cached_tokens: int = 0
    cache_created: int = 0
    # The server holds this answer until the test sets the gate (e.g. to steer a turn that is still running).
    gate: threading.Event | None = field(default=None, compare=False)

    def wait_gate(self, timeout: float = 60) -> None:
        """Block (in a worker thread) until the gate opens; a gate never opened fails loudly after ``timeout``."""
        if self.gate is not None and not self.gate.wait(timeout):
            raise TimeoutError("the test never opened the gate of a planned reply")


@dataclass(frozen=True)
class Fail:
    """An HTTP error answer. ``times=None`` repeats forever (it is never consumed)."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    times: int | None = 1


Plan = Reply | Fail


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    answered: str  # what the fake answered: "reply", "fail:<status>", "default", "side", "unknown"
    # The credential the CLI presented (``Authorization``, else ``x-api-key``), kept apart from ``headers`` so that
    # only a test that asks for it sees it.
    credential: str | None = None


def credential_of(headers: Any) -> str | None:
    """The ``Authorization`` header of a request, else its ``x-api-key``."""
    value = headers.get("authorization") or headers.get("x-api-key")
    return str(value) if value else None


class Script:
    """The thread-safe queue of plans plus the record of requests (the server runs in another thread)."""

    def __init__(self, default: Reply | None = None) -> None:
        self._lock = threading.Lock()
        self._plans: deque[Plan] = deque()
        self._fail_counts: dict[int, int] = {}
        self.default = default or Reply(text="OK")
        self.requests: list[Recorded] = []

    def plan(self, *plans: Plan) -> None:
        with self._lock:
            self._plans.extend(plans)

    def reset(self, *plans: Plan, default: Reply | None = None) -> None:
        with self._lock:
            self._plans.clear()
            self._plans.extend(plans)
            self.requests.clear()
            if default is not None:
                self.default = default

    def next(self) -> tuple[Plan, str]:
        with self._lock:
            if not self._plans:
                return self.default, "default"
            head = self._plans[0]
            if isinstance(head, Fail):
                if head.times is None:
                    return head, f"fail:{head.status}"
                used = self._fail_counts.get(id(head), 0) + 1
                if used >= head.times:
                    self._plans.popleft()
                    self._fail_counts.pop(id(head), None)
                else:
                    self._fail_counts[id(head)] = used
                return head, f"fail:{head.status}"
            self._plans.popleft()
            return head, "reply"

    def keep(self, plan: Any) -> None:
        """Put a plan taken by ``next`` back at the head of the queue (a fake's own persistent plans)."""
        with self._lock:
            self._plans.appendleft(plan)

    def record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._plans)

    def model_requests(self) -> list[Recorded]:
        """The conversation requests (the ones that took a plan or the default)."""
        with self._lock:
            return [r for r in self.requests if r.answered in ("reply", "default") or r.answered.startswith("fail:")]
