"""What an agent is doing, as far as the mesh can tell: its ``state``, derived from three stored instants.

- ``last_activity``: the last call the agent made itself (any mesh call with its token, a tool call through
  ``muster mcp``, a run's event while the run holds its presence). These renew the lease but are not activity: a
  follower's reads (an SSE stream, the MCP follower's long-poll: not the agent at all), the agent's own long-poll
  (``wait_seconds`` > 0: the agent waiting, not working), and a check-in that only renews (no new session, no new
  status: a heartbeat).
- ``expires_at``: the lease. ``followed_until``: until when a reader waits on its inbox.

The rules, in this order (the first that holds):

1. ``stale``: the lease lapsed, or less than ``STALE_FRACTION`` of its TTL is left (the heartbeats stopped for three
   quarters of the lease: an agent, a follower or a run that renews on time never gets there).
2. ``working``: activity within ``WORKING_SECONDS``.
3. ``waiting``: a reader follows its inbox now (a long-poll, an SSE stream, the MCP follower) and nothing else.
4. ``idle``: live, no reader, no recent activity.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from muster_mesh.records import AgentRecord

State = Literal["working", "waiting", "idle", "stale"]

WORKING_SECONDS = 60
STALE_FRACTION = 0.25

_WORKING_US = WORKING_SECONDS * 1_000_000
_MICROSECOND = timedelta(microseconds=1)


def state_at(now_us: int, *, expires_us: int, ttl_seconds: int, active_us: int, followed_us: int | None) -> State:
    """The state at ``now_us`` (each instant in microseconds since the Unix epoch; ``followed_us`` None: never
    followed)."""
    if expires_us - now_us <= ttl_seconds * STALE_FRACTION * 1_000_000:
        return "stale"
    if now_us - active_us <= _WORKING_US:
        return "working"
    if followed_us is not None and followed_us > now_us:
        return "waiting"
    return "idle"


def agent_state(agent: AgentRecord, now: datetime) -> State:
    """``state_at`` of a record."""

    def us(at: datetime) -> int:
        return (at - now) // _MICROSECOND

    followed = agent.followed_until
    return state_at(
        0,
        expires_us=us(agent.expires_at),
        ttl_seconds=agent.ttl_seconds,
        active_us=us(agent.last_activity),
        followed_us=None if followed is None else us(followed),
    )


__all__ = ["STALE_FRACTION", "WORKING_SECONDS", "State", "agent_state", "state_at"]
