"""An MCP server bound to one agent by the service that runs it (a dispatched run of a mesh member).

The worker checks the agent in, then writes its identity (service URL, agent_id, session token, API key) to a file
readable by its owner only, in the run's private home, and names the file in ``MUSTER_MCP_IDENTITY_FILE``: the token
never appears in a command line or an environment. The server started with it acts as that agent from its first
call, and as no other: a check-in under another agent_id, and a check-out (the run's end checks the agent out), are
refused.
"""

from __future__ import annotations

import json
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from muster_api.errors import ConfigurationError

IDENTITY_FILE_VARIABLE = "MUSTER_MCP_IDENTITY_FILE"


@dataclass(frozen=True)
class BoundIdentity:
    url: str
    agent_id: str
    token: str
    api_key: str | None = None

    def __repr__(self) -> str:  # never the token or the key, whoever prints it
        return f"BoundIdentity(url={self.url!r}, agent_id={self.agent_id!r})"

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def load(cls, path: Path) -> BoundIdentity:
        """The identity in ``path``; refused when others may read the file or it is not one."""
        try:
            if stat.S_IMODE(path.stat().st_mode) & 0o077:
                raise ConfigurationError(f"{IDENTITY_FILE_VARIABLE}: {path} is readable by others (want mode 0600)")
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"{IDENTITY_FILE_VARIABLE}: cannot read {path}: {exc}") from None
        fields = ("url", "agent_id", "token")
        if not isinstance(data, dict) or not all(isinstance(data.get(name), str) and data[name] for name in fields):
            raise ConfigurationError(f"{IDENTITY_FILE_VARIABLE}: {path} does not hold url, agent_id and token")
        key = data.get("api_key")
        return cls(data["url"], data["agent_id"], data["token"], key if isinstance(key, str) and key else None)
