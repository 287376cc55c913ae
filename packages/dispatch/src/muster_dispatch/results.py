"""The outcome of a dispatch: status, final text, usage, conversation id, error, and every fallback attempt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from muster_dispatch.errors import DispatchError
from muster_dispatch.usage import Usage

Status = Literal["completed", "failed", "canceled"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One candidate's try: which agent, how it ended, what it used."""

    agent: str
    kind: str
    status: Status
    usage: Usage
    conversation: str | None = None
    error: DispatchError | None = None
    text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "kind": self.kind,
            "status": self.status,
            "usage": self.usage.to_dict(),
            "conversation": self.conversation,
            "error": self.error.to_dict() if self.error else None,
            "text": self.text,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attempt:
        error = data.get("error")
        return cls(
            agent=str(data.get("agent", "")),
            kind=str(data.get("kind", "")),
            status=_status(data.get("status")),
            usage=Usage.from_dict(data.get("usage")),
            conversation=data.get("conversation") if isinstance(data.get("conversation"), str) else None,
            error=DispatchError.from_dict(error) if isinstance(error, dict) else None,
            text=data.get("text") if isinstance(data.get("text"), str) else None,
        )


@dataclass(frozen=True, slots=True)
class TurnResult:
    status: Status
    text: str | None
    usage: Usage
    conversation: str | None = None
    error: DispatchError | None = None
    attempts: list[Attempt] = field(default_factory=list)
    selected: str | None = None
    events: int = 0
    exit_code: int | None = None
    stderr: list[str] = field(default_factory=list)  # the last lines, for diagnostics

    @property
    def fallback(self) -> str | None:
        """The selected candidate (alias of ``selected``)."""
        return self.selected

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "text": self.text,
            "usage": self.usage.to_dict(),
            "conversation": self.conversation,
            "error": self.error.to_dict() if self.error else None,
            "attempts": [a.to_dict() for a in self.attempts],
            "selected": self.selected,
            "events": self.events,
            "exit_code": self.exit_code,
            "stderr": self.stderr,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnResult:
        error = data.get("error")
        attempts = data.get("attempts")
        stderr = data.get("stderr")
        return cls(
            status=_status(data.get("status")),
            text=data.get("text") if isinstance(data.get("text"), str) else None,
            usage=Usage.from_dict(data.get("usage")),
            conversation=data.get("conversation") if isinstance(data.get("conversation"), str) else None,
            error=DispatchError.from_dict(error) if isinstance(error, dict) else None,
            attempts=[Attempt.from_dict(a) for a in attempts if isinstance(a, dict)]
            if isinstance(attempts, list)
            else [],
            selected=data.get("selected") if isinstance(data.get("selected"), str) else None,
            events=int(data.get("events") or 0),
            exit_code=data.get("exit_code") if isinstance(data.get("exit_code"), int) else None,
            stderr=[s for s in stderr if isinstance(s, str)] if isinstance(stderr, list) else [],
        )


def _status(value: Any) -> Status:
    if value in ("completed", "failed", "canceled"):
        return value  # type: ignore[no-any-return]
    return "failed"
