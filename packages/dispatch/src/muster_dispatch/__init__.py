"""muster_dispatch: dispatch turns of work to coding-agent CLIs (Claude Code, Codex, OpenCode, Gemini CLI, GitHub
Copilot CLI) with normalized events, quota/outage faults, fallback and replay. See README.md for the contract."""

from muster_dispatch.agents import (
    CliAgent,
    CustomAgent,
    CustomContext,
    FallbackAgent,
    cli_agent,
    custom_agent,
    fallback_agent,
)
from muster_dispatch.bootstrap import CliStatus, cli_status, ensure_cli, harness_status, known_harnesses
from muster_dispatch.bwrap_provider import BwrapProvider
from muster_dispatch.container_provider import DockerProvider, PodmanProvider
from muster_dispatch.conversations import ConversationStore, DirectoryConversationStore, MemoryConversationStore
from muster_dispatch.decode import decode_events, decode_transcript
from muster_dispatch.errors import ERROR_CODES, DispatchError, ReplayDivergence
from muster_dispatch.events import EVENT_TYPES, AgentEvent
from muster_dispatch.faults import QuotaFault, UnavailableFault, parse_reset, quota_fault, unavailable_fault
from muster_dispatch.harness import (
    AgentConfiguration,
    Bootstrap,
    Command,
    CredentialPlan,
    Harness,
    McpServer,
    credential_source,
)
from muster_dispatch.harnesses.claude import claude_harness
from muster_dispatch.harnesses.codex import codex_harness
from muster_dispatch.harnesses.copilot import copilot_harness
from muster_dispatch.harnesses.gemini import gemini_harness
from muster_dispatch.harnesses.opencode import opencode_harness
from muster_dispatch.host_login import (
    CopiedLogin,
    HostLogin,
    LoginFile,
    copy_login,
    default_host_home,
    write_back,
)
from muster_dispatch.inputs import AgentInput, Continuation
from muster_dispatch.journal import Journal, JournalSink, Observation
from muster_dispatch.provider import LocalProvider, local_provider
from muster_dispatch.replay import RecordedTurn, ReplayAgent, replay_agent
from muster_dispatch.results import Attempt, TurnResult
from muster_dispatch.runner import Dispatch, dispatch
from muster_dispatch.sandbox import SandboxProvider
from muster_dispatch.usage import Usage

__all__ = [
    "ERROR_CODES",
    "EVENT_TYPES",
    "AgentConfiguration",
    "AgentEvent",
    "AgentInput",
    "Attempt",
    "Bootstrap",
    "BwrapProvider",
    "CliAgent",
    "CliStatus",
    "Command",
    "Continuation",
    "ConversationStore",
    "CopiedLogin",
    "CredentialPlan",
    "CustomAgent",
    "CustomContext",
    "DirectoryConversationStore",
    "Dispatch",
    "DispatchError",
    "DockerProvider",
    "FallbackAgent",
    "Harness",
    "HostLogin",
    "Journal",
    "JournalSink",
    "LocalProvider",
    "LoginFile",
    "McpServer",
    "MemoryConversationStore",
    "Observation",
    "PodmanProvider",
    "QuotaFault",
    "RecordedTurn",
    "ReplayAgent",
    "ReplayDivergence",
    "SandboxProvider",
    "TurnResult",
    "UnavailableFault",
    "Usage",
    "claude_harness",
    "cli_agent",
    "cli_status",
    "codex_harness",
    "copilot_harness",
    "copy_login",
    "credential_source",
    "custom_agent",
    "decode_events",
    "decode_transcript",
    "default_host_home",
    "dispatch",
    "ensure_cli",
    "fallback_agent",
    "gemini_harness",
    "harness_status",
    "known_harnesses",
    "local_provider",
    "opencode_harness",
    "parse_reset",
    "quota_fault",
    "replay_agent",
    "unavailable_fault",
    "write_back",
]
