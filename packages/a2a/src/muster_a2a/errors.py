"""Errors of muster_a2a.

A failing remote agent is reported, never raised, by ``remote_agent`` / ``load_agents`` (its ``error`` says which of
these happened); a failing remote call is a ``ToolResult`` with ``is_error``. The classes below are what the library
raises to its own callers (bad configuration, unknown names) and what it uses to describe agent failures.

MusterA2AError
├── AgentConfigError          the ``agents`` block (or one entry) is malformed
├── AgentResolutionError      an agent could not be made usable (reported in ``RemoteAgent.error``)
│   ├── CardUnreachableError      connection refused, DNS, timeout while fetching the card
│   ├── CardHTTPError             the card URL answered an HTTP error status
│   ├── InvalidCardError          not JSON, not an object, or not an Agent Card
│   ├── NoUsableInterfaceError    no JSON-RPC / HTTP+JSON interface we may use
│   └── InsecureURLError          plain http to a non-loopback host without ``allow_http``
├── UnknownToolError          no tool of that name is loaded
├── UnknownCallError          no stored call with that id
├── NotContinuableError       the call named to be answered is not an input-required call of that tool
└── CallTakenOverError        another instance took over the call this one was following (its lease had lapsed)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class MusterA2AError(Exception):
    """Root of every error of muster_a2a."""


class AgentConfigError(MusterA2AError):
    """The agents configuration is malformed."""


class AgentResolutionError(MusterA2AError):
    """A remote agent could not be resolved into tools."""


class CardUnreachableError(AgentResolutionError):
    """The card could not be fetched at all (network)."""


class CardHTTPError(AgentResolutionError):
    """The card URL answered an HTTP error status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class InvalidCardError(AgentResolutionError):
    """The document is not a valid Agent Card."""


class NoUsableInterfaceError(AgentResolutionError):
    """The card names no interface this client can (or may) use."""


class InsecureURLError(AgentResolutionError):
    """Plain http to a host that is not loopback, without explicit permission."""


class UnknownToolError(MusterA2AError):
    """No loaded tool has this name; ``tools`` are the names there are."""

    def __init__(self, name: str, tools: Sequence[str] = ()) -> None:
        there = ", ".join(tools) if tools else "none (no agent is loaded and usable)"
        super().__init__(f"no A2A tool named {name!r}; the tools are: {there}")
        self.name = name
        self.tools = list(tools)

    @property
    def problem_extra(self) -> dict[str, Any]:
        return {"code": "unknown_tool", "tool": self.name, "tools": self.tools}


class UnknownCallError(MusterA2AError):
    """No stored call has this id."""

    def __init__(self, call_id: str) -> None:
        super().__init__(f"no A2A call with id {call_id!r}")
        self.call_id = call_id


class NotContinuableError(MusterA2AError):
    """The call named to be answered is of another tool, or its task is not waiting for input."""

    def __init__(self, call_id: str, tool: str, state: str) -> None:
        super().__init__(
            f"A2A call {call_id!r} is not an input-required call of {tool} (its task is {state}): only a task that "
            "asks for input takes an answer"
        )
        self.call_id = call_id
        self.problem_extra = {"code": "not_continuable", "call_id": call_id, "state": state}


class CallTakenOverError(MusterA2AError):
    """This instance lost its hold on a call (its lease lapsed and another instance claimed it)."""

    def __init__(self, call_id: str) -> None:
        super().__init__(
            f"A2A call {call_id!r} is now followed by another instance (this one's lease lapsed); "
            f"its result will be stored: GET /a2a/calls/{call_id}"
        )
        self.call_id = call_id
        self.problem_extra = {"call_id": call_id}
