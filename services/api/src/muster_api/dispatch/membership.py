"""A run's agent on the mesh: checked in while the run runs, its status what the run is doing, checked out at the end.

The worker checks the agent in (``mesh = {…}`` on its definition) and holds the session token in memory only; the
CLI's MCP server gets it through a 0600 file in the private home (``muster_api.mcp.bound``). The lease is short (the
mesh's shortest TTL) and renewed by the run's progress and at each run-lease renewal: a worker that dies stops
renewing, and the agent leaves the roster when the lease lapses.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from shutil import which
from typing import Any
from urllib.parse import urlsplit

import anyio

from muster_api.mcp.bound import IDENTITY_FILE_VARIABLE, BoundIdentity
from muster_dispatch import McpServer
from muster_dispatch.egress import Endpoint
from muster_mesh import Mesh, MeshError
from muster_mesh.claims import Claims, ReleaseRequest
from muster_mesh.models import CONTROLS, MAX_STATUS_CHARS, CheckinRecord, CheckinRequest, CheckoutRequest

log = logging.getLogger("muster.dispatch.membership")

TTL_SECONDS = 60  # the mesh's shortest lease: a dead worker's agent leaves the roster within a minute
STATUS_EVERY = 1.0  # seconds: a run's progress changes its status at most this often
IDENTITY_FILE = ".config/muster/identity.json"  # under the private home
MCP_NAME = "muster"
_CONTROLS = re.compile(f"[{CONTROLS}]+")


@dataclass(frozen=True)
class Member:
    """Who a run's agent is on the mesh."""

    agent_id: str
    role: str
    repo: str
    caps: tuple[str, ...]


def one_line(text: str) -> str:
    line = _CONTROLS.sub(" ", text).strip()
    return line if len(line) <= MAX_STATUS_CHARS else line[: MAX_STATUS_CHARS - 1] + "…"


def _target(value: Any) -> str:
    if isinstance(value, dict):
        for key in ("file_path", "path", "notebook_path", "command", "pattern", "url"):
            found = value.get(key)
            if isinstance(found, str) and found:
                return found
            if isinstance(found, list) and found and all(isinstance(part, str) for part in found):
                return " ".join(found)
    return ""


_VERBS = {"Edit": "editing", "Write": "writing", "MultiEdit": "editing", "Read": "reading", "Bash": "running"}


def _tool_status(event: dict[str, Any]) -> str:
    name = str(event.get("name") or "a tool")
    target = _target(event.get("input"))
    verb = _VERBS.get(name)
    if verb is None:
        return f"running: {name} {target}".rstrip()
    return f"running: {verb} {target}".rstrip()


def _quota_status(event: dict[str, Any]) -> str:
    reset = event.get("reset_at")
    if isinstance(reset, str):
        try:
            return f"quota until {datetime.fromisoformat(reset).strftime('%H:%M')}"
        except ValueError:
            pass
    return "quota reached"


def status_of(event: dict[str, Any]) -> str | None:
    """What a run is doing, as one line for the roster, after ``event``; None when the event says nothing new."""
    kind = event.get("type")
    if kind == "tool":
        return _tool_status(event)
    if kind in ("tool_result", "conversation", "retry"):
        return "waiting for the model"
    if kind in ("text", "text_delta"):
        return "running: answering"
    if kind == "reasoning":
        return "running: thinking"
    if kind == "quota":
        return _quota_status(event)
    if kind == "fallback":
        return f"running: moving to {event.get('name') or 'the next candidate'}"
    return None


def muster_executable() -> str | None:
    """The ``muster`` command of this installation (beside the interpreter), else the one on PATH."""
    beside = Path(sys.executable).with_name("muster")
    return str(beside) if beside.is_file() else which("muster")


