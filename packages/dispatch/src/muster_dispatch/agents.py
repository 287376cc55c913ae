"""Agents: what ``dispatch`` runs. ``kind`` is "cli" | "custom" | "replay" | "fallback"."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeAlias

from muster_dispatch.conversations import ConversationStore
from muster_dispatch.errors import DispatchError
from muster_dispatch.events import AgentEvent
from muster_dispatch.harness import Bootstrap, Command, Harness, McpServer
from muster_dispatch.inputs import AgentInput

if TYPE_CHECKING:
    from muster_dispatch.replay import ReplayAgent

FallbackTrigger = Literal["quota", "unavailable"]


@dataclass(frozen=True, slots=True)
class CustomContext:
    """What a custom agent gets besides its input."""

    workspace: Path
    deadline: float | None  # seconds left when the turn started, or None


CustomFn = Callable[[AgentInput, CustomContext], AsyncIterable[AgentEvent]]


@dataclass(frozen=True, slots=True, eq=False)
class CliAgent:
    harness: Harness
    model: str | None = None
    variables: Mapping[str, str] = field(default_factory=dict)
    storage: ConversationStore | None = None
    capture: bool = False
    name: str = ""
    mcp_servers: tuple[McpServer, ...] = ()
    kind: Literal["cli"] = "cli"

    def request(self, input: AgentInput, *, executable: str | None = None) -> Command:
        return self.harness.request(input, model=self.model, executable=executable)

    def events(self, line: str) -> list[AgentEvent]:
        return self.harness.events(line)

    @property
    def resumable(self) -> bool:
        return self.harness.resumable

    @property
    def forkable(self) -> bool:
        return self.harness.forkable

    @property
    def live_input(self) -> bool:
        return self.harness.live_input

    @property
    def bootstrap(self) -> Bootstrap | None:
        return self.harness.bootstrap

    @property
    def requires_finished_event(self) -> bool:
        return self.harness.requires_finished_event


def cli_agent(
    harness: Harness,
    *,
    model: str | None = None,
    variables: Mapping[str, str] | None = None,
    storage: ConversationStore | None = None,
    capture: bool | None = None,
    name: str | None = None,
    mcp_servers: Sequence[McpServer] = (),
) -> CliAgent:
    """An agent running ``harness``'s CLI. ``capture`` defaults to on when ``storage`` is given."""
    if not isinstance(harness, Harness):
        raise DispatchError("configuration", "cli_agent needs a harness (claude_harness(), codex_harness())")
    vars_ = dict(variables or {})
    for key, value in vars_.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise DispatchError("configuration", "agent variables must map names to strings", {"field": "variables"})
    if capture and storage is None:
        raise DispatchError("configuration", "capture needs a conversation storage", {"field": "capture"})
    default_name = harness.name if model is None else f"{harness.name}:{model}"
    return CliAgent(
        harness=harness,
        model=model,
        variables=vars_,
        storage=storage,
        capture=storage is not None if capture is None else capture,
        name=name or default_name,
        mcp_servers=tuple(mcp_servers),
    )


@dataclass(frozen=True, slots=True, eq=False)
class CustomAgent:
    fn: CustomFn
    name: str = "custom"
    kind: Literal["custom"] = "custom"
    resumable: bool = True
    forkable: bool = True


def custom_agent(fn: CustomFn, *, name: str | None = None) -> CustomAgent:
    """An agent that is not a CLI: ``fn(input, context)`` is an async generator of ``AgentEvent``s.

    A ``failure`` event fails the turn (its ``code`` is the error code when it is one, "quota" included; code
    "unavailable" marks an outage); raising ``DispatchError`` fails it with that error.
    """
    if not callable(fn):
        raise DispatchError("configuration", "custom_agent needs an async callable")
    return CustomAgent(fn=fn, name=name or str(getattr(fn, "__name__", "custom")))


@dataclass(frozen=True, slots=True, eq=False)
class FallbackAgent:
    agents: tuple[Agent, ...]
    on: frozenset[FallbackTrigger]
    name: str = "fallback"
    kind: Literal["fallback"] = "fallback"


def fallback_agent(
    agents: Sequence[Agent], *, on: Sequence[FallbackTrigger] = ("quota", "unavailable"), name: str | None = None
) -> FallbackAgent:
    """Try ``agents`` in order; a ``quota`` or ``unavailable`` fault (per ``on``) hands over to the next one."""
    candidates = tuple(agents)
    if not candidates:
        raise DispatchError("configuration", "fallback_agent needs at least one candidate", {"field": "agents"})
    if any(getattr(a, "kind", None) not in ("cli", "custom", "replay") for a in candidates):
        raise DispatchError("configuration", "fallback candidates must be cli, custom or replay agents")
    triggers = frozenset(on)
    if not triggers <= {"quota", "unavailable"}:
        raise DispatchError("configuration", "fallback triggers are 'quota' and 'unavailable'", {"field": "on"})
    return FallbackAgent(agents=candidates, on=triggers, name=name or " > ".join(a.name for a in candidates))


# The replay agent lives in replay.py (which imports this module): the union names it lazily.
Agent: TypeAlias = "CliAgent | CustomAgent | ReplayAgent"
DispatchAgent: TypeAlias = "CliAgent | CustomAgent | ReplayAgent | FallbackAgent"
