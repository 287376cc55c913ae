"""The dispatch journal: JSONL observations ``{seq, at, source, scope, event}`` written by every dispatch.

``event`` is an AgentEvent dict, or one of the turn markers: ``{"type": "turn.input", "prompt", "continuation",
"live_input", "agent"}`` at the start, ``{"type": "turn.steer", "text"}`` for steering, ``{"type": "turn.result",
"result"}`` at the end. ``scope`` is ``{"dispatch": id, "agent": name}``.

``JournalSink`` is what a dispatch writes to and a replay reads from: ``Journal`` keeps a JSONL file, the service
keeps rows. ``record`` is synchronous because it runs once per decoded event on the hot path; a sink that stores
remotely buffers and makes the observations durable in ``flush``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Observation:
    seq: int
    at: str
    source: str
    scope: dict[str, Any]
    event: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": self.at, "source": self.source, "scope": self.scope, "event": self.event}


class JournalSink(Protocol):
    def record(self, source: str, scope: dict[str, Any], event: dict[str, Any]) -> Observation:
        """Append one observation with the next sequence number (1, 2, …) and the clock's time."""
        ...

    def observations(self) -> list[Observation]:
        """Every observation of this journal, in sequence order."""
        ...

    async def flush(self) -> None:
        """Return once every recorded observation is durable."""
        ...


class Journal:
    """An append-only JSONL file (or memory only when ``path`` is None)."""

    def __init__(self, path: Path | str | None = None, *, clock: Callable[[], datetime] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._clock = clock or _utcnow
        self._lock = threading.Lock()
        self._observations: list[Observation] = []
        if self.path is not None and self.path.exists():
            self._observations = list(_read(self.path))
        self._seq = self._observations[-1].seq if self._observations else 0

    def record(self, source: str, scope: dict[str, Any], event: dict[str, Any]) -> Observation:
        with self._lock:
            self._seq += 1
            observation = Observation(self._seq, self._clock().isoformat(), source, scope, event)
            self._observations.append(observation)
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(to_jsonl(observation) + "\n")
            return observation

    def observations(self) -> list[Observation]:
        with self._lock:
            return list(self._observations)

    async def flush(self) -> None:
        """Every ``record`` has written its line already."""

    @classmethod
    def load(cls, path: Path | str) -> Journal:
        return cls(path)

    @property
    def last_seq(self) -> int:
        return self._seq


def _utcnow() -> datetime:
    return datetime.now(UTC)


def to_jsonl(observation: Observation) -> str:
    """One journal line (without its newline), as ``Journal`` writes it."""
    return json.dumps(observation.to_dict(), ensure_ascii=False)


def from_dict(obj: object) -> Observation | None:
    """An observation from its JSON object; None for something that is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), dict):
        return None
    return Observation(
        seq=int(obj.get("seq") or 0),
        at=str(obj.get("at") or ""),
        source=str(obj.get("source") or "agent"),
        scope=obj["scope"] if isinstance(obj.get("scope"), dict) else {},
        event=obj["event"],
    )


def _read(path: Path) -> list[Observation]:
    out: list[Observation] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # a torn last line after a crash
        observation = from_dict(obj)
        if observation is not None:
            out.append(observation)
    return out
