"""Fallback candidates in quota: a fallback agent whose candidate reported a usage limit starts its next runs at the
next candidate until the reset time that candidate gave, instead of starting a CLI that will only say "quota" again
(seconds of start-up each time, and a pool serving tasks through the fallback would pay it on every task).

Kept by each process from the runs its workers ran: another instance learns the same from its own first attempt.
Only the fallback's own attempts count (a direct run of the candidate is the person's to see fail). When every
candidate is in quota the run tries them all, so that it fails with the earliest reset (what a pool waits for). A
run that continues a conversation skips nothing: the conversation is the first candidate's, and a later one gets the
brief alone, as in any fallback.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from muster_dispatch import TurnResult
from muster_dispatch.faults import quota_fault

QUOTA_PAUSE = timedelta(minutes=1)  # when a quota names no reset time


class RestingCandidates:
    def __init__(self) -> None:
        self._until: dict[tuple[str, str], datetime] = {}

    def note(self, fallback: str, result: TurnResult, now: datetime) -> None:
        """What the attempts of a run of ``fallback`` told: a quota rests its candidate, a success wakes it."""
        for attempt in result.attempts:
            key = (fallback, attempt.agent)
            fault = quota_fault(attempt.error)
            if fault is None:
                if attempt.status == "completed":
                    self._until.pop(key, None)
                continue
            reset = fault.reset_at
            if reset is not None and reset.tzinfo is None:
                reset = reset.replace(tzinfo=UTC)
            self._until[key] = reset if reset is not None else now + QUOTA_PAUSE

    def resting(self, fallback: str, now: datetime) -> dict[str, datetime]:
        """The candidates of ``fallback`` in quota at ``now``, with their reset times."""
        return {agent: until for (name, agent), until in self._until.items() if name == fallback and until > now}
