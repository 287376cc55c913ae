"""Replay: serve recorded turns from a journal, in order, without running anything.

Each dispatch in the journal (one ``scope.dispatch``) is one recorded turn: its input, its events, its steering and
its result. ``divergence="fail"`` raises ``ReplayDivergence`` when the prompt differs; ``"warn"`` reports a
``warning`` event and replays anyway. An exhausted journal always fails.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from muster_dispatch.errors import DispatchError, ReplayDivergence
from muster_dispatch.events import AgentEvent
from muster_dispatch.inputs import AgentInput
from muster_dispatch.journal import Journal, JournalSink
from muster_dispatch.results import TurnResult

Divergence = Literal["fail", "warn"]


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    dispatch: str
    agent: str
    prompt: str
    continuation: dict[str, Any] | None
    live_input: bool
    events: list[AgentEvent] = field(default_factory=list)
    steering: list[str] = field(default_factory=list)
    result: TurnResult | None = None


class ReplayAgent:
    kind: Literal["replay"] = "replay"
    resumable = True
    forkable = True

    def __init__(self, turns: list[RecordedTurn], *, source: str, divergence: Divergence, name: str) -> None:
        self.turns: tuple[RecordedTurn, ...] = tuple(turns)
        self.source = source
        self.divergence: Divergence = divergence
        self.name = name
        self._next = 0
        self._lock = threading.Lock()

    @property
    def remaining_turns(self) -> int:
        return len(self.turns) - self._next

    def next_turn(self) -> RecordedTurn | None:
        """Consume the next recorded turn (None when the journal is exhausted)."""
        with self._lock:
            if self._next >= len(self.turns):
                return None
            turn = self.turns[self._next]
            self._next += 1
            return turn

    def pending_steering(self) -> list[str]:
        """Steering recorded in the next turn, without consuming it."""
        with self._lock:
            return list(self.turns[self._next].steering) if self._next < len(self.turns) else []


def replay_turn(agent: ReplayAgent, turn: RecordedTurn, input: AgentInput) -> list[AgentEvent]:
    """The events a replay of ``turn`` emits for ``input``: divergence warnings (``"warn"``), then the recording.

    Raises ``ReplayDivergence`` on a prompt mismatch under ``"fail"``.
    """
    out: list[AgentEvent] = []
    if turn.prompt != input.prompt:
        details: dict[str, Any] = {"reason": "prompt", "expected": turn.prompt, "actual": input.prompt}
        if agent.divergence == "fail":
            raise ReplayDivergence("the prompt differs from the recorded turn", details)
        out.append(
            AgentEvent("warning", text="replay: the prompt differs from the recorded turn", code="prompt", data=details)
        )
    recorded = (turn.continuation or {}).get("conversation")
    actual = input.continuation.conversation if input.continuation else None
    if recorded != actual:
        # Only a notice: a conversation id is an artefact of the recording, the prompt is the contract.
        details = {"reason": "continuation", "expected": recorded, "actual": actual}
        out.append(AgentEvent("warning", text="replay: the continuation differs", code="continuation", data=details))
    return out + list(turn.events)


def replay_agent(
    journal: JournalSink | Path | str, *, divergence: Divergence = "fail", name: str | None = None
) -> ReplayAgent:
    if divergence not in ("fail", "warn"):
        raise DispatchError("configuration", "divergence is 'fail' or 'warn'", {"field": "divergence"})
    if isinstance(journal, (Path, str)):
        path = Path(journal)
        if not path.exists():
            raise DispatchError("replay", f"journal {path} does not exist", {"field": "journal"})
        journal = Journal.load(path)
    turns, source = recorded_turns(journal)
    return ReplayAgent(turns, source=source, divergence=divergence, name=name or "replay")


def recorded_turns(journal: JournalSink) -> tuple[list[RecordedTurn], str]:
    """Group the journal by dispatch, in the order the dispatches started."""
    order: list[str] = []
    parts: dict[str, dict[str, Any]] = {}
    sources: set[str] = set()
    for obs in journal.observations():
        if obs.source == "replay":
            continue  # what a replay re-emitted is not a recording
        key = str(obs.scope.get("dispatch", ""))
        event = obs.event
        etype = event.get("type")
        if etype == "turn.input":
            order.append(key)
            sources.add(obs.source)
            parts[key] = {
                "agent": str(event.get("agent") or obs.scope.get("agent") or ""),
                "prompt": str(event.get("prompt", "")),
                "continuation": event.get("continuation") if isinstance(event.get("continuation"), dict) else None,
                "live_input": bool(event.get("live_input")),
                "events": [],
                "steering": [],
                "result": None,
            }
            continue
        part = parts.get(key)
        if part is None:
            continue
        if etype == "turn.steer":
            part["steering"].append(str(event.get("text", "")))
        elif etype == "turn.result":
            result = event.get("result")
            part["result"] = TurnResult.from_dict(result) if isinstance(result, dict) else None
        else:
            part["events"].append(AgentEvent.from_dict(event))
    turns = [RecordedTurn(dispatch=key, **parts[key]) for key in order if parts[key]["result"] is not None]
    source = "harness" if sources <= {"harness"} else "agent"
    return turns, source
