"""The sessions of ``muster checkin``: each agent's token kept in the user's state directory so that later commands
act as that agent.

``$XDG_STATE_HOME/muster/cli/`` (default ``~/.local/state/muster/cli/``): one ``<agent_id>.json`` per agent
(``{url, agent_id, token}``, mode 0600, in a 0700 directory) and ``current``, the agent commands act as when no
``--as`` names one. A token is never printed, logged or passed on a command line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from muster_api.errors import CommandError
from muster_api.mcp.settings import default_state_dir


def state_dir() -> Path:
    # The same root as `muster mcp`'s sessions (which live beside, in mcp-sessions/).
    return default_state_dir() / "cli"


@dataclass(frozen=True, slots=True)
class Session:
    url: str
    agent_id: str
    token: str


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temporary, path)


def save(session: Session) -> None:
    folder = state_dir()
    _write_private(folder / f"{session.agent_id}.json", json.dumps(_as_dict(session)))
    _write_private(folder / "current", session.agent_id + "\n")


def _as_dict(session: Session) -> dict[str, str]:
    return {"url": session.url, "agent_id": session.agent_id, "token": session.token}


def find(agent_id: str) -> Session | None:
    path = state_dir() / f"{agent_id}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Session(url=str(data["url"]), agent_id=str(data["agent_id"]), token=str(data["token"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"the stored session {path} is unreadable ({exc}); delete it and check in again") from None


def current_agent() -> str | None:
    try:
        return (state_dir() / "current").read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def load(agent_id: str | None, url: str) -> Session:
    """The session to act as: ``agent_id``'s, else the last checked in. Refuses one from another service."""
    chosen = agent_id or current_agent()
    if chosen is None:
        raise CommandError("no agent has checked in from here: run `muster checkin AGENT_ID` first")
    session = find(chosen)
    if session is None:
        raise CommandError(f"no stored session for {chosen!r}: run `muster checkin {chosen}` first")
    if session.url != url:
        raise CommandError(
            f"{chosen!r} checked in at {session.url}, not {url}: check in again there, or set MUSTER_URL"
        )
    return session


def forget(agent_id: str) -> None:
    folder = state_dir()
    (folder / f"{agent_id}.json").unlink(missing_ok=True)
    if current_agent() == agent_id:
        (folder / "current").unlink(missing_ok=True)
