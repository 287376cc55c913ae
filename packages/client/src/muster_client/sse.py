"""Server-Sent Events: the lines of a ``text/event-stream`` answer turned into events (WHATWG rules, the subset the
service uses: ``event``, ``data``, ``id``; comments and unknown fields are skipped)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ServerEvent:
    event: str
    data: str
    id: str | None = None


@dataclass(slots=True)
class EventParser:
    """Feed it one line at a time (without its line break); it returns an event at each blank line that ends one."""

    _event: str = ""
    _data: list[str] = field(default_factory=list)
    _id: str | None = None

    def feed(self, line: str) -> ServerEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> ServerEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = ServerEvent(self._event or "message", "\n".join(self._data), self._id)
        self._event, self._data = "", []
        # The id persists (it is the stream's last event id) until a new one comes.
        return event
