"""The service's answers as typed models.

They ignore members they do not know (where the service's own models refuse them): a newer service may add a member
to an answer, and a client installed earlier must keep reading it. ``replayed`` is never in a body: it is set from
the ``Idempotent-Replayed`` header (an idempotent retry answered from the first result).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------- mesh


class AgentView(Answer):
    """One entry of the directory: the three ages kept apart (heartbeat, status, expiry)."""

    agent_id: str
    role: str | None = None
    repo: str | None = None
    caps: list[str] = Field(default_factory=list)
    status: str = ""
    status_since: datetime
    status_age_seconds: float
    last_seen_at: datetime
    heartbeat_age_seconds: float
    expires_at: datetime
    ttl_seconds: int
    alive: bool
    # What the agent is doing as far as the mesh can tell (its last own call, and working / waiting / idle / stale:
    # a string, since a newer service may name another state); None from a service that does not say.
    last_activity: datetime | None = None
    state: str | None = None


class CheckinPreview(Answer):
    """``action``: create, renew or takeover (a string: a newer service may name another)."""

    preview: Literal[True] = True
    action: str
    agent: AgentView


class CheckinRecord(AgentView):
    """A confirmed check-in. ``token`` only on the check-in that starts a session (the client keeps it)."""

    token: str | None = Field(default=None, repr=False)
    replayed: bool = False


class AgentList(Answer):
    agents: list[AgentView]
    next_cursor: str | None = None


class Backlog(Answer):
    agent_id: str
    unread: int


class BacklogPage(Answer):
    """Unread counts per agent (never a body or a sender), in the directory's order and with its filters."""

    agents: list[Backlog]
    total: int = 0
    next_cursor: str | None = None


class SendPreview(Answer):
    preview: Literal[True] = True
    action: Literal["send"] = "send"
    recipients: list[str]


class SendResult(Answer):
    message_id: str | None
    recipients: list[str]
    stored: int = Field(description="How many inboxes hold the message (stored, not delivered).")
    followed: list[str] = Field(
        default_factory=list, description="Recipients a reader was following: handed it now; the others read it later."
    )
    replayed: bool = False
    # Present for a message to an agent the service wakes on a message: scheduled | steered | none.
    wake: Literal["scheduled", "steered", "none"] | None = None


class InboxMessage(Answer):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    seq: int
    message_id: str
    sender: str = Field(alias="from")
    body: str
    thread_id: str | None = None
    sent_at: datetime


class InboxPage(Answer):
    messages: list[InboxMessage]
    next_cursor: int
    has_more: bool


class Receipt(Answer):
    """What became of a message in one recipient's inbox: each time the first time it happened, None until then."""

    agent_id: str
    stored_at: datetime
    woken_at: datetime | None = None
    read_at: datetime | None = None
    acknowledged_at: datetime | None = None


class MessageReceipts(Answer):
    """A message's receipts: every recipient's for its sender, a recipient's own for a recipient."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    message_id: str
    sender: str = Field(alias="from")
    thread_id: str | None = None
    sent_at: datetime
    receipts: list[Receipt]


class SearchHit(Answer):
    """A message found by ``search``: ``snippet`` marks each matched word between « and »."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    message_id: str
    sender: str = Field(alias="from")
    thread_id: str | None = None
    sent_at: datetime
    snippet: str
    score: float


class SearchPage(Answer):
    hits: list[SearchHit]
    next_cursor: str | None = None


class LastMessage(Answer):
    """The last message of a thread: ``preview`` is the body's start (``truncated`` when there is more)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    message_id: str
    sender: str = Field(alias="from")
    preview: str
    truncated: bool
    sent_at: datetime


class ThreadSummary(Answer):
    """A thread as ``threads`` lists it: ``messages`` counts those the caller may see."""

    thread_id: str
    participants: list[str]
    messages: int
    last_message: LastMessage


class ThreadPage(Answer):
    threads: list[ThreadSummary]
    next_cursor: str | None = None


class ThreadMessage(Answer):
    """A message of a thread: ``to`` are the inboxes that hold it."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    message_id: str
    sender: str = Field(alias="from")
    to: list[str] = Field(default_factory=list)
    body: str
    thread_id: str | None = None
    sent_at: datetime


class ThreadMessages(Answer):
    thread_id: str
    messages: list[ThreadMessage]
    next_cursor: str | None = None


class AckPreview(Answer):
    preview: Literal[True] = True
    action: Literal["ack"] = "ack"
    cursor: int


class AckResult(Answer):
    cursor: int
    unread: int
    replayed: bool = False


