"""What ``muster mcp`` reads from its environment. A client of the service, it has its own few settings rather
than the service's (database, host, keys)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from muster_mesh.wake import DEFAULT_MIN_INTERVAL


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/muster``, else ``~/.local/state/muster``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "muster"


class McpSettings(BaseSettings):
    """``MUSTER_URL``, ``MUSTER_API_KEY`` (as the client reads them), ``MUSTER_AGENT_ID`` (resume that identity at
    start, without a check-in), ``MUSTER_MCP_WAKE_INTERVAL_SECONDS`` (at most one Herdr wake per this many seconds),
    ``MUSTER_MCP_STATE_DIR`` (where session tokens are kept), ``MUSTER_MCP_IDENTITY_FILE`` (bound to one agent)."""

    model_config = SettingsConfigDict(env_prefix="MUSTER_", extra="ignore", frozen=True)

    url: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    agent_id: str | None = None
    mcp_wake_interval_seconds: float = Field(default=DEFAULT_MIN_INTERVAL, gt=0)
    mcp_wake_settle_seconds: float = Field(default=0.25, ge=0, le=5)
    mcp_state_dir: Path = Field(default_factory=default_state_dir)
    # Set by the service for a dispatched run: the 0600 file of the identity this server is bound to (bound.py).
    mcp_identity_file: Path | None = None
