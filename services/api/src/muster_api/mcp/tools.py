"""The tools this server offers: names, descriptions (an agent decides from them, so they state every rule) and
input schemas, with the models that check arguments before anything is sent.

The input schema of ``agent_checkin`` is the mesh contract's, verbatim; the A2A tools take the A2A contract's
``{task}`` schema, verbatim. Arguments are checked by the mesh's own request models (the same rules as the service)
and refused by name when unknown.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from muster_api.mcp import claim_tools
from muster_client import DirectoryQuery
from muster_mesh import CheckinRequest, SendRequest, default_ttl
from muster_mesh.models import MAX_PAGE, MAX_WAIT_SECONDS, MESSAGE_ID_PATTERN, Label, Repo
from muster_mesh.search import DEFAULT_SEARCH_PAGE, MAX_QUERY_CHARS, MAX_SEARCH_PAGE
from muster_mesh.wake import WAKE_TEMPLATE

CHECKIN = "agent_checkin"
LIST = "agents_list"
SEND = "agent_send"
INBOX = "agent_inbox"
CHECKOUT = "agent_checkout"
SEARCH = "mesh_search"
RECEIPTS = "message_receipts"
DISPATCH_RUN = "dispatch_run"
DISPATCH_STATUS = "dispatch_status"
MESH_TOOLS = (CHECKIN, LIST, SEND, INBOX, CHECKOUT, SEARCH, RECEIPTS)
OWN_TOOLS = (*MESH_TOOLS, *claim_tools.CLAIM_TOOLS, DISPATCH_RUN, DISPATCH_STATUS)


def _bound(model: type[BaseModel], field: str, name: str) -> int:
    """A numeric bound of one of the mesh's request fields, so that the schema repeats the mesh's rule."""
    for constraint in model.model_fields[field].metadata:
        if hasattr(constraint, name):
            value: int = getattr(constraint, name)
            return value
    raise LookupError(f"{model.__name__}.{field} has no {name} bound")


MIN_TTL = _bound(CheckinRequest, "ttl_seconds", "ge")
MAX_TTL = _bound(CheckinRequest, "ttl_seconds", "le")
WORKING_TTL = default_ttl("builder")
PING_TTL = default_ttl("ping")

CHECKIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "agent_id": {
            "type": "string",
            "description": "Stable name for the agent session (e.g. builder, qa, release); reused across check-ins.",
        },
        "role": {
            "type": "string",
            "description": "What it is doing (builder, reviewer, release, ping, verification…).",
        },
        "repo": {"type": "string", "description": "The repository it works on."},
        "caps": {
            "type": "array",
            "items": {"type": "string"},
            "description": 'What it can do (["merge","deploy"]).',
        },
        "status": {
            "type": "string",
            "description": "One line: what it is doing RIGHT NOW. agents_list shows it with its age; update it when "
            "the task changes.",
        },
        "ttl_seconds": {
            "type": "integer",
            "minimum": MIN_TTL,
            "maximum": MAX_TTL,
            "description": f"{MIN_TTL}–{MAX_TTL}. Omitted: {WORKING_TTL} for a working role, {PING_TTL} for ping and "
            "verification. The silence the agent can afford: every mesh call renews its presence.",
        },
        "confirm": {
            "type": "boolean",
            "description": "Must be true to act. Without it the call returns a preview and changes nothing.",
        },
        "herdr_pane": {
            "type": "string",
            "description": "Only when running inside a Herdr-managed terminal pane (HERDR_ENV=1): the agent's own "
            "pane id ($HERDR_PANE_ID), for automatic wake. Never a value taken from a message. Purely local: never "
            "sent to the mesh backend.",
        },
    },
    "required": ["agent_id"],
}
"""The check-in contract, verbatim."""

A2A_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}
"""The A2A tool contract, verbatim."""

CHECKIN_ABOUT = (
    "Join the Muster agent mesh, or renew your place in it. Without confirm: true this only previews what would be "
    "recorded (the effective TTL, whether it creates or renews) and changes nothing; call again with confirm: true "
    "to act. agent_id is your stable name: check in with the same one every time — this MCP server keeps your "
    "session token (never shown) so that a restarted session resumes its identity; a live agent_id held by another "
    "session is refused. status is one line saying what you are doing right now: peers see it with its age, so "
    f"check in again when your task changes. ttl_seconds ({MIN_TTL}–{MAX_TTL}) is the silence you can afford; "
    f"omitted, it is {PING_TTL} for role ping or verification and {WORKING_TTL} otherwise. Every mesh call you "
    "make through this server renews your presence; an agent not renewed within its TTL leaves the directory and "
    "stops receiving. herdr_pane: only when HERDR_ENV=1, your own pane id ($HERDR_PANE_ID), never a value from a "
    f"message: new messages then wake you with the fixed prompt '{WAKE_TEMPLATE.format(count='N')}' (the pane id "
    "stays on this machine). Your inbox receives only what is sent after your first check-in."
)

LIST_ABOUT = (
    "The live agents of the mesh: each with its status and how long it has had it (so you can tell working from "
    "stuck), its heartbeat age (its last mesh call) and when it expires. Filter by repo, role or cap; "
    "include_expired also shows agents whose lease ended. Renews your presence when you are checked in."
)

SEND_ABOUT = (
    "Send a message: to one agent (to: its agent_id), or to every live agent of a role, a repo or a cap (exactly "
    "one of to, role, repo, cap). Without confirm: true this only previews the recipients and stores nothing. The "
    "answer says how many inboxes stored it (stored, not read). thread_id groups a conversation. Needs a check-in; "
    "renews your presence."
)

INBOX_ABOUT = (
    "Your new messages (sender, body, thread, age), oldest first. wait_seconds (0–60) waits for one to arrive when "
    "there is none. Messages are acknowledged once they were returned to you (at your next mesh call): call again "
    "for the next ones. Needs a check-in; renews your presence."
)

CHECKOUT_ABOUT = (
    "Leave the mesh: your lease ends now, you leave the directory and stop receiving. Without confirm: true this "
    "only previews. Check in again to come back (a new session with an empty inbox)."
)

SEARCH_ABOUT = (
    "Search the messages you sent and received (including those already read) for words: a message matches when it "
    "holds every word, in any order or case. Best matches first, each with its sender, thread, age and a snippet "
    "marking the words found between « and ». Needs a check-in; renews your presence."
)

RECEIPTS_ABOUT = (
    "What became of a message you sent (every recipient) or received (yours): for each inbox, when it was stored, "
    "woken (a live reader or the recipient's auto-wake was handed it), read (an agent_inbox returned it) and "
    "acknowledged, or not yet. message_id is the id agent_send answered. Needs a check-in; renews your presence."
)
RECEIPTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"message_id": {"type": "string", "pattern": MESSAGE_ID_PATTERN, "description": "The message."}},
    "required": ["message_id"],
    "additionalProperties": False,
}

CONFIRM = {"type": "boolean", "description": "Must be true to act; otherwise the answer is a preview."}
LIST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "repo": {"type": "string", "description": "Only agents on this repository."},
        "role": {"type": "string", "description": "Only agents with this role."},
        "cap": {"type": "string", "description": "Only agents with this capability."},
        "include_expired": {"type": "boolean", "description": "Also agents whose lease ended (until swept)."},
    },
    "additionalProperties": False,
}
SEND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "description": "One agent's agent_id."},
        "role": {"type": "string", "description": "Every live agent with this role."},
        "repo": {"type": "string", "description": "Every live agent on this repository."},
        "cap": {"type": "string", "description": "Every live agent with this capability."},
        "body": {"type": "string", "description": "The message (at most 64 KiB of UTF-8)."},
        "thread_id": {"type": "string", "description": "Groups the messages of one conversation."},
        "confirm": CONFIRM,
    },
    "required": ["body"],
    "additionalProperties": False,
}
INBOX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "wait_seconds": {
            "type": "number",
            "minimum": 0,
            "maximum": MAX_WAIT_SECONDS,
            "description": "Wait up to this long for a message when none is there (default 0).",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "description": "At most this many (100)."},
    },
    "additionalProperties": False,
}
CHECKOUT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"confirm": CONFIRM}, "additionalProperties": False}
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "q": {"type": "string", "maxLength": MAX_QUERY_CHARS, "description": "The words to look for."},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_SEARCH_PAGE,
            "description": f"At most this many ({DEFAULT_SEARCH_PAGE}).",
        },
    },
    "required": ["q"],
    "additionalProperties": False,
}

DISPATCH_RUN_ABOUT = (
    "Dispatch a turn of work to a configured agent of the Muster service (a coding-agent CLI, a custom agent or a "
    "fallback chain): it runs the prompt in the named workspace on a Muster worker. With wait: true this call "
    "returns when the run has finished, with its final text, status, usage and error code; otherwise it returns the "
    "run id at once: follow it with dispatch_status. continuation continues an earlier run's conversation "
    "({run_id} or {conversation}, fork: true to branch)."
)
DISPATCH_STATUS_ABOUT = (
    "The state of a dispatched run: queued, running, or finished (completed, failed, cancelled, interrupted) with "
    "its final text, usage and error code."
)
DISPATCH_RUN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "agent": {"type": "string", "description": "A dispatch agent configured in the service."},
        "prompt": {"type": "string", "description": "What to do."},
        "workspace": {"type": "string", "description": "The workspace (a directory name under the service's root)."},
        "wait": {"type": "boolean", "description": "Return when the run has finished (default false)."},
        "continuation": {
            "type": "object",
            "properties": {
                "run_id": {"type": "string", "description": "Continue this run's conversation."},
                "conversation": {"type": "string", "description": "Continue this conversation id."},
                "fork": {"type": "boolean", "description": "Branch off instead of continuing in place."},
            },
            "additionalProperties": False,
        },
    },
    "required": ["agent", "prompt", "workspace"],
    "additionalProperties": False,
}
DISPATCH_STATUS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"run_id": {"type": "string", "description": "The run id dispatch_run answered."}},
    "required": ["run_id"],
    "additionalProperties": False,
}

MESH_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    CHECKIN: (CHECKIN_ABOUT, CHECKIN_SCHEMA),
    LIST: (LIST_ABOUT, LIST_SCHEMA),
    SEND: (SEND_ABOUT, SEND_SCHEMA),
    INBOX: (INBOX_ABOUT, INBOX_SCHEMA),
    CHECKOUT: (CHECKOUT_ABOUT, CHECKOUT_SCHEMA),
    SEARCH: (SEARCH_ABOUT, SEARCH_SCHEMA),
    RECEIPTS: (RECEIPTS_ABOUT, RECEIPTS_SCHEMA),
}
OWN_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    **MESH_SCHEMAS,
    **claim_tools.SCHEMAS,
    DISPATCH_RUN: (DISPATCH_RUN_ABOUT, DISPATCH_RUN_SCHEMA),
    DISPATCH_STATUS: (DISPATCH_STATUS_ABOUT, DISPATCH_STATUS_SCHEMA),
}


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckinArgs(CheckinRequest):
    """The mesh's check-in request (its own rules, unknown fields refused) and the local pane id. Not its
    ``takeover``: the tool's schema is the contract's, and taking over an identity is a person's decision (the
    ``muster`` CLI), not one an agent should reach from a tool."""

    herdr_pane: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_takeover(cls, data: Any) -> Any:
        if isinstance(data, dict) and "takeover" in data:
            raise ValueError("takeover is not an argument of agent_checkin")
        return data


class ListArgs(Arguments):
    repo: Repo | None = None
    role: Label | None = None
    cap: Label | None = None
    include_expired: bool = False

    def query(self) -> DirectoryQuery:
        return DirectoryQuery(**self.model_dump())


class SendArgs(SendRequest):
    """The mesh's send request, as is."""


class InboxArgs(Arguments):
    wait_seconds: float = Field(default=0, ge=0, le=MAX_WAIT_SECONDS)
    limit: int = Field(default=100, ge=1, le=MAX_PAGE)


class CheckoutArgs(Arguments):
    confirm: bool = False


class SearchArgs(Arguments):
    q: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    limit: int = Field(default=DEFAULT_SEARCH_PAGE, ge=1, le=MAX_SEARCH_PAGE)


class ReceiptsArgs(Arguments):
    message_id: str = Field(pattern=MESSAGE_ID_PATTERN)


class A2AArgs(Arguments):
    task: str = Field(min_length=1)


class ContinuationArgs(Arguments):
    run_id: str | None = None
    conversation: str | None = None
    fork: bool = False


class DispatchRunArgs(Arguments):
    agent: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    workspace: str = Field(min_length=1)
    wait: bool = False
    continuation: ContinuationArgs | None = None


class DispatchStatusArgs(Arguments):
    run_id: str = Field(min_length=1)
