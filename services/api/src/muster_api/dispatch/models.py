"""The REST shapes of runs: what a client sends (strict, bounded) and what it reads back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from muster_api.dispatch.config import NAME_PATTERN

RunStatus = Literal["queued", "running", "completed", "failed", "cancelled", "interrupted"]
FINISHED: frozenset[str] = frozenset({"completed", "failed", "cancelled", "interrupted"})
ACTIVE: frozenset[str] = frozenset({"queued", "running"})

ID_PATTERN = r"^[0-9a-f]{32}$"
CONVERSATION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
MAX_PROMPT = 200_000
MAX_DEADLINE_S = 24 * 3600.0
MAX_PAGE = 200


@dataclass(frozen=True, slots=True)
class ActiveRun:
    """An agent's queued or running run, as the wake decision and the roster read it (``SqlRunStore.active_runs``)."""

    id: str
    status: Literal["queued", "running"]
    live_input: bool

    @property
    def steerable(self) -> bool:
        """Running and taking live input: a wake is sent to it as steering."""
        return self.live_input and self.status == "running"


class ContinuationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str | None = Field(default=None, pattern=ID_PATTERN, description="continue this run's conversation")
    conversation: str | None = Field(default=None, pattern=CONVERSATION_PATTERN)
    fork: bool = Field(default=False, strict=True)

    @model_validator(mode="after")
    def _one_source(self) -> ContinuationIn:
        if (self.run_id is None) == (self.conversation is None):
            raise ValueError("give exactly one of run_id and conversation")
        return self


class RunIn(BaseModel):
    """A new turn (``agent``, ``prompt``, ``workspace``) or the replay of a stored run (``replay_of``)."""

    model_config = ConfigDict(extra="forbid")

    agent: str | None = Field(default=None, pattern=NAME_PATTERN)
    prompt: str | None = Field(default=None, min_length=1, max_length=MAX_PROMPT)
    workspace: str | None = Field(default=None, min_length=1, max_length=255)
    continuation: ContinuationIn | None = None
    deadline_s: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_S)
    live_input: bool = Field(default=False, strict=True)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")
    replay_of: str | None = Field(default=None, pattern=ID_PATTERN)
    divergence: Literal["fail", "warn"] | None = None

    @model_validator(mode="after")
    def _shape(self) -> RunIn:
        if self.replay_of is not None:
            if self.continuation is not None or self.live_input:
                raise ValueError("a replay takes no continuation and no live_input")
            return self
        missing = [name for name in ("agent", "prompt", "workspace") if getattr(self, name) is None]
        if missing:
            raise ValueError(f"{', '.join(missing)} required (or replay_of)")
        if self.divergence is not None:
            raise ValueError("divergence goes with replay_of")
        return self


class SteerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_PROMPT)


class Run(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    status: RunStatus
    agent: str
    prompt: str
    workspace: str
    continuation: dict[str, Any] | None = None
    replay_of: str | None = None
    divergence: str | None = None
    live_input: bool = Field(default=False, strict=True)
    deadline_s: float | None = None
    idempotency_key: str | None = None
    selected: str | None = None
    attempts: list[dict[str, Any]] = Field(default_factory=list)
    text: str | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    conversation: str | None = None
    queued_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker: str | None = None
    lease_expires_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


class RunAccepted(Run):
    """The answer to a new run: the run, and where its workspace is on the service's machine (created by the
    request when it was missing), so that a person who named a new workspace learns where to find it."""

    workspace_path: str


class RunPage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runs: list[Run]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next (older) page; null on the last")


class AgentOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    kind: str
    harness: str | None = None
    model: str | None = None
    agents: list[str] | None = None
    installed: bool
    version: str | None = None
    # Where its credentials come from: "key variable NAME" or "host login ~/…"; None when none was found. Never the
    # secret itself.
    credentials: str | None = None
    # Where its runs execute (bwrap, podman, docker, local; None for a custom agent, which runs in the service) and
    # where they may connect: "model" (its model's endpoints), "none", "open", or the hosts added to the model's.
    sandbox: str | None = None
    egress: str | list[str] | None = None
    builtin: bool = False
    error: str | None = None


class AgentsOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agents: list[AgentOut]


class MemberOut(BaseModel):
    """A dispatch agent that is a mesh member (``mesh``, ``wake`` or ``serve_tasks``), as the roster shows it."""

    model_config = ConfigDict(extra="forbid")

    agent_id: str
    name: str = Field(description="the dispatch agent's definition")
    running: str | None = Field(
        description="the id of its active run (queued or running; see run_status); null when none is active"
    )
    run_status: Literal["queued", "running"] | None = Field(default=None, description="the active run's status")
    wake: bool = Field(description="kept on the mesh between runs and woken by a message")
    serving: str | None = Field(description="the role whose tasks it serves; null when it serves none")


class MembersOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    members: list[MemberOut]
