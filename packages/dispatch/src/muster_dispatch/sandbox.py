"""``SandboxProvider``: what the runner asks of a place a CLI runs in.

A provider hands out one ``Sandbox`` per workspace (a private home beside it), writes the agent's configuration
there, layers the process environment (the ``configuration`` conflict rule: a name both the provider and the agent
define is refused), starts a command with its whole process tree in one group that a cancel, a deadline or the
worker's exit kills whole, moves files in and out of the home, and releases what it holds.
``LocalProvider`` runs on the host; ``BwrapProvider`` confines every process in bubblewrap namespaces.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from muster_dispatch.harness import AgentConfiguration, Command
from muster_dispatch.local_process import LocalProcess
from muster_dispatch.provider import Sandbox


class SandboxProvider(Protocol):
    kind: str
    variables: dict[str, str]
    # Where the user's own CLI logins are read from on the host, to be copied into a sandbox's private home.
    host_home: Path

    def sandbox(self, workspace: Path) -> Sandbox: ...

    def configure(self, sandbox: Sandbox, agent: str, configuration: AgentConfiguration) -> None: ...

    def environment(
        self,
        sandbox: Sandbox,
        *,
        harness: Mapping[str, str] | None = None,
        agent: Mapping[str, str] | None = None,
        dotenv: Mapping[str, str] | None = None,
    ) -> dict[str, str]: ...

    async def start(self, command: Command, sandbox: Sandbox, env: Mapping[str, str]) -> LocalProcess: ...

    async def upload(self, sandbox: Sandbox, files: Mapping[str, bytes]) -> None: ...

    async def download(self, sandbox: Sandbox, paths: list[str]) -> dict[str, bytes]: ...

    async def release(self) -> None: ...


__all__ = ["SandboxProvider"]
