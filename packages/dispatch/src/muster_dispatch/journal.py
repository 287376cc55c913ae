"""The dispatch journal: JSONL observations ``{seq, at, source, scope, event}`` written by every dispatch.

``event`` is an AgentEvent dict, or one of the turn markers: ``{"type": "turn.input", "prompt", "continuation",
"live_input", "agent"}`` at the start, ``{"type": "turn.steer", "text"}`` for steering, ``{"type": "turn.result",
"result"}`` at the end. ``scope`` is ``{"dispatch": id, "agent": name}``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Observation:
    seq: int
    at: str
    source: str
    scope: dict[str, Any]
    event: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": self.at, "source": self.source, "scope": self.scope, "event": self.event}


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
                    f.write(json.dumps(observation.to_dict(), ensure_ascii=False) + "\n")
            return observation

    def observations(self) -> list[Observation]:
        with self._lock:
            return list(self._observations)

    @classmethod
    def load(cls, path: Path | str) -> Journal:
        return cls(path)

    @property
    def last_seq(self) -> int:
        return self._seq


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _read(path: Path) -> list[Observation]:
    out: list[Observation] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # a torn last line after a crash
        if not isinstance(obj, dict) or not isinstance(obj.get("event"), dict):
            continue
        out.append(
            Observation(
                seq=int(obj.get("seq") or 0),
                at=str(obj.get("at") or ""),
                source=str(obj.get("source") or "agent"),
                scope=obj["scope"] if isinstance(obj.get("scope"), dict) else {},
                event=obj["event"],
            )
        )
    return out
