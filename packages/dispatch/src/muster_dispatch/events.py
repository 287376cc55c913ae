"""Normalized agent events: one shape for every CLI, cheap to build on the decode hot path.

A ``NamedTuple`` (neither pydantic nor a frozen dataclass): a CLI can print thousands of lines per turn and decoding
must stay within a small factor of ``json.loads``. Building a tuple is one C call, about half the cost of a frozen
slotted dataclass, whose fields are set one by one past its ``__setattr__``; the instances are just as immutable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Literal, NamedTuple, get_args

from muster_dispatch.jsonline import NOT_JSON, SCAN_ERRORS, parse, scan
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


class AgentEvent(NamedTuple):
    type: EventType
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None
    output: Any = None
    usage: Usage | None = None
    reset_at: datetime | None = None
    code: str | None = None
    data: Any = None

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


_new_tuple = tuple.__new__


def event(
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
) -> AgentEvent:
    """``AgentEvent(...)`` at half the cost, for the decoders: calling the class runs its Python ``__new__`` through
    the interpreter's generic slot path (an argument tuple and dict built per call), a function call does not."""
    return _new_tuple(AgentEvent, (type, text, id, name, input, output, usage, reset_at, code, data))


ObjectDecoder = Callable[[dict[str, Any]], list[AgentEvent]]


def line_decoder(handlers: Mapping[Any, ObjectDecoder], other: ObjectDecoder) -> Callable[[str], list[AgentEvent]]:
    """``events(line)`` for a CLI printing JSON objects: the handler of the object's ``type`` (``other`` for an object
    without a known type) gives its events; never raises. A line that is not a JSON object, or an object its handler
    cannot read, is a ``raw`` event; a blank line is none. One function per line, the handler called from it: a
    Python call per layer is a good part of a short line's decoding next to the C scanner."""
    handler = handlers.get

    def events(line: str) -> list[AgentEvent]:
        try:
            obj, end = scan(line, 0)  # a bare JSON line, the common case, in one call
        except SCAN_ERRORS:
            end = -1
        if end != len(line):
            obj = parse(line)  # surrounded by whitespace, followed by more, or not JSON
        if obj.__class__ is not dict:
            if obj is NOT_JSON:
                return [event("raw", text=line)] if line.strip() else []
            return [event("raw", data=obj)]
        try:
            return handler(obj.get("type"), other)(obj)
        except Exception:  # a known type with an unexpected shape (or an unhashable type) is still only a raw line
            return [event("raw", data=obj)]

    return events
