"""The Harness type: everything dispatch needs to know about one coding-agent CLI.

A harness is data plus pure functions (no disk, no processes): the provider and the runner do the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from muster_dispatch.egress import Endpoint
from muster_dispatch.events import AgentEvent
from muster_dispatch.host_login import HostLogin, login_source
from muster_dispatch.inputs import AgentInput
from muster_dispatch.usage import Usage


@dataclass(frozen=True, slots=True)
class Command:
    """A program to run in the workspace. ``stdin``: text written then closed; ``keep_stdin`` leaves it open."""

    program: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: str | None = None
    keep_stdin: bool = False
    # Where it needs to connect (the model's endpoints): what a sandbox's egress lets through by default.
    endpoints: tuple[Endpoint, ...] = ()
    # The id of the new conversation this command starts, for a CLI that takes it from its caller (Copilot's
    # ``--session-id``): known before the CLI prints a line, so a turn stopped early can still be resumed.
    conversation: str | None = None
    # Host paths it needs besides the system's and its own install (an MCP server's runtime), bound read-only.
    read_only: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CredentialPlan:
    """How an agent authenticates in a sandbox, decided without disk access: key variables, or (``host_login``) the
    user's own login copied from the host home into the private home for each turn."""

    variables: Mapping[str, str] = field(default_factory=dict)
    host_login: HostLogin | None = None
    host_files: Mapping[str, str] = field(default_factory=dict)  # host path -> path relative to the private home
    generated: Mapping[str, str] = field(default_factory=dict)  # path relative to the home -> content
    login: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class AgentConfiguration:
    """Files to write (merged) into the agent's private home, and host files to copy there; plus environment."""

    files: Mapping[str, str] = field(default_factory=dict)  # path relative to the home -> content
    host_files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)  # e.g. CODEX_HOME; a value "~/x" is under the private home
    # Written readable by their owner only (0600), e.g. a credential an MCP server reads: never in argv or env.
    private_files: Mapping[str, str] = field(default_factory=dict)

    def merged(self, other: AgentConfiguration) -> AgentConfiguration:
        """Both configurations: a file both write is merged (JSON objects key by key, other text appended)."""
        files = dict(self.files)
        for rel, content in other.files.items():
            files[rel] = merge_text(rel, files[rel], content) if rel in files else content
        return AgentConfiguration(
            files=files,
            host_files={**self.host_files, **other.host_files},
            env={**self.env, **other.env},
            private_files={**self.private_files, **other.private_files},
        )


def merge_text(rel: str, first: str, second: str) -> str:
    """Two contents of one configuration file: JSON objects merged one level deep, anything else appended."""
    if rel.endswith(".json"):
        a, b = json.loads(first), json.loads(second)
        if isinstance(a, dict) and isinstance(b, dict):
            return json.dumps(
                {
                    **a,
                    **{
                        k: {**a[k], **v} if isinstance(a.get(k), dict) and isinstance(v, dict) else v
                        for k, v in b.items()
                    },
                }
            )
    return f"{first.rstrip()}\n\n{second}"


@dataclass(frozen=True, slots=True)
class McpServer:
    """A stdio MCP server the CLI is given in its private configuration. A value of ``env`` starting with ``~/`` is a
    path under the private home as the agent sees it (expanded before the harness writes it); ``private_files``
    (relative to the home) are written 0600 before the CLI starts."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    private_files: Mapping[str, str] = field(default_factory=dict)
    # In a sandbox: where the server connects (let through its egress) and what of the host it runs from (bound
    # read-only), e.g. the service's address and the Python installation of ``muster``.
    endpoints: tuple[Endpoint, ...] = ()
    read_only: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """The pinned CLI: an npm package installed into a cache when the executable is missing."""

    package: str
    version: str
    binary: str
    # A CLI that unpacks itself into a cache on first run (Copilot: 235 MB): the variable naming that cache, set to a
    # directory beside the pinned install for the version check (which unpacks it once) and for every run, so a
    # private home never gets its own copy.
    unpack_variable: str | None = None


class LiveDriver(Protocol):
    done: bool

    def opening(self) -> list[str]: ...

    def feed(self, line: str) -> list[str]: ...

    def steer(self, text: str) -> list[str]: ...


def private_files_of(servers: Sequence[McpServer]) -> dict[str, str]:
    return {rel: content for server in servers for rel, content in server.private_files.items()}


RequestFn = Callable[[AgentInput, "str | None", str], Command]  # (input, model, executable) -> Command


@dataclass(frozen=True, slots=True)
class Harness:
    name: str
    request_fn: RequestFn
    events: Callable[[str], list[AgentEvent]]
    quota: Callable[[str], bool]
    unavailable: Callable[[str], bool]
    requires_finished_event: bool
    credentials: Callable[[Mapping[str, str]], CredentialPlan]
    configuration: Callable[[Mapping[str, str]], AgentConfiguration]
    bootstrap: Bootstrap | None
    resumable: bool
    forkable: bool
    live_input: bool
    # Where the native session of a conversation lives in a home (globs relative to the home), and where a captured
    # file goes back when restoring into a new home for a workspace.
    session_globs: Callable[[str], list[str]]
    restore_path: Callable[[str, str, Path], str]
    live_message: Callable[[str], str] | None = None  # stdin line of a steering message (Claude stream-json)
    # A stateful live-input protocol (Codex app-server): (input, model, workspace) -> driver with opening(),
    # feed(line) -> lines to write, steer(text) -> lines to write, and done.
    live_driver: Callable[[AgentInput, str | None, Path], LiveDriver] | None = None
    # A native fork prepared from the session files, without running the CLI: (conversation id, {path relative to
    # the home: bytes}) -> (child id, files to write). None: fork goes through ``request`` (Claude --fork-session).
    fork: Callable[[str, Mapping[str, bytes]], tuple[str, dict[str, bytes]]] | None = None
    transcript_usage: Callable[[str], Usage] | None = None
    # The one session file that records the conversation's messages, by conversation id (relative to the home), where
    # the CLI writes others before it (Copilot's lock and workspace files): only it says a prompt reached the session.
    session_log: Callable[[str], str] | None = None
    executable: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)  # harness defaults, under every other source
    # How the CLI is given MCP servers in its private configuration (None: the CLI takes none from us).
    mcp: Callable[[Sequence[McpServer]], AgentConfiguration] | None = None
    # The final usage event is a running total for the whole conversation (Codex): on a resumed turn the runner
    # subtracts the total read from the session (``transcript_usage``) before the turn.
    cumulative_usage: bool = False
    # The model endpoints the CLI connects to, from the agent's variables (a configured base URL, else the vendor's
    # API and, for a login, the host that refreshes it): what ``egress = "model"`` lets out of a sandbox.
    endpoints: Callable[[Mapping[str, str]], tuple[Endpoint, ...]] = lambda _variables: ()

    def request(self, input: AgentInput, *, model: str | None = None, executable: str | None = None) -> Command:
        program = executable or self.executable or (self.bootstrap.binary if self.bootstrap else self.name)
        return self.request_fn(input, model, program)


def credential_source(plan: CredentialPlan, host_home: Path) -> str | None:
    """Where an agent's credentials come from, for people (``key variable ANTHROPIC_API_KEY``, ``host login
    ~/.codex/auth.json``); None when it has none. Names only, never a value."""
    if plan.variables:
        return "key variable " + ", ".join(sorted(plan.variables))
    if plan.host_login is not None:
        return login_source(plan.host_login, host_home)
    return None
