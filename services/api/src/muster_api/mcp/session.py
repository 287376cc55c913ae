"""The agent behind this MCP server: its identity (agent_id and session token), the inbox cursor of what it was
given, and its Herdr wake.

Messages returned by ``agent_inbox`` are acknowledged at the agent's next mesh call (or when the server stops):
once the agent calls again, the answer reached it; a server that dies before that gives them again, never loses
them.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from anyio.abc import TaskGroup

from muster_api.errors import ToolRefused
from muster_api.mcp.identities import IdentityStore
from muster_api.mcp.settings import McpSettings
from muster_api.mcp.tools import CheckinArgs
from muster_api.mcp.wake import InboxFollower
from muster_client import AsyncMusterClient, CheckinPreview, CheckinRecord, InboxPage, MusterClientError
from muster_mesh.models import MAX_PAGE
from muster_mesh.wake import PANE_ID

log = logging.getLogger("muster.mcp")
T = TypeVar("T")

HERDR = "herdr"


class AgentSession:
    def __init__(self, settings: McpSettings, client: AsyncMusterClient, group: TaskGroup) -> None:
        self.settings = settings
        self.client = client
        self.group = group
        self.identities = IdentityStore(settings.mcp_state_dir, client.url)
        self.agent_id: str | None = None
        self.delivered: int | None = None
        self.acked: int | None = None
        self.pane: str | None = None
        self._wake_scope: anyio.CancelScope | None = None
        self._lock = anyio.Lock()
        self.bound: str | None = None  # the one agent this server may act as (set by the service that runs it)
        if settings.agent_id:
            self._resume(settings.agent_id)

    def bind(self, agent_id: str, token: str) -> None:
        """Act as ``agent_id`` (already checked in by the service) from the first call, and as no other."""
        self.bound = self.agent_id = agent_id
        self.client.token = token

    def note_activity(self) -> None:
        """A tool call the mesh would not see as the agent's own (a remote agent, a run, a check-in that only
        renews): one mesh call as the agent, which the roster counts as its activity, off the tool call's path."""
        agent_id = self.agent_id
        if agent_id is None or self.client.token is None:
            return

        async def tell() -> None:
            try:
                await self.client.agent(agent_id)
            except MusterClientError as exc:  # presence only: the tool call itself is unaffected
                log.debug("activity not recorded: %s", exc)

        self.group.start_soon(tell)

    def refuse_unbound(self, agent_id: str) -> None:
        if self.bound is not None and agent_id != self.bound:
            raise ToolRefused(
                f"this MCP server is bound to agent {self.bound!r} by the service running you: you are already "
                f"checked in as {self.bound!r} and cannot act as {agent_id!r}"
            )

    def _resume(self, agent_id: str) -> None:
        token = self.identities.load(agent_id)
        if token is not None:
            self.identities.claim(agent_id)
            self.agent_id, self.client.token = agent_id, token

    def require(self) -> str:
        if self.agent_id is None or self.client.token is None:
            raise ToolRefused(
                "not checked in: call agent_checkin with your agent_id and confirm: true first (a restarted session "
                "that checks in with the same agent_id keeps its identity)"
            )
        return self.agent_id

    def unacknowledged(self) -> bool:
        return self.agent_id is not None and self.delivered is not None and self.delivered != self.acked

    async def flush(self) -> None:
        """Acknowledge what the last ``agent_inbox`` returned: the agent called again, so the answer reached it."""
        cursor = self.delivered
        if cursor is None or not self.unacknowledged():
            return
        await self.client.ack(cursor, confirm=True)
        self.acked = cursor

    # ------------------------------------------------------------ check-in

    def check_pane(self, pane: str) -> str:
        if os.environ.get("HERDR_ENV") != "1":
            raise ToolRefused(
                "herdr_pane is accepted only inside a Herdr-managed pane (HERDR_ENV=1), and this MCP server does not "
                "run in one: check in again without herdr_pane"
            )
        own = os.environ.get("HERDR_PANE_ID")
        if own and pane != own:
            raise ToolRefused(
                "herdr_pane must be your own pane id ($HERDR_PANE_ID), never a value taken from a message: check in "
                "again with your own pane id"
            )
        if not PANE_ID.fullmatch(pane):
            raise ToolRefused("herdr_pane must be letters, digits and _ . : % @ -, at most 128 characters")
        return pane

    async def checkin(self, args: CheckinArgs) -> tuple[CheckinPreview | CheckinRecord, list[str]]:
        """Check in under ``args.agent_id`` with the token kept for it (if any); returns the answer and warnings."""
        self.refuse_unbound(args.agent_id)
        pane = self.check_pane(args.herdr_pane) if args.herdr_pane is not None else None
        async with self._lock:
            switching = args.agent_id != self.agent_id
            if switching:
                self.identities.claim(args.agent_id)
            else:
                await self.flush()
            token = self.identities.load(args.agent_id) if switching else self.client.token
            previous = self.client.token
            self.client.token = token
            adopted = False
            try:
                answer = await self.client.checkin(
                    args.agent_id,
                    role=args.role,
                    repo=args.repo,
                    caps=args.caps,
                    status=args.status,
                    ttl_seconds=args.ttl_seconds,
                    confirm=args.confirm,
                )
                if not isinstance(answer, CheckinRecord):
                    return answer, []
                adopted = True
                return answer, await self._adopt(args.agent_id, answer, switching, pane)
            finally:
                if not adopted:
                    self.client.token = previous
                    if switching:
                        self.identities.release(args.agent_id)

    async def _adopt(self, agent_id: str, record: CheckinRecord, switching: bool, pane: str | None) -> list[str]:
        """Make the confirmed check-in this server's identity (a new session: a fresh inbox cursor)."""
        if record.token:
            self.identities.save(agent_id, record.token)
        if switching or record.token:
            self.stop_wake()
            if switching and self.agent_id is not None:
                self.identities.release(self.agent_id)
            self.agent_id, self.delivered, self.acked = agent_id, None, None
        if pane is not None:
            self.pane = pane
        if self.pane is None or self._wake_scope is not None:
            return []
        if shutil.which(HERDR) is None:
            return [f"auto-wake is off: the {HERDR} command is not on this MCP server's PATH"]
        await self.start_wake(self.pane)
        return []

    # ------------------------------------------------------------ inbox

    async def acknowledging(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` while what the last ``agent_inbox`` returned is acknowledged beside it, so that the agent waits
        for one round trip, not two. The call's error is the answer's; a failed acknowledgement only is logged and
        left for the next call to make again (the page is still marked given, not acknowledged): failing a send that
        was stored would make the agent send it twice."""
        if not self.unacknowledged():
            return await call()
        failed: list[Exception] = []

        async def acknowledge() -> None:
            try:
                await self.flush()
            except Exception as exc:
                failed.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(acknowledge)
            try:
                answer = await call()
            except Exception as exc:
                error: Exception | None = exc
            else:
                error = None
        if error is not None:
            raise error
        if failed:
            log.warning("acknowledging the inbox failed (%s); the next call tries again", type(failed[0]).__name__)
        return answer

    async def read(self, *, wait_seconds: float, limit: int) -> InboxPage:
        """The messages after those already given, while what was given last is acknowledged beside the read: the
        read names its own ``after``, so the acknowledgement need not come first. An acknowledgement is a cursor:
        one that failed is covered by the next, which acknowledges up to what this read gives."""
        after = self.delivered
        page = await self.acknowledging(lambda: self.client.inbox(after=after, limit=limit, wait_seconds=wait_seconds))
        if page.messages:
            self.delivered = page.next_cursor
        return page

    async def unread(self) -> int:
        """Messages the agent has not been given yet (the wake's N). Read as the agent's follower: counting them is
        neither reading them (their receipts stay unread) nor the agent's activity."""
        page = await self.client.inbox(after=self.delivered, limit=MAX_PAGE, follow=True)
        return len(page.messages)

    async def _last_seq(self) -> int:
        after = self.delivered
        while True:
            page = await self.client.inbox(after=after, limit=MAX_PAGE, follow=True)
            if not page.has_more:
                return page.next_cursor
            after = page.next_cursor

    # ------------------------------------------------------------ wake

    async def start_wake(self, pane: str) -> None:
        follower = InboxFollower(
            self.client,
            pane,
            after=await self._last_seq(),
            unread=self.unread,
            interval=self.settings.mcp_wake_interval_seconds,
            settle=self.settings.mcp_wake_settle_seconds,
            herdr=HERDR,
        )
        scope = anyio.CancelScope()
        self._wake_scope = scope

        async def run() -> None:
            with scope:
                await follower.run()
            if self._wake_scope is scope:
                self._wake_scope = None

        self.group.start_soon(run)

    def stop_wake(self) -> None:
        if self._wake_scope is not None:
            self._wake_scope.cancel()
            self._wake_scope = None

    def ended(self) -> None:
        """The session ended (checked out): nothing to follow, no token to present."""
        self.stop_wake()
        if self.agent_id is not None:
            self.identities.forget(self.agent_id)
            self.identities.release(self.agent_id)
        self.agent_id = self.delivered = self.acked = None
        self.pane = None
