"""Parse one line of JSON with the C scanner directly (what ``json.loads`` does, minus its per-call checks)."""

from __future__ import annotations

import json
from json.scanner import make_scanner
from typing import Any

NOT_JSON: Any = object()
_scan = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # typeshed models the C class oddly
_SPACE = " \t\r\n"


def parse(line: str) -> Any:
    """The JSON value of ``line``, or ``NOT_JSON``; never raises."""
    if not line or line[0] in _SPACE or line[-1] in _SPACE:
        line = line.strip(_SPACE)
        if not line:
            return NOT_JSON
    try:
        value, end = _scan(line, 0)
    except (StopIteration, ValueError, RecursionError):
        return NOT_JSON
    return value if end == len(line) else NOT_JSON


def text_or_none(value: Any) -> str | None:
    """``value`` if it is a string, else None: the one way a decoder reads an optional text field."""
    return value if value.__class__ is str else None
