"""muster_a2a: remote Agent2Agent agents as tools, on both protocol versions (v1.0 and v0.3) through the a2a-sdk."""

from muster_a2a.agent import Progress, RemoteAgent, Tool, agent_tools, make_http_client, remote_agent
from muster_a2a.agentset import AgentSet, load_agents
from muster_a2a.calls import DEFAULT_LEASE, CallStore, CallTracker, InMemoryCallStore
from muster_a2a.cards import DEFAULT_CARD_CACHE, CardCache
from muster_a2a.config import ParsedAgents, parse_agents_config
from muster_a2a.errors import (
    AgentConfigError,
    AgentResolutionError,
    CallTakenOverError,
    CardHTTPError,
    CardUnreachableError,
    InsecureURLError,
    InvalidCardError,
    MusterA2AError,
    NotContinuableError,
    NoUsableInterfaceError,
    UnknownCallError,
    UnknownToolError,
)
from muster_a2a.models import INPUT_SCHEMA, AgentDescriptor, AgentStatus, CallRecord, Collision, ToolInfo, ToolResult
from muster_a2a.output import INTERRUPTED, TERMINAL, state_name, task_output

__all__ = [
    "DEFAULT_CARD_CACHE",
    "DEFAULT_LEASE",
    "INPUT_SCHEMA",
    "INTERRUPTED",
    "TERMINAL",
    "AgentConfigError",
    "AgentDescriptor",
    "AgentResolutionError",
    "AgentSet",
    "AgentStatus",
    "CallRecord",
    "CallStore",
    "CallTakenOverError",
    "CallTracker",
    "CardCache",
    "CardHTTPError",
    "CardUnreachableError",
    "Collision",
    "InMemoryCallStore",
    "InsecureURLError",
    "InvalidCardError",
    "MusterA2AError",
    "NoUsableInterfaceError",
    "NotContinuableError",
    "ParsedAgents",
    "Progress",
    "RemoteAgent",
    "Tool",
    "ToolInfo",
    "ToolResult",
    "UnknownCallError",
    "UnknownToolError",
    "agent_tools",
    "load_agents",
    "make_http_client",
    "parse_agents_config",
    "remote_agent",
    "state_name",
    "task_output",
]
