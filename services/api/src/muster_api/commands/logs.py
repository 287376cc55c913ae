"""Stdlib logging, one line per record. Values of secrets never reach a record: we log names, not values."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# Libraries whose DEBUG lines carry a statement's bound parameters (message bodies, token hashes): kept at INFO even
# when the process's root logger is set to DEBUG.
PARAMETER_LOGGERS = ("aiosqlite",)


def configure(level: str) -> None:
    root = logging.getLogger("muster")
    if not any(getattr(h, "_muster", False) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(FORMAT))
        handler._muster = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level.upper())
    for name in PARAMETER_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
