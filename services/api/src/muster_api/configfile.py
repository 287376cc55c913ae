"""The config file every capability reads its block from (``MUSTER_CONFIG``, default ``./muster.toml``; TOML, or
JSON): the A2A ``agents`` block and the ``dispatch_agents`` block."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import anyio

from muster_a2a import AgentConfigError, ParsedAgents, parse_agents_config

DEFAULT_CONFIG = Path("muster.toml")


def is_default(path: Path) -> bool:
    """Whether ``path`` is the default config file (settings make it absolute against the start directory)."""
    return path in (DEFAULT_CONFIG, DEFAULT_CONFIG.absolute())


async def read_config(path: Path) -> dict[str, Any]:
    """The parsed file. A missing default file means no agents; a missing named file or a broken one is an
    ``AgentConfigError`` that names the file and the problem."""
    file = anyio.Path(path)
    if not await file.exists():
        if is_default(path):
            return {}
        raise AgentConfigError(f"config file {path} does not exist (set by MUSTER_CONFIG)")
    try:
        text = await file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentConfigError(f"config file {path} cannot be read: {exc}") from None
    return parse_document(text, path)


def parse_document(text: str, path: Path) -> dict[str, Any]:
    as_json = path.suffix.lower() == ".json" or (path.suffix.lower() != ".toml" and text.lstrip().startswith("{"))
    try:
        data: object = json.loads(text) if as_json else tomllib.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise AgentConfigError(f"config file {path}: invalid JSON at {where}: {exc.msg}") from None
    except tomllib.TOMLDecodeError as exc:
        raise AgentConfigError(f"config file {path}: invalid TOML: {exc}") from None
    if not isinstance(data, dict):
        raise AgentConfigError(f"config file {path}: the top level must be a table/object")
    return data


async def load_agents_block(path: Path) -> ParsedAgents:
    """The A2A ``agents`` block, checked; its errors name the file."""
    config = await read_config(path)
    try:
        return parse_agents_config(config)
    except AgentConfigError as exc:
        raise AgentConfigError(f"config file {path}: {exc}") from None
