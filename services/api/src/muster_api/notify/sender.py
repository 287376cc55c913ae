"""The sender: one task per instance that scans for events, packs them and sends the due deliveries, one at a time.

Apprise's calls block (``requests`` underneath), so each runs in a worker thread, bounded by ``timeout_seconds``
(Apprise's own connect and read timeouts, and the sender's wait for the thread: a thread left behind ends at its
read timeout). A failed attempt is retried after a backoff that doubles, up to ``max_attempts``; the delivery is then
``failed``. Nothing here runs inside the call that caused an event: a URL that fails or hangs delays only the
deliveries after it, never an agent's call.

What is logged of a delivery is its id, its service's name and the error's class: never the URL (its secrets) nor
its text. Apprise's own log may repeat a URL, so it is cut off from the service's (``quiet_apprise``).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import anyio

from muster_api.notify.config import NotifyConfig, Target
from muster_api.notify.outbox import Claimed, SqlOutbox
from muster_api.notify.sources import Scan, sources_of, window
from muster_api.settings import NotifySettings

log = logging.getLogger("muster.notify")

SENDS_PER_PASS = 100
PRUNE_EVERY_SECONDS = 3600.0
# Between the sender's bound on one attempt and the claim's: an instance that died mid-send is replaced after it.
CLAIM_MARGIN = timedelta(seconds=30)


def quiet_apprise() -> None:
    apprise_log = logging.getLogger("apprise")
    apprise_log.propagate = False
    apprise_log.setLevel(logging.CRITICAL + 1)


class AttemptFailed(Exception):
    """One attempt did not deliver; ``kind`` is what the delivery log shows (no URL, no text)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def send_blocking(target: Target, title: str, body: str, timeout: float) -> None:
    """One attempt, in a worker thread (where Apprise is imported: only an instance with URLs loads it)."""
    import apprise

    plugin = apprise.Apprise.instantiate(target.url.get_secret_value())
    if plugin is None:
        raise AttemptFailed("invalid_url")
    plugin.socket_connect_timeout = timeout
    plugin.socket_read_timeout = timeout
    started = time.monotonic()
    sender = apprise.Apprise()
    sender.add(plugin)
    if not sender.notify(body=body or title, title=title, body_format=apprise.NotifyFormat.TEXT):
        # Apprise answers a bool; an attempt that used up the read timeout is one that got no answer.
        raise AttemptFailed("timeout" if time.monotonic() - started >= timeout else "refused")


@dataclass
class Sender:
    outbox: SqlOutbox
    config: NotifyConfig
    settings: NotifySettings
    now: Callable[[], datetime]

    async def run_forever(self) -> None:
        pruned = 0.0
        while True:
            try:
                await self.one_pass()
                if time.monotonic() - pruned > PRUNE_EVERY_SECONDS:
                    await self.prune()
                    pruned = time.monotonic()
            except Exception:  # a failed pass must not end the sender: the next one retries
                log.exception("notify pass failed")
            await anyio.sleep(self.settings.scan_seconds)

    async def one_pass(self) -> None:
        await self.scan()
        await self.outbox.pack(self.config, self.now(), timedelta(seconds=self.settings.coalesce_seconds))
        for _ in range(SENDS_PER_PASS):
            claimed = await self.outbox.claim(self.now(), self._hold())
            if claimed is None:
                break
            await self.deliver(claimed)

    async def scan(self) -> None:
        now = self.now()
        since = window(now, self.settings.lookback_seconds)
        async with self.outbox.reads.connect() as conn:
            found = []
            for source in sources_of(self.config):
                found.extend(await source(Scan(conn, self.config, now, since)))
        await self.outbox.add(found)

    async def prune(self) -> None:
        await self.outbox.prune(self.now() - timedelta(hours=self.settings.retention_hours))

    def _hold(self) -> timedelta:
        return timedelta(seconds=self.settings.timeout_seconds) + CLAIM_MARGIN

    async def deliver(self, claimed: Claimed) -> None:
        try:
            await self._attempt(claimed)
        except AttemptFailed as exc:
            await self._failed(claimed, exc.kind)
        except Exception as exc:  # whatever Apprise raised: its class is the outcome, never its message (a URL)
            await self._failed(claimed, type(exc).__name__)
        else:
            await self.outbox.settle(claimed.id, {"state": "delivered", "last_error": None, "finished_at": self.now()})

    async def _attempt(self, claimed: Claimed) -> None:
        target = self.config.target(claimed.url_digest)
        if target is None:
            raise AttemptFailed("url_removed")
        timeout = self.settings.timeout_seconds
        with anyio.move_on_after(timeout + 1) as scope:
            await anyio.to_thread.run_sync(
                send_blocking, target, claimed.title, claimed.body, timeout, abandon_on_cancel=True
            )
        if scope.cancelled_caught:
            raise AttemptFailed("timeout")

    async def _failed(self, claimed: Claimed, kind: str) -> None:
        if claimed.attempts >= self.settings.max_attempts:
            log.warning(
                "notify delivery %d to %s failed after %d attempts (%s)",
                claimed.id,
                claimed.service,
                claimed.attempts,
                kind,
            )
            await self.outbox.settle(claimed.id, {"state": "failed", "last_error": kind, "finished_at": self.now()})
            return
        wait = min(self.settings.backoff_seconds * 2 ** (claimed.attempts - 1), self.settings.backoff_max_seconds)
        wait *= random.uniform(0.8, 1.2)  # instances retrying one peer do not stay in step
        log.info(
            "notify delivery %d to %s: attempt %d failed (%s); retrying",
            claimed.id,
            claimed.service,
            claimed.attempts,
            kind,
        )
        await self.outbox.settle(
            claimed.id, {"state": "pending", "last_error": kind, "due_at": self.now() + timedelta(seconds=wait)}
        )
