"""The ``agents`` block of the config file (remote A2A agents)."""

from __future__ import annotations

from pathlib import Path

from muster_a2a import AgentConfigError, ParsedAgents, parse_agents_config
from muster_api.configfile import read_config


async def load_agents_block(path: Path) -> ParsedAgents:
    config = await read_config(path)
    try:
        return parse_agents_config(config)
    except AgentConfigError as exc:
        raise AgentConfigError(f"config file {path}: {exc}") from None
