"""The ``dispatch_agents`` block of the config file (``MUSTER_CONFIG``, shared with the A2A ``agents`` block).

With no block, the built-in agents: ``claude``, ``codex``, ``fallback``, and ``opencode``, ``gemini`` and ``copilot``
when their pinned CLI is installed (see ``builtin_agents``); a block replaces them whole. NAME → ``{kind = "cli",
harness, model?, permission_mode?, variables}`` | ``{kind = "fallback", agents, on}`` | ``{kind = "custom",
entrypoint = "package.module:function"}``. A cli or fallback agent runs in ``sandbox = "bwrap" | "podman" | "docker"
| "local"`` (default: bwrap on Linux) with ``egress = "model" | "none" | "open" | ["host:port", …]`` (default
``"model"``: only its model's endpoints; a list adds hosts); a fallback's candidates run in the fallback's sandbox.
``${ENV}`` in variables is expanded as in the agents block. A wrong entry is isolated: it stays listed with its
``error`` and cannot run; the others are unaffected. Every kind may add ``a2a = true`` or ``a2a = {description,
skills}``: the agent is then served over A2A too.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from muster_a2a import AgentConfigError
from muster_a2a.config import expand_env
from muster_dispatch import (
    ConversationStore,
    DispatchError,
    McpServer,
    claude_harness,
    cli_agent,
    cli_status,
    codex_harness,
    copilot_harness,
    credential_source,
    custom_agent,
    fallback_agent,
    gemini_harness,
    harness_status,
    opencode_harness,
)
from muster_dispatch.agents import Agent, CustomFn, DispatchAgent
from muster_dispatch.egress import Egress
from muster_dispatch.harness import Harness
from muster_dispatch.sandboxes import SandboxName, check_egress, default_sandbox
from muster_mesh.models import AGENT_ID_PATTERN, MAX_CAPS, AgentId, Label, Repo

BLOCK = "dispatch_agents"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
ENTRYPOINT_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
EgressSetting = Literal["model", "none", "open"] | Annotated[list[str], Field(max_length=50)]


class ServedSkill(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=NAME_PATTERN)
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)
    tags: list[str] = Field(default_factory=list, max_length=20)


class ServedOptions(BaseModel):
    """``a2a = true`` or ``a2a = {description, skills}``: the agent is also served over A2A (``muster_api.served``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str | None = Field(default=None, min_length=1, max_length=2000)
    skills: list[ServedSkill] = Field(default_factory=list, max_length=50)


def _served(value: Any) -> Any:
    return ServedOptions() if value is True else None if value is False else value


Served = Annotated[ServedOptions | None, BeforeValidator(_served)]


class MeshMembership(BaseModel):
    """``mesh = true`` or ``mesh = {agent_id?, role?, repo?, caps?}``: while a run of the agent is running, the agent
    is checked in to the mesh under ``agent_id`` (default: the agent's name; ``repo`` default: the run's workspace),
    and a CLI agent gets ``muster mcp`` bound to that identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_id: AgentId | None = None
    role: Label = "builder"
    repo: Repo | None = None
    caps: list[Label] = Field(default_factory=list, max_length=MAX_CAPS)


class ServeTasks(BaseModel):
    """``serve_tasks = {role, repo?, max_parallel}``: this service's workers claim the tasks addressed to ``role``
    (and ``repo``) and run each as a run of the agent, at most ``max_parallel`` at once per instance."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Label
    repo: Repo | None = None
    max_parallel: int = Field(default=1, ge=1, le=16)


def _membership(value: Any) -> Any:
    return MeshMembership() if value is True else None if value is False else value


Membership = Annotated[MeshMembership | None, BeforeValidator(_membership)]


class CliEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["cli"]
    harness: Literal["claude", "codex", "opencode", "gemini", "copilot"]
    model: str | None = Field(default=None, min_length=1, max_length=200)
    permission_mode: str | None = Field(default=None, min_length=1, max_length=64)
    variables: dict[str, str] = Field(default_factory=dict)
    sandbox: SandboxName | None = None
    egress: EgressSetting | None = None
    a2a: Served = None
    mesh: Membership = None
    wake: bool = False
    wake_interval: float = Field(default=30.0, ge=1, le=86400)
    serve_tasks: ServeTasks | None = None


class FallbackEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["fallback"]
    agents: list[str] = Field(min_length=1, max_length=20)
    on: list[Literal["quota", "unavailable"]] = Field(default=["quota", "unavailable"], min_length=1)
    sandbox: SandboxName | None = None
    egress: EgressSetting | None = None
    a2a: Served = None
    mesh: Membership = None
    wake: bool = False
    wake_interval: float = Field(default=30.0, ge=1, le=86400)
    serve_tasks: ServeTasks | None = None


class CustomEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["custom"]
    entrypoint: str = Field(pattern=ENTRYPOINT_PATTERN)
    a2a: Served = None
    mesh: Membership = None
    wake: bool = False
    wake_interval: float = Field(default=30.0, ge=1, le=86400)
    serve_tasks: ServeTasks | None = None


Entry = Annotated[CliEntry | FallbackEntry | CustomEntry, Field(discriminator="kind")]
_ENTRY: TypeAdapter[CliEntry | FallbackEntry | CustomEntry] = TypeAdapter(Entry)


@dataclass(frozen=True)
class AgentDefinition:
    """One entry of the block: what it says, and why it cannot run when it cannot (``error``)."""

    name: str
    kind: str
    entry: CliEntry | FallbackEntry | CustomEntry | None = None
    error: str | None = None
    fn: CustomFn | None = None
    builtin: bool = False  # offered because the config file declares no dispatch agent

    @property
    def harness(self) -> str | None:
        return self.entry.harness if isinstance(self.entry, CliEntry) else None

    @property
    def model(self) -> str | None:
        return self.entry.model if isinstance(self.entry, CliEntry) else None

    @property
    def served(self) -> ServedOptions | None:
        """How the agent is served over A2A; None when it is not (or its entry is wrong)."""
        return self.entry.a2a if self.entry is not None and self.error is None else None

    @property
    def membership(self) -> MeshMembership | None:
        """How the agent joins the mesh while it runs (``wake`` implies it); None when it does not (or its entry is
        wrong)."""
        if self.entry is None or self.error is not None:
            return None
        serve = self.entry.serve_tasks
        if serve is not None:  # a pool claims as an agent of the role it serves
            base = self.entry.mesh or MeshMembership()
            return base.model_copy(update={"role": serve.role, "repo": serve.repo or base.repo})
        return self.entry.mesh or (MeshMembership() if self.entry.wake else None)

    @property
    def serves(self) -> ServeTasks | None:
        return self.entry.serve_tasks if self.entry is not None and self.error is None else None

    @property
    def kept(self) -> bool:
        """Kept on the mesh while the service serves it, between its runs too (``wake`` or ``serve_tasks``)."""
        return self.wakes or self.serves is not None

    @property
    def wakes(self) -> bool:
        """Kept on the mesh between runs and woken by a message (``wake = true``)."""
        return self.entry is not None and self.error is None and self.entry.wake

    @property
    def wake_interval(self) -> float:
        return self.entry.wake_interval if self.entry is not None else 30.0

    def mesh_agent_id(self) -> str | None:
        membership = self.membership
        return None if membership is None else membership.agent_id or self.name

    @property
    def sandbox(self) -> SandboxName | None:
        """Where its runs execute; None for a custom agent (it runs in the service's own process)."""
        entry = self.entry
        if isinstance(entry, CliEntry | FallbackEntry):
            return entry.sandbox or default_sandbox()
        return None

    @property
    def egress(self) -> Egress | None:
        """Where its runs may connect; None for a custom agent or a wrong entry."""
        entry = self.entry
        if isinstance(entry, CliEntry | FallbackEntry) and self.error is None:
            return Egress.parse(entry.egress or "model")
        return None

    @property
    def members(self) -> list[str] | None:
        return list(self.entry.agents) if isinstance(self.entry, FallbackEntry) else None


@dataclass
class DispatchAgents:
    definitions: dict[str, AgentDefinition] = field(default_factory=dict)

    def get(self, name: str) -> AgentDefinition | None:
        return self.definitions.get(name)

    def build(
        self,
        name: str,
        storage: ConversationStore | None,
        *,
        mcp_servers: Sequence[McpServer] = (),
        skip: Collection[str] = (),
    ) -> DispatchAgent:
        """A fresh package agent for one run (CLI agents get the conversation storage, and the MCP servers); a
        fallback without its candidates in ``skip`` (those in quota), unless that would leave none."""
        definition = self.definitions.get(name)
        if definition is None:
            raise DispatchError("configuration", f"no dispatch agent {name!r}", {"field": "agent"})
        if definition.error is not None:
            raise DispatchError("configuration", f"dispatch agent {name!r}: {definition.error}", {"field": "agent"})
        entry = definition.entry
        if isinstance(entry, FallbackEntry):
            members: list[Agent] = []
            for member in [m for m in entry.agents if m not in skip] or entry.agents:
                built = self.build(member, storage, mcp_servers=mcp_servers)
                if built.kind == "fallback":  # refused when parsed; kept as a check for the type
                    raise DispatchError("configuration", f"nested fallback member {member!r}", {"field": "agent"})
                members.append(built)
            return fallback_agent(members, on=entry.on, name=name)
        if isinstance(entry, CliEntry):
            return cli_agent(
                harness_of(entry),
                model=entry.model,
                variables=entry.variables,
                storage=storage,
                name=name,
                mcp_servers=mcp_servers,
            )
        assert definition.fn is not None
        return custom_agent(definition.fn, name=name)


def harness_of(entry: CliEntry) -> Harness:
    if entry.harness == "claude":
        return claude_harness(permission_mode=entry.permission_mode) if entry.permission_mode else claude_harness()
    if entry.harness == "opencode":
        return opencode_harness()
    if entry.harness == "gemini":  # its approval mode is this entry's permission_mode
        return gemini_harness(approval_mode=entry.permission_mode) if entry.permission_mode else gemini_harness()
    if entry.harness == "copilot":
        return copilot_harness()
    return codex_harness()


def cli_state(definition: AgentDefinition) -> tuple[bool, str | None]:
    """(installed, version) of a CLI agent's pinned CLI, from the bootstrap's cache; custom agents need nothing."""
    entry = definition.entry
    if isinstance(entry, CliEntry):
        status = cli_status(harness_of(entry))
        return status.installed, status.version
    return definition.error is None and isinstance(entry, CustomEntry), None


def credential_state(definition: AgentDefinition, host_home: Path) -> str | None:
    """Where a CLI agent's credentials come from (a key variable's name, or the host login file), None when it has
    none; never the secret. Custom and fallback agents: None."""
    entry = definition.entry
    if not isinstance(entry, CliEntry):
        return None
    return credential_source(harness_of(entry).credentials(entry.variables), host_home)


def egress_setting(definition: AgentDefinition) -> str | list[str] | None:
    """The agent's egress as its configuration says it (``model`` when it says nothing); None for a custom agent."""
    egress = definition.egress
    if egress is None:
        return None
    return [str(host) for host in egress.hosts] if egress.hosts else egress.mode


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}" for e in exc.errors())


