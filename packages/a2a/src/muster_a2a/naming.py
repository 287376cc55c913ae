"""Tool names: ``^[A-Za-z0-9_-]{1,64}$``, stable, deterministic suffixes on collision."""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_LEN = 64
_BAD = re.compile(r"[^A-Za-z0-9_-]+")
VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def sanitize(text: str, fallback: str = "agent") -> str:
    cleaned = _BAD.sub("_", text.strip()).strip("_")
    return cleaned or fallback


def tool_name(card_name: str, skill_id: str | None) -> str:
    base = sanitize(card_name)
    name = base if skill_id is None else f"{base}_{sanitize(skill_id, 'skill')}"
    return name[:MAX_LEN]


def unique(name: str, taken: Iterable[str]) -> str:
    """``name`` if free, else ``name_2``, ``name_3``… (truncated so that the suffix always fits)."""
    used = set(taken)
    if name not in used:
        return name
    n = 2
    while True:
        suffix = f"_{n}"
        candidate = name[: MAX_LEN - len(suffix)] + suffix
        if candidate not in used:
            return candidate
        n += 1