class RunPresence:
    """One run's agent on the mesh, from its check-in to its check-out."""

    def __init__(
        self, mesh: Mesh, member: Member, *, renew_every: float, token: str | None = None, stays_as: str | None = None
    ) -> None:
        """``token``: a session the agent has already (a sleeping agent's); ``stays_as``: at the run's end the agent
        stays checked in with this status instead of checking out (its claims released)."""
        self.mesh = mesh
        self.member = member
        self.renew_every = renew_every
        self.status = "running: starting"
        self.stays_as = stays_as
        self._sent: str | None = None
        self._token = token
        self._changed = anyio.Event()
        # An event of the run since the last renewal: the next one is the agent's activity (muster_mesh.presence).
        self._active = True

    @property
    def token(self) -> str:
        assert self._token is not None, "checked in first"
        return self._token

    async def checkin(self) -> CheckinRecord:
        """Check the agent in (raises ``MeshError`` when it cannot: e.g. another session holds the agent_id)."""
        active, self._active = self._active, False
        try:
            answer = await self.mesh.checkin(self._request(), token=self._token, active=active)
        except BaseException:
            self._active = self._active or active  # the next renewal carries it
            raise
        assert isinstance(answer, CheckinRecord)
        if answer.token:
            self._token = answer.token
        self._sent = self.status
        return answer

    def _request(self) -> CheckinRequest:
        member = self.member
        return CheckinRequest(
            agent_id=member.agent_id,
            role=member.role,
            repo=member.repo,
            caps=list(member.caps),
            status=self.status,
            ttl_seconds=TTL_SECONDS,
            confirm=True,
        )

    def observe(self, event: dict[str, Any]) -> None:
        """A journal observer: the run's latest event becomes the status (sent by ``keep``); any event is the agent's
        activity."""
        self._active = True
        status = status_of(event)
        if status is not None and status != self.status:
            self.status = one_line(status)
            self._changed.set()

    async def keep(self) -> None:
        """Renew the lease with the current status: when it changes (at most every ``STATUS_EVERY``) and at least
        every ``renew_every``. Until cancelled."""
        while True:
            with anyio.move_on_after(self.renew_every):
                await self._changed.wait()
            self._changed = anyio.Event()
            try:
                await self.checkin()
            except MeshError as exc:
                log.warning("%s: renewing the run's presence failed: %s", self.member.agent_id, exc)
            except Exception:  # a database hiccup: the next renewal tries again
                log.exception("%s: renewing the run's presence failed", self.member.agent_id)
            await anyio.sleep(STATUS_EVERY)

    async def checkout(self) -> None:
        if self._token is None:
            return
        if self.stays_as is not None:
            await self._stay()
            return
        token, self._token = self._token, None
        try:
            await self.mesh.checkout(CheckoutRequest(confirm=True), token=token)
        except Exception as exc:  # the lease ends by itself: nothing to keep
            log.warning("%s: checking out after the run failed (%s); its lease will lapse", self.member.agent_id, exc)

    async def _stay(self) -> None:
        """The run ended but its agent stays checked in (asleep, or serving a role): its path claims end with the
        run all the same (they said what this run was changing), and its status says it waits."""
        self.status = self.stays_as or self.status
        try:
            await Claims(self.mesh).release(ReleaseRequest(confirm=True), token=self._token)
        except Exception as exc:  # the session may have lapsed (its claims with it)
            log.warning("%s: releasing the run's claims failed (%s)", self.member.agent_id, exc)
        try:
            await self.checkin()
        except Exception as exc:  # the sleeper's own renewal sets it again
            log.warning("%s: the status after the run was not set (%s)", self.member.agent_id, exc)

    def mcp_server(self, url: str, api_key: str | None, executable: str) -> McpServer:
        """``muster mcp`` bound to this agent: the token (and ``api_key``, the run's own key, never the service's) in
        a 0600 file of the private home, named by a variable."""
        assert self._token is not None
        identity = BoundIdentity(url, self.member.agent_id, self._token, api_key)
        return McpServer(
            MCP_NAME,
            executable,
            ("mcp",),
            env={IDENTITY_FILE_VARIABLE: f"~/{IDENTITY_FILE}"},
            private_files={IDENTITY_FILE: identity.dumps()},
            endpoints=(endpoint_of(url),),
            read_only=runtime_paths(executable),
        )


def endpoint_of(url: str) -> Endpoint:
    """The host and port of the service's URL: what a sandbox's egress must let the MCP server reach."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Endpoint(parts.hostname or "127.0.0.1", port)


def runtime_paths(executable: str) -> tuple[str, ...]:
    """What ``muster mcp`` runs from, to bind read-only in a sandbox: the command's directory, this environment
    and the Python it is made from, and the source of Muster's packages (an editable install keeps it elsewhere)."""
    paths = {str(Path(executable).parent), sys.prefix, sys.base_prefix}
    for package in ("muster_api", "muster_client", "muster_mesh", "muster_a2a", "muster_dispatch"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin is not None:
            paths.add(str(Path(spec.origin).parent.parent))
    return tuple(sorted(paths))


def service_url(configured: str | None, host: str, port: int) -> str:
    """Where an MCP server on this machine reaches the service: the configured URL, else this instance's own."""
    if configured:
        return configured.rstrip("/")
    if host in ("", "0.0.0.0"):  # noqa: S104 (a wildcard bind is reached on loopback)
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
