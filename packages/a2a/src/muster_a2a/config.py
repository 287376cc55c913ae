"""The ``agents`` block of a config file: NAME → descriptor, mirroring ``mcpServers``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from muster_a2a.errors import AgentConfigError
from muster_a2a.models import DEFAULT_POLL_EVERY_MS, DEFAULT_TIMEOUT_MS, AgentDescriptor

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

# Config spellings → descriptor fields. Both the camelCase of JSON configs and snake/kebab case are accepted.
_ALIASES = {
    "pollEvery": "poll_every",
    "poll-every": "poll_every",
    "poll_every": "poll_every",
    "timeout": "timeout",
    "headers": "headers",
    "allowHosts": "allow_hosts",
    "allow-hosts": "allow_hosts",
    "allow_hosts": "allow_hosts",
    "allowHttp": "allow_http",
    "allow-http": "allow_http",
    "allow_http": "allow_http",
}
_IGNORED = {"card", "disabled", "enabled", "description"}


class ParsedAgents(list[AgentDescriptor]):
    """The descriptors, ordered by name, plus why other entries were skipped (``skipped``: name → reason)."""

    def __init__(self, descriptors: list[AgentDescriptor], skipped: dict[str, str]) -> None:
        super().__init__(descriptors)
        self.skipped = skipped


def expand_env(value: str, env: Mapping[str, str] | None = None) -> str:
    """Replace each ``${NAME}`` with the environment variable; an unset variable is an error naming it."""
    source = os.environ if env is None else env

    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in source:
            raise AgentConfigError(f"environment variable {name} is not set")
        return source[name]

    return _ENV.sub(repl, value)


def _disabled(entry: Mapping[str, Any]) -> bool:
    return entry.get("disabled") is True or entry.get("enabled") is False


def _descriptor(name: str, entry: Mapping[str, Any], env: Mapping[str, str] | None) -> AgentDescriptor:
    fields: dict[str, Any] = {"name": name, "card": entry["card"]}
    for key, value in entry.items():
        if key in _IGNORED:
            continue
        target = _ALIASES.get(key)
        if target is None:
            raise AgentConfigError(f"unknown key {key!r}")
        fields[target] = value
    headers = fields.get("headers", {})
    if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
        raise AgentConfigError("headers must be a table of strings")
    try:
        fields["headers"] = {str(k): expand_env(v, env) for k, v in headers.items()}
    except AgentConfigError as exc:
        raise AgentConfigError(f"headers: {exc}") from None
    fields.setdefault("timeout", DEFAULT_TIMEOUT_MS)
    fields.setdefault("poll_every", DEFAULT_POLL_EVERY_MS)
    try:
        return AgentDescriptor.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise AgentConfigError(problems) from None


def parse_agents_config(config: Mapping[str, Any], *, env: Mapping[str, str] | None = None) -> ParsedAgents:
    """The ``agents`` block of a parsed config object as descriptors ordered by name.

    Disabled entries (``disabled: true`` / ``enabled: false``) are dropped; entries without a string ``card`` (or
    otherwise malformed) are skipped with the reason in ``.skipped``. A missing block means no agents; a block that
    is not a table is an ``AgentConfigError``.
    """
    block = config.get("agents")
    if block is None:
        return ParsedAgents([], {})
    if not isinstance(block, Mapping):
        raise AgentConfigError("'agents' must be a table of NAME → {card = …}")
    descriptors: list[AgentDescriptor] = []
    skipped: dict[str, str] = {}
    for name in sorted(block, key=str):
        entry = block[name]
        if not isinstance(entry, Mapping):
            skipped[str(name)] = "entry is not a table"
            continue
        if _disabled(entry):
            continue
        if not isinstance(entry.get("card"), str) or not entry["card"].strip():
            skipped[str(name)] = "no string 'card' (a card URL or the agent's base URL)"
            continue
        try:
            descriptors.append(_descriptor(str(name), entry, env))
        except AgentConfigError as exc:
            skipped[str(name)] = str(exc)
    return ParsedAgents(descriptors, skipped)
