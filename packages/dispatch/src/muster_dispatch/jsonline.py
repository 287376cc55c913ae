"""Parse one line of JSON with the C scanner directly (what ``json.loads`` does, minus its per-call checks)."""

from __future__ import annotations

import json
from collections.abc import Callable
from json.scanner import make_scanner
from typing import Any

NOT_JSON: Any = object()
# ``scan(line, 0)`` -> (value, end): the C scanner itself. A decoder tries it inline on a line first (one call fewer
# per line) and hands anything but a bare JSON line (``end != len(line)`` or an exception) to ``parse``.
scan: Callable[[str, int], tuple[Any, int]] = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
SCAN_ERRORS = (StopIteration, ValueError, RecursionError)
_SPACE = " \t\r\n"


def parse(line: str) -> Any:
    """The JSON value of ``line``, or ``NOT_JSON``; never raises."""
    if not line or line[0] in _SPACE or line[-1] in _SPACE:
        line = line.strip(_SPACE)
        if not line:
            return NOT_JSON
    try:
        value, end = scan(line, 0)
    except SCAN_ERRORS:
        return NOT_JSON
    return value if end == len(line) else NOT_JSON


def text_or_none(value: Any) -> str | None:
    """``value`` if it is a string, else None: the one way a decoder reads an optional text field."""
    return value if value.__class__ is str else None