class CheckoutPreview(Answer):
    preview: Literal[True] = True
    action: Literal["checkout"] = "checkout"
    agent: AgentView


class CheckoutResult(Answer):
    agent: AgentView
    replayed: bool = False


# ---------------------------------------------------------------- A2A


class A2ATool(Answer):
    name: str
    description: str
    input_schema: dict[str, Any]
    skill: str | None = None


class A2AAgent(Answer):
    """One configured remote agent: resolved (``ok``) with its tools; ``degraded``: resolved, its tools listed, but
    its recent calls failed (``error`` is the last failure); ``error``: unresolved, with the reason. A string: a newer
    service may name another state, and one agent's state must never make the whole listing unreadable."""

    name: str
    status: str
    error: str | None = None
    dialect: str | None = None
    endpoint: str | None = None
    card_name: str | None = None
    tools: list[A2ATool] = Field(default_factory=list)


class A2ACollision(Answer):
    name: str
    agent: str
    kept_by: str
    renamed_to: str


class A2AAgents(Answer):
    agents: list[A2AAgent]
    collisions: list[A2ACollision] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict)

    def tools(self) -> list[A2ATool]:
        """Every tool of every resolved agent, in agent order."""
        return [tool for agent in self.agents for tool in agent.tools]


class A2AToolResult(Answer):
    """``metadata``: {agent, task_id, context_id, state, polls, ms, dialect}."""

    text: str
    is_error: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def state(self) -> str | None:
        state = self.metadata.get("state")
        return state if isinstance(state, str) else None


class A2ACallResult(A2AToolResult):
    """The answer of a call that waited for its end."""

    call_id: str


class A2ACall(Answer):
    """A stored call: in flight while ``result`` is None."""

    id: str
    agent: str
    tool: str
    task: str
    task_id: str | None = None
    context_id: str | None = None
    dialect: str | None = None
    state: str = "sending"
    polls: int = 0
    created_at: datetime
    updated_at: datetime
    expires_at: datetime
    owner: str | None = None
    lease_expires_at: datetime | None = None
    result: A2AToolResult | None = None


# ---------------------------------------------------------------- health


class Ready(Answer):
    status: str
    database: str
    revision: str | None = None


# ---------------------------------------------------------------- dispatch runs


class DispatchAgent(Answer):
    """A configured dispatch agent (a CLI, a custom entrypoint, or a fallback chain of ``agents``)."""

    name: str
    kind: str
    harness: str | None = None
    model: str | None = None
    agents: list[str] | None = None
    installed: bool = False
    version: str | None = None
    credentials: str | None = None  # where they come from ("key variable NAME", "host login ~/…"), never a secret
    sandbox: str | None = None  # where its runs execute: bwrap, podman, docker or local (None: a custom agent)
    egress: str | list[str] | None = None  # model, none, open, or the hosts added to the model's
    builtin: bool = False
    error: str | None = None


class DispatchAgents(Answer):
    agents: list[DispatchAgent]


class DispatchMember(Answer):
    """A dispatch agent that is a mesh member: its running run, whether it wakes by message, the role it serves."""

    agent_id: str
    name: str
    running: str | None = None  # its active run: queued or running (run_status)
    run_status: str | None = None
    wake: bool = False
    serving: str | None = None


class DispatchMembers(Answer):
    members: list[DispatchMember]


FINISHED_RUN = frozenset({"completed", "failed", "cancelled", "interrupted"})


class Run(Answer):
    """A run: queued, running, then completed, failed, cancelled or interrupted, with its final text, usage,
    error (``code``, ``message``) and conversation."""

    id: str
    status: str
    agent: str
    prompt: str
    workspace: str
    continuation: dict[str, Any] | None = None
    replay_of: str | None = None
    divergence: str | None = None
    live_input: bool = False
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
        return self.status in FINISHED_RUN

    @property
    def error_code(self) -> str | None:
        code = (self.error or {}).get("code")
        return code if isinstance(code, str) else None


class RunPage(Answer):
    runs: list[Run]
    next_cursor: str | None = None


class RunEvent(Answer):
    """One event of a run's stream: ``id`` (its sequence), ``type`` (``text``, ``tool_use``, ``turn.result``…) and
    ``data`` as the service journaled it. The stream ends with ``type == "result"``, whose ``run()`` is the run."""

    id: int | None = None
    type: str
    data: dict[str, Any] = Field(default_factory=dict)

    def run(self) -> Run | None:
        return Run.model_validate(self.data) if self.type == "result" else None
