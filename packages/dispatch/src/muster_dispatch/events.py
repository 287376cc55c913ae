"""Normalized agent events: one shape for every CLI, cheap to build on the decode hot path.

A plain frozen slotted dataclass (not pydantic) because a CLI can print thousands of lines per turn and decoding must
stay within a small factor of ``json.loads``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

from muster_dispatch.jsonline import text_or_none as _str
from muster_dispatch.usage import Usage

EventType = Literal[
    "text",  # a complete assistant message (text)
    "text_delta",  # a streamed fragment of assistant text
    "reasoning",  # thinking / reasoning summary (text)
    "tool",  # a tool call (id, name, input)
    "tool_result",  # the result of a tool call (id, output, code="error" on failure)
    "file_change",  # files changed by the agent (id, name, data)
    "usage",  # token usage reported by the CLI (usage)
    "conversation",  # the native session / thread id (id, name=model)
    "result",  # the native final answer of a turn (text, code=subtype)
    "warning",  # a non-fatal notice (text)
    "failure",  # a terminal failure reported by the CLI (text, code)
    "quota",  # a usage / rate limit was hit (text, reset_at, code)
    "retry",  # a TRANSIENT retry notice: never a failure (text)
    "fallback",  # the dispatch moves to the next candidate (name, text, code)
    "finished",  # the native end-of-turn event was seen (id)
    "stopped",  # the process was stopped by us (code: timeout | aborted | steering)
    "stderr",  # one line the CLI wrote to stderr (text)
    "raw",  # an unknown JSON line (data) or a non-JSON line (text)
]

EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))

_Setter = Callable[[Any, Any], None]


@dataclass(frozen=True, slots=True, init=False)
class AgentEvent:
    type: EventType
    text: str | None
    id: str | None
    name: str | None
    input: Any
    output: Any
    usage: Usage | None
    reset_at: datetime | None
    code: str | None
    data: Any

    def __init__(
        self,
        type: EventType,
        text: str | None = None,
        id: str | None = None,
        name: str | None = None,
        input: Any = None,
        output: Any = None,
        usage: Usage | None = None,
        reset_at: datetime | None = None,
        code: str | None = None,
        data: Any = None,
    ) -> None:
        # The slot descriptors write past the frozen __setattr__: about 4x cheaper than the generated
        # object.__setattr__ calls, which matters on the decode hot path. Instances stay immutable.
        _SET_TYPE(self, type)
        _SET_TEXT(self, text)
        _SET_ID(self, id)
        _SET_NAME(self, name)
        _SET_INPUT(self, input)
        _SET_OUTPUT(self, output)
        _SET_USAGE(self, usage)
        _SET_RESET_AT(self, reset_at)
        _SET_CODE(self, code)
        _SET_DATA(self, data)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict without the empty fields (the journal stores events this way)."""
        out: dict[str, Any] = {"type": self.type}
        if self.text is not None:
            out["text"] = self.text
        if self.id is not None:
            out["id"] = self.id
        if self.name is not None:
            out["name"] = self.name
        if self.input is not None:
            out["input"] = self.input
        if self.output is not None:
            out["output"] = self.output
        if self.usage is not None:
            out["usage"] = self.usage.to_dict()
        if self.reset_at is not None:
            out["reset_at"] = self.reset_at.isoformat()
        if self.code is not None:
            out["code"] = self.code
        if self.data is not None:
            out["data"] = self.data
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentEvent:
        kind = data.get("type")
        if kind not in EVENT_TYPES:
            return cls("raw", data=data)
        reset = data.get("reset_at")
        reset_at: datetime | None = None
        if isinstance(reset, str):
            try:
                reset_at = datetime.fromisoformat(reset)
            except ValueError:
                reset_at = None
        return cls(
            kind,
            text=_str(data.get("text")),
            id=_str(data.get("id")),
            name=_str(data.get("name")),
            input=data.get("input"),
            output=data.get("output"),
            usage=Usage.from_dict(data["usage"]) if "usage" in data else None,
            reset_at=reset_at,
            code=_str(data.get("code")),
            data=data.get("data"),
        )


_SLOTS: dict[str, Any] = AgentEvent.__dict__  # type: ignore[assignment]
_SET_TYPE: _Setter = _SLOTS["type"].__set__
_SET_TEXT: _Setter = _SLOTS["text"].__set__
_SET_ID: _Setter = _SLOTS["id"].__set__
_SET_NAME: _Setter = _SLOTS["name"].__set__
_SET_INPUT: _Setter = _SLOTS["input"].__set__
_SET_OUTPUT: _Setter = _SLOTS["output"].__set__
_SET_USAGE: _Setter = _SLOTS["usage"].__set__
_SET_RESET_AT: _Setter = _SLOTS["reset_at"].__set__
_SET_CODE: _Setter = _SLOTS["code"].__set__
_SET_DATA: _Setter = _SLOTS["data"].__set__


def raw(line: str, data: Any = None) -> AgentEvent:
    """An unknown JSON line keeps its object in ``data``; a non-JSON line keeps its text."""
    if data is not None:
        return AgentEvent("raw", data=data)
    return AgentEvent("raw", text=line)