def _import(entrypoint: str) -> CustomFn:
    module_name, _, attr = entrypoint.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of someone else's module isolates the entry
        raise AgentConfigError(f"entrypoint {entrypoint} does not import: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise AgentConfigError(f"entrypoint {entrypoint}: {attr} is not a callable of {module_name}")
    result: CustomFn = fn
    return result


def _definition(name: str, raw: Any, env: Mapping[str, str] | None) -> AgentDefinition:
    kind = str(raw.get("kind", "")) if isinstance(raw, Mapping) else ""
    try:
        entry = _ENTRY.validate_python(raw)
    except ValidationError as exc:
        return AgentDefinition(name, kind or "unknown", error=_problems(exc))
    try:
        if isinstance(entry, CliEntry | FallbackEntry) and entry.egress is not None:
            check_egress(entry.sandbox or default_sandbox(), Egress.parse(entry.egress))
        if isinstance(entry, CliEntry):
            variables = {key: expand_env(value, env) for key, value in entry.variables.items()}
            entry = entry.model_copy(update={"variables": variables})
            cli_agent(harness_of(entry), model=entry.model, variables=variables)  # the package's own checks
        if (
            (entry.mesh is not None or entry.wake or entry.serve_tasks is not None)
            and (entry.mesh is None or entry.mesh.agent_id is None)
            and not re.match(AGENT_ID_PATTERN, name)
        ):
            raise AgentConfigError(
                f"mesh.agent_id: the name {name!r} is no agent_id (rule {AGENT_ID_PATTERN}): give one"
            )
        if isinstance(entry, CustomEntry):
            return AgentDefinition(name, entry.kind, entry, fn=_import(entry.entrypoint))
    except (AgentConfigError, DispatchError) as exc:
        return AgentDefinition(name, entry.kind, entry, error=str(exc))
    return AgentDefinition(name, entry.kind, entry)


def _check_members(definitions: dict[str, AgentDefinition]) -> None:
    """A fallback's members must be defined, runnable and not fallbacks (a chain of fallbacks could cycle)."""
    for name, definition in list(definitions.items()):
        entry = definition.entry
        if definition.error is not None or not isinstance(entry, FallbackEntry):
            continue
        error: str | None = None
        for member in entry.agents:
            target = definitions.get(member)
            if target is None:
                error = f"unknown fallback member {member!r}"
            elif target.kind == "fallback":
                cyclic = member == name or name in (target.members or [])
                error = f"{'cyclic' if cyclic else 'nested'} fallback member {member!r}: members are cli or custom"
            elif target.error is not None:
                error = f"fallback member {member!r} is broken: {target.error}"
            if error is not None:
                break
        if error is not None:
            definitions[name] = replace(definition, error=error)


# The variables a built-in agent takes from the service's own environment: a key exported in the shell that runs
# `muster serve`, or a model server to use instead of the vendor's. Without a key the agent uses the user's login.
BUILTIN_VARIABLES = {
    "claude": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL"),
    "codex": ("OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL"),
    "opencode": ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY"),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL"),
    "copilot": (
        "COPILOT_PROVIDER_BASE_URL",
        "COPILOT_PROVIDER_TYPE",
        "COPILOT_PROVIDER_WIRE_API",
        "COPILOT_PROVIDER_API_KEY",
        "COPILOT_PROVIDER_BEARER_TOKEN",
        "COPILOT_MODEL",
        "COPILOT_GITHUB_TOKEN",
        "GH_TOKEN",
        "GITHUB_TOKEN",
    ),
}
# Offered always (a run installs its pinned CLI when missing); the others only once their CLI is installed.
BUILTIN_ALWAYS = ("claude", "codex")
BUILTIN_FALLBACK = "fallback"
# The built-in fallback's candidates, in order, among those offered: the vendors a user's own login serves (OpenCode
# and Copilot need a provider named for them, so they are offered but not tried on their own).
BUILTIN_FALLBACK_MEMBERS = ("claude", "codex", "gemini")


