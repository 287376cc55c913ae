"""Session tokens kept between runs of the MCP server, so that a restarted agent session resumes its identity.

One file per (service URL, agent_id) under ``<state dir>/mcp-sessions/``, named by a hash of the two; the directory
is 0700 and each file 0600 from its creation (never readable by others, not even for an instant), replaced
atomically. A token is a credential: it is never logged and never put in a tool result.

Two MCP servers of one user share the files, so the server acting as an agent holds an exclusive lock on that
agent's lock file while it does: another server asked to check in as the same agent_id is refused instead of taking
over a live session with its token. The lock goes with the process, so a restarted server resumes the identity.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from pathlib import Path

from muster_api.errors import ToolRefused


class IdentityStore:
    def __init__(self, state_dir: Path, url: str) -> None:
        self.directory = state_dir / "mcp-sessions"
        self.url = url
        self._held: dict[str, int] = {}

    def claim(self, agent_id: str) -> None:
        """Hold ``agent_id`` for this process (until ``release``); refused while another process holds it."""
        if agent_id in self._held:
            return
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(self.path(agent_id).with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise ToolRefused(
                f"agent_id {agent_id!r} is in use by another muster mcp server on this machine: choose another agent_id"
            ) from None
        self._held[agent_id] = descriptor

    def release(self, agent_id: str) -> None:
        descriptor = self._held.pop(agent_id, None)
        if descriptor is not None:
            os.close(descriptor)

    def path(self, agent_id: str) -> Path:
        digest = hashlib.sha256(f"{self.url}\0{agent_id}".encode()).hexdigest()[:32]
        return self.directory / f"{digest}.json"

    def load(self, agent_id: str) -> str | None:
        try:
            data = json.loads(self.path(agent_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("url") != self.url or data.get("agent_id") != agent_id:
            return None
        token = data.get("token")
        return token if isinstance(token, str) and token else None

    def save(self, agent_id: str, token: str) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = self.path(agent_id)
        temporary = target.with_suffix(f".{os.getpid()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                json.dump({"url": self.url, "agent_id": agent_id, "token": token}, out)
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise

    def forget(self, agent_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(agent_id).unlink()
