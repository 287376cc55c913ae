"""The mesh's own request and answer models (strict: unknown fields are refused, by name)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

MAX_STATUS_CHARS = 280

AgentId = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"),
    Field(description="Stable name of the agent session: letters, digits and . _ : @ -, at most 64 characters."),
]
Label = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,63}$")]
Repo = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
IdempotencyKey = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")]

Action = Literal["create", "renew", "replace"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckinRequest(Strict):
    agent_id: AgentId
    role: Label | None = Field(default=None, description="What it is doing: builder, reviewer, ping, verification…")
    repo: Repo | None = None
    caps: list[Label] | None = Field(default=None, max_length=32, description="What it can do, e.g. merge, deploy.")
    status: Annotated[str, StringConstraints(max_length=MAX_STATUS_CHARS, pattern=r"^[^\r\n]*$")] | None = Field(
        default=None, description="One line: what it is doing right now."
    )
    ttl_seconds: int | None = Field(
        default=None,
        ge=60,
        le=86400,
        description="Lease length: the silence the agent can afford. Omitted: 900 for ping/verification, else 3600.",
    )
    confirm: bool = Field(default=False, description="Must be true to act; otherwise the answer is a preview.")
    idempotency_key: IdempotencyKey | None = None


class AgentView(Strict):
    agent_id: str
    role: str | None
    repo: str | None
    caps: list[str]
    status: str
    ttl_seconds: int
    checked_in_at: datetime
    last_seen_at: datetime
    status_changed_at: datetime
    expires_at: datetime
    alive: bool
    heartbeat_age_seconds: float = Field(description="Since the agent's last mesh call.")
    status_age_seconds: float = Field(description="Since the status text last changed.")
    expires_in_seconds: float = Field(description="Until the lease runs out (negative: expired).")


class CheckinResult(Strict):
    preview: bool
    action: Action
    ttl_seconds: int
    agent: AgentView
    token: str | None = Field(
        default=None, description="The session token: given once, on the confirmed check-in that starts a session."
    )
    replayed: bool = False


class AgentList(Strict):
    now: datetime
    agents: list[AgentView]


class Address(Strict):
    """One agent, or every live agent matching all the given role/repo/cap (fan-out at send time)."""

    agent: AgentId | None = None
    role: Label | None = None
    repo: Repo | None = None
    cap: Label | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        group = [v for v in (self.role, self.repo, self.cap) if v is not None]
        if self.agent is not None and group:
            raise ValueError("address either one agent, or role/repo/cap, not both")
        if self.agent is None and not group:
            raise ValueError("address needs agent, or at least one of role, repo, cap")
        return self

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class SendRequest(Strict):
    to: Address
    subject: str | None = Field(default=None, max_length=200)
    body: str = Field(min_length=1, description="The message; its UTF-8 size is bounded by the mesh.")
    confirm: bool = False
    idempotency_key: IdempotencyKey | None = None


class SendResult(Strict):
    preview: bool
    message_id: str | None = Field(description="None in a preview: nothing was stored.")
    recipients: list[str]
    stored: int = Field(description="How many inboxes hold the message (stored, not delivered).")
    replayed: bool = False


class InboxMessage(Strict):
    seq: int
    message_id: str
    sender: str
    to: dict[str, str]
    subject: str | None
    body: str
    sent_at: datetime


class InboxPage(Strict):
    messages: list[InboxMessage]
    next_cursor: int = Field(description="Pass as `after` to read on; `ack` it once the messages are handled.")
    has_more: bool
    cursor: int = Field(description="The acknowledged cursor stored for this inbox.")
    unread: int = Field(description="Messages after the acknowledged cursor.")


class AckRequest(Strict):
    cursor: int = Field(ge=0)
    confirm: bool = False
    idempotency_key: IdempotencyKey | None = None


class AckResult(Strict):
    preview: bool
    cursor: int
    previous: int
    unread: int
    replayed: bool = False
