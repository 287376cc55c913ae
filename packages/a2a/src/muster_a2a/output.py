"""Task states and the text of a task, for documents of either protocol version (decoded leniently)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from a2a.types import Message, Part, Role, Task

from muster_a2a._proto import has, state_enum_name, which

TERMINAL = frozenset({"completed", "failed", "canceled", "rejected"})
INTERRUPTED = frozenset({"input-required", "auth-required"})
FAILED = frozenset({"failed", "canceled", "rejected"})


def state_name(raw: object) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` (v1.0), ``input-required`` (v0.3) or a proto enum int → ``input-required``."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = state_enum_name(raw) or "unknown"
    text = str(raw).strip()
    if text.upper().startswith("TASK_STATE_"):
        text = text[len("TASK_STATE_") :]
    text = text.lower().replace("_", "-")
    if text == "cancelled":
        return "canceled"
    return text or "unknown"


# The SDK's own objects are read directly: a call reads its answer from them, and converting the whole task (history
# included) to a dict first costs more than the rest of the client side of a call.


def _proto_texts(parts: Iterable[Part]) -> list[str]:
    return [part.text for part in parts if which(part, "content") == "text"]


def proto_message_text(message: Message) -> str:
    """``message_text`` of an SDK message."""
    return "\n".join(_proto_texts(message.parts))


def _proto_output(task: Task) -> str:
    texts = [text for artifact in task.artifacts for text in _proto_texts(artifact.parts)]
    if texts:
        return "\n".join(texts)
    if has(task.status, "message"):
        text = proto_message_text(task.status.message)
        if text:
            return text
    for message in reversed(task.history):
        if message.role == Role.ROLE_AGENT:
            text = proto_message_text(message)
            if text:
                return text
    return ""


def _texts(parts: object) -> list[str]:
    if not isinstance(parts, Sequence) or isinstance(parts, str | bytes):
        return []
    out: list[str] = []
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        # v0.3 parts say kind="text"; v1.0 parts carry exactly one of text/raw/url/data.
        kind = part.get("kind")
        text = part.get("text")
        if isinstance(text, str) and kind in (None, "text"):
            out.append(text)
    return out


def message_text(message: object) -> str:
    if not isinstance(message, Mapping):
        return ""
    return "\n".join(_texts(message.get("parts")))


def _is_agent(message: Mapping[str, Any]) -> bool:
    return str(message.get("role", "")).lower() in ("agent", "role_agent")


def task_output(task: Task | Mapping[str, Any]) -> str:
    """All text parts across ``artifacts[].parts[]`` joined by newlines; else the text of ``status.message``; else the
    last agent message in ``history``; else the empty string."""
    if isinstance(task, Task):
        return _proto_output(task)
    doc = task
    artifacts = doc.get("artifacts")
    texts: list[str] = []
    if isinstance(artifacts, Sequence) and not isinstance(artifacts, str | bytes):
        for artifact in artifacts:
            if isinstance(artifact, Mapping):
                texts.extend(_texts(artifact.get("parts")))
    if texts:
        return "\n".join(texts)
    status = doc.get("status")
    if isinstance(status, Mapping):
        text = message_text(status.get("message"))
        if text:
            return text
    history = doc.get("history")
    if isinstance(history, Sequence) and not isinstance(history, str | bytes):
        for message in reversed(history):
            if isinstance(message, Mapping) and _is_agent(message):
                text = message_text(message)
                if text:
                    return text
    return ""


def status_text(task: Task | Mapping[str, Any]) -> str:
    """The text of ``status.message`` (why a task failed, what input it needs)."""
    if isinstance(task, Task):
        return proto_message_text(task.status.message) if has(task.status, "message") else ""
    status = task.get("status")
    return message_text(status.get("message")) if isinstance(status, Mapping) else ""