def builtin_harnesses() -> list[str]:
    """The harnesses of the built-in agents: ``BUILTIN_ALWAYS``, then each other one of ``BUILTIN_VARIABLES`` whose
    pinned CLI is installed (``harness_status``: no process is run)."""
    status = harness_status()
    return [name for name in BUILTIN_VARIABLES if name in BUILTIN_ALWAYS or (name in status and status[name].installed)]


def builtin_agents(env: Mapping[str, str]) -> DispatchAgents:
    """The agents offered when the config file has no ``dispatch_agents`` block: ``claude`` and ``codex`` (the pinned
    CLI, its own default model, the user's login or key), ``opencode``, ``gemini`` and ``copilot`` when their CLI is
    installed, and ``fallback`` = claude, codex, then gemini when it is offered."""
    definitions: dict[str, AgentDefinition] = {}
    harnesses = builtin_harnesses()
    for harness in harnesses:
        variables = {name: f"${{{name}}}" for name in BUILTIN_VARIABLES[harness] if env.get(name)}
        raw = {"kind": "cli", "harness": harness, "variables": variables}
        definitions[harness] = replace(_definition(harness, raw, env), builtin=True)
    fallback = {"kind": "fallback", "agents": [name for name in BUILTIN_FALLBACK_MEMBERS if name in harnesses]}
    definitions[BUILTIN_FALLBACK] = replace(_definition(BUILTIN_FALLBACK, fallback, env), builtin=True)
    _check_members(definitions)
    return DispatchAgents(definitions)


def parse_dispatch_agents(config: Mapping[str, Any], *, env: Mapping[str, str] | None = None) -> DispatchAgents:
    """The block of a parsed config file. No block: the built-in agents (``builtin_agents``); a block, even an empty
    one, replaces them whole. A block that is not a table: ``AgentConfigError``."""
    block = config.get(BLOCK)
    if block is None:
        return builtin_agents(os.environ if env is None else env)
    if not isinstance(block, Mapping):
        raise AgentConfigError(f"{BLOCK!r} must be a table of NAME → {{kind = …}}")
    definitions: dict[str, AgentDefinition] = {}
    for raw_name in sorted(block, key=str):
        name = str(raw_name)
        if not re.match(NAME_PATTERN, name):
            definitions[name] = AgentDefinition(name, "unknown", error=f"invalid agent name (rule {NAME_PATTERN})")
            continue
        definitions[name] = _definition(name, block[raw_name], env)
    _check_members(definitions)
    return DispatchAgents(definitions)
