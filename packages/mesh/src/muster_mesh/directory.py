"""A page of the directory as a store reads it: lean rows holding only what the page shows, encoded straight to the
JSON of its ``AgentList`` and fingerprinted for its ETag, without building a record or a model per agent.

A ``ShownRow`` is (agent_id, role, repo, caps, status, status_since, status_since_us, last_seen_at, last_seen_us,
expires_at, expires_us, ttl_seconds, active_at, active_us, followed_until, followed_us): ``caps`` is the list as JSON
text; each datetime is either a UTC-aware ``datetime`` or its JSON text exactly as pydantic writes it
(``2026-05-01T12:00:00.123456Z``, no fraction when its microseconds are zero), and comes with its microseconds since
the Unix epoch, from which the ages, ``alive`` and ``state`` are computed (``active_at`` None: ``last_seen_at`` stands
in; ``followed_until`` None: never followed). A SQL store has the database render these, so that a row costs Python
no parsing at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from pydantic_core import to_json

from muster_mesh.models import AgentList
from muster_mesh.presence import state_at
from muster_mesh.records import AgentRecord

ShownRow = tuple[
    str, str | None, str | None, str, str, Any, int, Any, int, Any, int, int, Any, int | None, Any, int | None
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def epoch_us(at: datetime) -> int:
    return (at - EPOCH) // _MICROSECOND


def shown_row(agent: AgentRecord) -> ShownRow:
    """The row of a record (for a store that holds records rather than reading rows)."""
    return (
        agent.agent_id,
        agent.role,
        agent.repo,
        json.dumps(list(agent.caps)),
        agent.status,
        agent.status_since,
        epoch_us(agent.status_since),
        agent.last_seen_at,
        epoch_us(agent.last_seen_at),
        agent.expires_at,
        epoch_us(agent.expires_at),
        agent.ttl_seconds,
        agent.active_at,
        None if agent.active_at is None else epoch_us(agent.active_at),
        agent.followed_until,
        None if agent.followed_until is None else epoch_us(agent.followed_until),
    )


@lru_cache(maxsize=1024)
def _caps(text: str) -> tuple[str, ...]:
    # Few distinct capability lists across a roster: a cached tuple costs a lookup where json.loads costs a parse.
    return tuple(json.loads(text))


def _row_state(now: int, row: ShownRow) -> str:
    active_us = row[13]
    return state_at(
        now,
        expires_us=row[10],
        ttl_seconds=row[11],
        active_us=row[8] if active_us is None else active_us,
        followed_us=row[15],
    )


@dataclass(frozen=True, slots=True)
class DirectoryPage:
    """A page of the directory as read, and the instant its ages, ``alive`` and ``state`` are computed at.

    ``json`` is its ``AgentList`` as JSON: the fields in AgentView's order, each value of its field's type (an age is
    ``(now - then).total_seconds()``, the same integer microseconds divided the same way), encoded by the same
    pydantic-core encoder. ``fingerprint`` is what the page says apart from the ages (they move with the clock), for a
    conditional GET: the rows as read, whether each agent is alive and its state, and the next cursor; equal
    fingerprints mean equal pages."""

    rows: list[ShownRow]
    now: datetime
    next_cursor: str | None

    def json(self) -> bytes:
        now, rows = epoch_us(self.now), self.rows
        agents = [
            {
                "agent_id": agent_id,
                "role": role,
                "repo": repo,
                "caps": _caps(caps),
                "status": status,
                "status_since": since,
                "status_age_seconds": (now - since_us) / 1_000_000,
                "last_seen_at": seen,
                "heartbeat_age_seconds": (now - seen_us) / 1_000_000,
                "expires_at": expires,
                "ttl_seconds": ttl,
                "alive": expires_us > now,
                "last_activity": seen if active is None else active,
                "state": state_at(
                    now,
                    expires_us=expires_us,
                    ttl_seconds=ttl,
                    active_us=seen_us if active_us is None else active_us,
                    followed_us=followed_us,
                ),
            }
            for (
                agent_id,
                role,
                repo,
                caps,
                status,
                since,
                since_us,
                seen,
                seen_us,
                expires,
                expires_us,
                ttl,
                active,
                active_us,
                _,
                followed_us,
            ) in rows
        ]
        return to_json({"agents": agents, "next_cursor": self.next_cursor})

    def model(self) -> AgentList:
        return AgentList.model_validate_json(self.json())

    def fingerprint(self) -> bytes:
        now = epoch_us(self.now)
        # The state moves with the clock too (working turns idle): a page whose states changed is a new page.
        shown = [(row[10] > now, _row_state(now, row)) for row in self.rows]
        return to_json([self.rows, shown, self.next_cursor])


__all__ = ["DirectoryPage", "ShownRow", "epoch_us", "shown_row"]
