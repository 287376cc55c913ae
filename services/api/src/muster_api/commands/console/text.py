"""Text as a person reads it in a terminal: agent-supplied strings made inert, durations made short.

The same rule as the dashboard's (``dashboard/static/dashboard.js``): escape sequences dropped, any other control
character and every bidirectional override or isolate shown as U+FFFD, so a status can neither recolour, move the
cursor, retitle the terminal, nor reorder the line around it.
"""

from __future__ import annotations

import re

ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def inert(value: object) -> str:
    if value is None:
        return ""
    return CONTROLS.sub("\ufffd", ESCAPES.sub("", str(value)))


def duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {(s % 3600) // 60:02d}m"
    return f"{s // 86400}d {(s % 86400) // 3600}h"


# Marked stale, as on the dashboard: the status unchanged this long, or no call this long.
STALE_STATUS_SECONDS = 30 * 60
STALE_HEARTBEAT_SECONDS = 10 * 60


def lines(body: str) -> list[str]:
    """A message body as inert lines (its own line breaks kept; every other control neutralised)."""
    return [inert(line) for line in body.replace("\r\n", "\n").split("\n")]
