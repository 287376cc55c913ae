"""The mesh's own request and answer models (strict: unknown fields are refused, by name).

The wire shapes are a contract with the agents: check-in answers a preview ``{preview, action, agent}`` or the agent's
record (with ``token`` once, on the check-in that starts a session); a send answers ``{message_id, recipients,
stored}``; an inbox read ``{messages, next_cursor, has_more}``. ``replayed`` (an idempotent retry answered from the
first result) is never serialised: the service reports it in a header.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, WithJsonSchema
from pydantic_core import PydanticCustomError

from muster_mesh.presence import State as PresenceState

MAX_STATUS_CHARS = 280
MAX_CAPS = 32
MAX_SEQ = 2**63 - 1
# Pages and long-polls: the largest page any listing or inbox read returns, the longest a long-poll waits.
MAX_PAGE = 500
MAX_WAIT_SECONDS = 60.0
# An idempotency key (body field or Idempotency-Key header): 1 to 128 printable ASCII characters, no spaces.
IDEMPOTENCY_KEY_MAX = 128
IDEMPOTENCY_KEY_PATTERN = rf"^[\x21-\x7e]{{1,{IDEMPOTENCY_KEY_MAX}}}$"
"""The largest inbox sequence (a signed 64-bit column): cursors beyond it are refused, never passed to a database."""

# What a person reading the roster must never be shown raw: C0 and C1 control characters (terminal escapes, NUL,
# line breaks) and the bidirectional marks and overrides that make text display in another order than it is stored.
CONTROLS = r"\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"

AGENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"
AgentId = Annotated[
    str,
    StringConstraints(pattern=AGENT_ID_PATTERN),
    Field(description="Stable name of the agent session: letters, digits and . _ : @ -, at most 64 characters."),
]
Label = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,63}$")]
Repo = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=rf"^[^{CONTROLS}]+$")]
IdempotencyKey = Annotated[
    str, StringConstraints(min_length=1, max_length=IDEMPOTENCY_KEY_MAX, pattern=IDEMPOTENCY_KEY_PATTERN)
]
ThreadId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")]
Status = Annotated[str, StringConstraints(max_length=MAX_STATUS_CHARS, pattern=rf"^[^{CONTROLS}]*$")]
NO_NUL = r"^[^\x00]+$"
# A message id as the mesh makes them (a UUID4's hex).
MESSAGE_ID_PATTERN = r"^[0-9a-f]{32}$"


def refuse_nul(value: str) -> str:
    """The ``NO_NUL`` pattern, checked by a scan (a regular expression over a 64 KiB body costs fifty times more)."""
    if "\x00" in value:
        raise PydanticCustomError("string_pattern_mismatch", "String must not contain the NUL character (U+0000)")
    return value


# A body is the agent's own text: newlines and tabs are kept; NUL is refused (PostgreSQL text cannot hold it, and no
# reader wants it). The schema states the rule as a pattern.
Body = Annotated[
    str,
    StringConstraints(min_length=1),
    AfterValidator(refuse_nul),
    WithJsonSchema({"type": "string", "minLength": 1, "pattern": NO_NUL}),
]
Cursor = Annotated[int, Field(ge=0, le=MAX_SEQ)]

Action = Literal["create", "renew", "takeover"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckinRequest(Strict):
    agent_id: AgentId
    role: Label | None = Field(default=None, description="What it is doing: builder, reviewer, ping, verification…")
    repo: Repo | None = None
    caps: list[Label] | None = Field(
        default=None, max_length=MAX_CAPS, description="What it can do, e.g. merge, deploy."
    )
    status: Status | None = Field(default=None, description="One line: what it is doing right now.")
    ttl_seconds: int | None = Field(
        default=None,
        ge=60,
        le=86400,
        description="Lease length: the silence the agent can afford. Omitted: 900 for ping/verification, else 3600.",
    )
    confirm: bool = Field(
        default=False, strict=True, description="Must be true to act; otherwise the answer is a preview."
    )
    takeover: bool = Field(
        default=False,
        strict=True,
        description="Without a token: take over a live agent_id whose token was lost. A new token is issued, the "
        "inbox and unset fields carry over, and the old token answers 401 `superseded` from then on.",
    )


class AgentView(Strict):
    agent_id: str
    role: str | None
    repo: str | None
    caps: list[str]
    status: str
    status_since: datetime = Field(description="When the status text last changed.")
    status_age_seconds: float = Field(description="Since the status text last changed.")
    last_seen_at: datetime = Field(description="The agent's last mesh call.")
    heartbeat_age_seconds: float = Field(description="Since the agent's last mesh call.")
    expires_at: datetime
    ttl_seconds: int
    alive: bool
    last_activity: datetime = Field(
        description="The agent's last own call: a mesh call, a tool call through `muster mcp`, a run's event. A "
        "follower's reads and a check-in that only renews keep the lease but are not activity."
    )
    state: PresenceState = Field(
        description="working (activity within a minute), waiting (a reader follows its inbox), idle (live, neither), "
        "stale (lease lapsed or under a quarter of its TTL left): see the mesh's README."
    )


class CheckinPreview(Strict):
    preview: Literal[True] = True
    action: Action
    agent: AgentView = Field(description="What would be recorded, with the effective TTL and expiry.")


class CheckinRecord(AgentView):
    token: str | None = Field(
        default=None, description="The session token: given once, on the confirmed check-in that starts a session."
    )
    action: Action = Field(default="renew", exclude=True)
    replayed: bool = Field(default=False, exclude=True)


class AgentList(Strict):
    agents: list[AgentView]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class Backlog(Strict):
    agent_id: str
    unread: int = Field(description="Messages stored after the agent's acknowledged cursor.")


class BacklogList(Strict):
    """Unread counts per agent: never a message body, a sender or a token."""

    agents: list[Backlog]
    total: int = Field(description="The sum of `unread` over this page.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


ADDRESS_FIELDS = ("to", "role", "repo", "cap")


class SendRequest(Strict):
    # The rule the mesh enforces (InvalidAddress), stated in the schema: exactly one address given as a string.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [{"required": [name], "properties": {name: {"type": "string"}}} for name in ADDRESS_FIELDS],
            "description": "Exactly one of `to`, `role`, `repo`, `cap`.",
        },
    )

    to: AgentId | None = Field(default=None, description="One agent.")
    role: Label | None = Field(default=None, description="Every live agent with this role (fan-out at send time).")
    repo: Repo | None = Field(default=None, description="Every live agent on this repo.")
    cap: Label | None = Field(default=None, description="Every live agent with this capability.")
    body: Body = Field(description="The message; its UTF-8 size is bounded by the mesh (64 KiB). No NUL character.")
    thread_id: ThreadId | None = None
    idempotency_key: IdempotencyKey | None = None
    confirm: bool = Field(default=False, strict=True)

    def address(self) -> dict[str, str]:
        return {k: v for k in ADDRESS_FIELDS if (v := getattr(self, k)) is not None}


class SendPreview(Strict):
    preview: Literal[True] = True
    action: Literal["send"] = "send"
    recipients: list[str] = Field(description="The inboxes that would store the message now.")


WakeAnswer = Literal["scheduled", "steered", "none"]


class SendResult(Strict):
    message_id: str | None = Field(description="None when no live agent matched: nothing was stored.")
    recipients: list[str]
    stored: int = Field(description="How many inboxes hold the message (stored, not delivered).")
    followed: list[str] = Field(
        default_factory=list,
        description="The recipients whose inbox a reader was following as it was sent (a waiting long-poll, an SSE "
        "stream, the follower of `muster mcp` that wakes a Herdr pane): they are handed it now. The other recipients "
        "find it at their next inbox read.",
    )
    replayed: bool = Field(default=False, exclude=True)
    wake: WakeAnswer | None = Field(
        default=None,
        description="Only for a direct message to an agent the service runs on a message (wake = true): whether "
        "it starts a run of it (scheduled), is told to the run that is live (steered), or neither (none).",
    )


class InboxMessage(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    seq: int
    message_id: str
    sender: str = Field(alias="from", description="The sender's agent_id (from its token, never from the request).")
    body: str
    thread_id: str | None
    sent_at: datetime


class Receipt(Strict):
    """What became of a message in one recipient's inbox; each time is the first time it happened."""

    agent_id: str
    stored_at: datetime = Field(description="When the inbox stored it (the message's `sent_at`).")
    woken_at: datetime | None = Field(
        description="When a live follower was handed it: a long-poll that was waiting, an SSE stream, or the inbox "
        "follower of `muster mcp` (which wakes the agent's Herdr pane). Null: nobody was following the inbox."
    )
    read_at: datetime | None = Field(description="When an inbox read returned it to the agent.")
    acknowledged_at: datetime | None = Field(description="When the agent's `ack` moved its cursor past it.")


class MessageReceipts(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    message_id: str
    sender: str = Field(alias="from")
    thread_id: str | None
    sent_at: datetime
    receipts: list[Receipt] = Field(
        description="One per recipient: every recipient for the sender, the caller's own for a recipient."
    )


class InboxPage(Strict):
    messages: list[InboxMessage]
    next_cursor: int = Field(description="Pass as `after` to read on; `ack` it once the messages are handled.")
    has_more: bool


class AckRequest(Strict):
    cursor: Cursor
    confirm: bool = Field(default=False, strict=True)


class AckPreview(Strict):
    preview: Literal[True] = True
    action: Literal["ack"] = "ack"
    cursor: int = Field(description="The stored cursor it would leave (never moves back).")


class AckResult(Strict):
    cursor: int
    unread: int
    replayed: bool = Field(default=False, exclude=True)


class CheckoutRequest(Strict):
    confirm: bool = Field(default=False, strict=True)


class CheckoutPreview(Strict):
    preview: Literal[True] = True
    action: Literal["checkout"] = "checkout"
    agent: AgentView


class CheckoutResult(Strict):
    agent: AgentView
    replayed: bool = Field(default=False, exclude=True)
