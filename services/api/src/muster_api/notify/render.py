"""The words of a notification: a title naming what happened, and as much of the agents' text as ``body`` allows,
bounded. Sent as plain text (Apprise's TEXT format): whatever an agent wrote stays text where a person reads it."""

from __future__ import annotations

from collections.abc import Sequence

from muster_api.notify.config import BodyMode

MAX_TITLE = 300
MAX_LINE = 200
MAX_FULL = 2000
MAX_BODY = 4000
LISTED_IN_BURST = 10


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def excerpt(text: str, mode: BodyMode) -> str:
    """What of an agent's text a notification carries."""
    if mode == "none":
        return ""
    if mode == "first_line":
        lines = text.strip().splitlines()
        return clip(lines[0].strip(), MAX_LINE) if lines else ""
    return clip(text.strip(), MAX_FULL)


def burst(subject: str, parts: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """A person's messages as one notification: (title, body) from (sender, excerpt) pairs in the order sent."""
    senders = sorted({sender for sender, _ in parts})
    named = ", ".join(senders[:5]) + (f" and {len(senders) - 5} more" if len(senders) > 5 else "")
    count = "a message" if len(parts) == 1 else f"{len(parts)} messages"
    title = clip(f"{count} for {subject} from {named}", MAX_TITLE)
    lines = [f"{sender}: {text}" if text else sender for sender, text in parts[:LISTED_IN_BURST]]
    if len(parts) > LISTED_IN_BURST:
        lines.append(f"… and {len(parts) - LISTED_IN_BURST} more")
    body = "\n".join(lines) if any(text for _, text in parts) else ""
    return title, clip(body, MAX_BODY)
