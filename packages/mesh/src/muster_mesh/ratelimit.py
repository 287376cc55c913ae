"""A token bucket per key, on the mesh's clock: the fan-out limit of each sender.

Kept in the process: with several API instances each allows its own rate, which still bounds a runaway agent to a
small multiple of it (the point is that one agent cannot flood every inbox, not an exact quota).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

# Beyond this many senders tracked, full buckets (senders quiet for a whole period) are forgotten.
MAX_TRACKED = 10_000


@dataclass
class _Bucket:
    tokens: float
    at: datetime


class TokenBuckets:
    def __init__(self, per_minute: int) -> None:
        if per_minute < 1:
            raise ValueError("per_minute must be at least 1")
        self.capacity = float(per_minute)
        self.per_second = per_minute / 60.0
        self._buckets: dict[str, _Bucket] = {}

    def _refilled(self, key: str, now: datetime) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= MAX_TRACKED:
                self._forget_full(now)
            bucket = self._buckets[key] = _Bucket(self.capacity, now)
            return bucket
        elapsed = max((now - bucket.at).total_seconds(), 0.0)
        bucket.tokens = min(self.capacity, bucket.tokens + elapsed * self.per_second)
        bucket.at = now
        return bucket

    def take(self, key: str, now: datetime) -> float:
        """Take one token for ``key``: 0 when there was one, else the seconds until there will be (nothing taken)."""
        bucket = self._refilled(key, now)
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0.0
        return (1 - bucket.tokens) / self.per_second

    def _forget_full(self, now: datetime) -> None:
        for key in [k for k, b in self._buckets.items() if self._refilled(k, now).tokens >= self.capacity]:
            del self._buckets[key]
