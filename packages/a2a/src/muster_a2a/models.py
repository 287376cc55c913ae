"""Our own (strict) models: descriptors, tool results, agent status, stored call records."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string"}},
    "required": ["task"],
}
"""The input schema of every A2A tool, verbatim from the contract."""

DEFAULT_TIMEOUT_MS = 300_000
DEFAULT_POLL_EVERY_MS = 1_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentDescriptor(_Strict):
    """One entry of the ``agents`` block, after defaults and ``${ENV}`` expansion."""

    name: str
    card: str
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    timeout: int = Field(default=DEFAULT_TIMEOUT_MS, gt=0)
    poll_every: int = Field(default=DEFAULT_POLL_EVERY_MS, gt=0)
    allow_hosts: list[str] = Field(default_factory=list)
    allow_http: bool = False


class ToolResult(_Strict):
    """What a tool call gives back. ``metadata`` = {agent, task_id, context_id, state, polls, ms, dialect}."""

    text: str
    is_error: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)


class ToolInfo(_Strict):
    name: str
    description: str
    input_schema: dict[str, Any]
    skill: str | None


class AgentStatus(_Strict):
    """Per configured agent: did it resolve, through which dialect and endpoint, which tools it gave. ``degraded``:
    it resolved, but its recent calls failed (``error`` is the last failure)."""

    name: str
    status: Literal["ok", "degraded", "error"]
    error: str | None = None
    dialect: str | None = None
    endpoint: str | None = None
    card_name: str | None = None
    tools: list[ToolInfo] = Field(default_factory=list)


class Collision(_Strict):
    """Two tools wanted the same name; the later one (by agent name order) got ``renamed_to``."""

    name: str
    agent: str
    kept_by: str
    renamed_to: str


class CallRecord(_Strict):
    """A stored remote call: enough to resume it after a restart (agent, task id, context id, dialect, state).

    ``result`` is set once the call is over; a record without a result is in flight. ``owner`` is the instance
    following the call, which holds it until ``lease_expires_at`` and renews that while following; only the store's
    ``claim`` / ``renew`` / ``release`` change these two (``save`` keeps them on a replace).
    """

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
    result: ToolResult | None = None

    @property
    def in_flight(self) -> bool:
        return self.result is None
