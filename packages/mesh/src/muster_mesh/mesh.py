"""The mesh: roster with presence leases, durable inboxes, wake-ups. All the rules live here, once, for every store.

Hot paths are counted in store calls (one SQL statement each, once the store's caches are warm), each in one
transaction: a check-in renewal is 1, an inbox read 1 where the store renews and reads in one step (2 otherwise; none
when a long-poll is handed its message by the wake-up; a long-poll reads once when its reader polled before), an ack
3 (2 when the cursor stays), a direct send 1 where the store renews the sender and delivers in one step (4 otherwise:
renew the sender, take the recipient's sequence, store the message and its entry).

Receipts ride on these: a send writes none (an entry is stored when its message is), a read records its page as read
in the same step, an ack its entries as acknowledged; only a long-poll that waited and a follower (SSE, the MCP
follower) spend one more step, to record theirs as woken.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar

import anyio
import anyio.lowlevel
from pydantic import BaseModel

from muster_mesh.clock import Clock, system_clock
from muster_mesh.directory import DirectoryPage
from muster_mesh.errors import (
    AgentNotFound,
    IdempotencyConflict,
    IdentityConflict,
    InvalidAddress,
    InvalidCursor,
    InvalidToken,
    LeaseExpired,
    MessageNotFound,
    MessageTooLarge,
    NotTheHolder,
    RateLimited,
    RecipientExpired,
    RecipientNotFound,
    Superseded,
    TokenGivenOnce,
    TokenRequired,
)
from muster_mesh.models import (
    MAX_PAGE,
    MAX_WAIT_SECONDS,
    AckPreview,
    AckRequest,
    AckResult,
    Action,
    AgentList,
    AgentView,
    Backlog,
    BacklogList,
    CheckinPreview,
    CheckinRecord,
    CheckinRequest,
    CheckoutPreview,
    CheckoutRequest,
    CheckoutResult,
    InboxMessage,
    InboxPage,
    MessageReceipts,
    Receipt,
    SendPreview,
    SendRequest,
    SendResult,
)
from muster_mesh.notify import LocalNotifier
from muster_mesh.presence import agent_state
from muster_mesh.ratelimit import TokenBuckets
from muster_mesh.records import (
    ACKED,
    READ,
    WOKEN,
    AgentChanges,
    AgentFilter,
    AgentRecord,
    DirectoryQuery,
    IdempotencyRecord,
    InboxEntry,
    MessageRecord,
    SweepPolicy,
    SweepReport,
)
from muster_mesh.store import MeshStore, MeshTx, Notifier
from muster_mesh.tokens import new_token, token_hash

log = logging.getLogger("muster.mesh")

R = TypeVar("R", bound=BaseModel)
T = TypeVar("T")

# Idempotency records double as the memory of taken-over sessions: keyed by the old token's hash in their own scope,
# swept like any record once the old session could no longer have been live.
SUPERSEDED_SCOPE = "superseded"
# Marks a remembered check-in that answered a token (never stored itself).
TOKEN_GIVEN = "token_given"

# The receipts each kind of read records (see ``Mesh.read_inbox``) and an ack.
_READ = frozenset({READ})
_WOKEN_AND_READ = frozenset({WOKEN, READ})
_FOLLOWED = frozenset({WOKEN})
_ACKED = frozenset({ACKED})

# How many readers' token → agent_id entries to keep; past it the map starts over.
MAX_KNOWN_TOKENS = 50_000

SHORT_LEASE_ROLES = frozenset({"ping", "verification"})
SHORT_TTL_SECONDS = 900
WORKING_TTL_SECONDS = 3600


def default_ttl(role: str | None) -> int:
    """The silence a role can afford: short for probes, an hour for working roles (and when no role is given)."""
    return SHORT_TTL_SECONDS if role in SHORT_LEASE_ROLES else WORKING_TTL_SECONDS


@dataclass(frozen=True)
class MeshLimits:
    max_message_bytes: int = 64 * 1024
    max_wait_seconds: float = MAX_WAIT_SECONDS
    default_page: int = 100
    max_page: int = MAX_PAGE
    max_fanout: int = 10_000
    # Confirmed role/repo/cap sends per sender and minute (a burst of this many, then this rate): one runaway agent
    # cannot flood every inbox. Direct messages are not limited.
    fanout_per_minute: int = 60
    read_retention: timedelta = timedelta(days=7)
    expired_agent_retention: timedelta = timedelta(days=7)
    idempotency_ttl: timedelta = timedelta(hours=24)
    sweep_batch: int = 1000


# The directory's default page: every live agent, the default page size, from the start.
EVERY_LIVE_AGENT = DirectoryQuery()


class _Replay(Exception):
    """A concurrent request with the same idempotency key committed first: run again to replay its answer."""


async def _replaying(run: Callable[[], Awaitable[T]]) -> T:
    """``run``, and once more if a concurrent request won a race with it (a first check-in of the same agent_id, a
    retry with the same idempotency key): the second run sees the winner's row and answers from it (refusal or
    replay). A second lost race is raised."""
    try:
        return await run()
    except _Replay:
        return await run()


@dataclass(frozen=True)
class SendContext:
    """What every step of one send shares: its transaction, the request, the caller's token hash, the time, and
    the fingerprint its idempotency record is checked against."""

    tx: MeshTx
    request: SendRequest
    hashed: str
    now: datetime
    fingerprint: str


def view_fields(agent: AgentRecord, now: datetime) -> dict[str, Any]:
    """The fields of the agent's ``AgentView`` at ``now``. Validated into models by pydantic's compiled validator,
    which builds them faster than ``model_construct``'s per-field Python loop (a page of the directory builds a
    hundred)."""
    return {
        "agent_id": agent.agent_id,
        "role": agent.role,
        "repo": agent.repo,
        "caps": list(agent.caps),
        "status": agent.status,
        "status_since": agent.status_since,
        "status_age_seconds": (now - agent.status_since).total_seconds(),
        "last_seen_at": agent.last_seen_at,
        "heartbeat_age_seconds": (now - agent.last_seen_at).total_seconds(),
        "expires_at": agent.expires_at,
        "ttl_seconds": agent.ttl_seconds,
        "alive": agent.live_at(now),
        "last_activity": agent.last_activity,
        "state": agent_state(agent, now),
    }


def _active_after(kept: AgentRecord | None, status: str, now: datetime, active: bool | None) -> datetime:
    """The ``active_at`` after a check-in over the ``kept`` session (see ``Mesh.checkin``'s ``active``)."""
    if kept is None or active or (active is None and kept.status != status):
        return now
    return kept.last_activity


def view(agent: AgentRecord, now: datetime) -> AgentView:
    return AgentView.model_validate(view_fields(agent, now))


def _fingerprint(operation: str, payload: dict[str, Any]) -> str:
    canonical = json.dumps({"op": operation, **payload}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _message(entry: InboxEntry) -> InboxMessage:
    m = entry.message
    return InboxMessage.model_construct(
        seq=entry.seq, message_id=m.message_id, sender=m.sender, body=m.body, thread_id=m.thread_id, sent_at=m.sent_at
    )


class Mesh:
    """The tools (check-in, list, get, send, read inbox, ack, check-out) and the sweeper, over any ``MeshStore``."""

    def __init__(
        self,
        store: MeshStore,
        notifier: Notifier | None = None,
        *,
        clock: Clock = system_clock,
        limits: MeshLimits | None = None,
    ) -> None:
        self.store = store
        self.notifier: Notifier = notifier if notifier is not None else LocalNotifier()
        self.clock = clock
        self.limits = limits or MeshLimits()
        self._fanout = TokenBuckets(self.limits.fanout_per_minute)
        # token hash → agent_id of readers seen: fixed for good once issued (a new session gets a new token), so a
        # long-poll can subscribe before its first read.
        self._agent_ids: dict[str, str] = {}

    # ------------------------------------------------------------------ helpers

    def _now(self) -> datetime:
        now = self.clock()
        if now.tzinfo is None:
            raise ValueError("the mesh clock must return timezone-aware datetimes")
        return now.astimezone(UTC)

    @staticmethod
    def _hash(token: str | None) -> str:
        if not token:
            raise TokenRequired("this mesh call needs the session token from check-in (Authorization: Bearer …)")
        return token_hash(token)

    @staticmethod
    async def _usable(tx: MeshTx, hashed: str, agent: AgentRecord | None, now: datetime) -> AgentRecord:
        if agent is None:
            await Mesh._unknown(tx, hashed)
        elif not agent.live_at(now):
            raise LeaseExpired(agent.agent_id, agent.expires_at)
        assert agent is not None
        return agent

    @staticmethod
    async def _unknown(tx: MeshTx, hashed: str) -> NoReturn:
        """Refuse a token no agent holds, saying why when its session was taken over (off the hot path: only a
        refused token costs the lookup)."""
        superseded = await tx.get_idempotency(SUPERSEDED_SCOPE, hashed)
        if superseded is not None:
            raise Superseded(superseded.result["agent_id"], superseded.result["at"])
        raise InvalidToken("the token is not the session of any agent; check in to get one")

    async def _caller(self, tx: MeshTx, token: str | None, now: datetime, *, renew: bool) -> AgentRecord:
        """The caller's live agent from its token; ``renew`` extends its lease (every acting call does)."""
        hashed = self._hash(token)
        agent = await (tx.renew(hashed, now) if renew else tx.find_by_token(hashed))
        return await self._usable(tx, hashed, agent, now)

    async def _replayed(
        self, tx: MeshTx, scope: str, key: str | None, operation: str, fingerprint: str, model: type[R]
    ) -> R | None:
        result = await self._remembered(tx, scope, key, operation, fingerprint)
        return None if result is None else model.model_validate({**result, "replayed": True})

    @staticmethod
    async def _remembered(
        tx: MeshTx, scope: str, key: str | None, operation: str, fingerprint: str
    ) -> dict[str, Any] | None:
        if key is None:
            return None
        # A record stays binding until the sweeper removes it: honouring it a little past expires_at is harmless,
        # while ignoring it would leave its row in the way of a new one with the same key.
        record = await tx.get_idempotency(scope, key)
        if record is None:
            return None
        if record.operation != operation or record.fingerprint != fingerprint:
            raise IdempotencyConflict(key, operation)
        return dict(record.result)

    async def _remember(
        self,
        tx: MeshTx,
        scope: str,
        key: str | None,
        operation: str,
        fingerprint: str,
        result: dict[str, Any],
        now: datetime,
    ) -> None:
        if key is None:
            return
        record = IdempotencyRecord(
            scope=scope,
            key=key,
            operation=operation,
            fingerprint=fingerprint,
            result=result,
            created_at=now,
            expires_at=now + self.limits.idempotency_ttl,
        )
        if not await tx.put_idempotency(record):
            raise _Replay

    # ------------------------------------------------------------------ for the mesh's other tools (claims)

    def now(self) -> datetime:
        return self._now()

    async def caller(self, tx: MeshTx, token: str | None, now: datetime) -> AgentRecord:
        """The caller's live agent from its token, its lease renewed (as every acting call does)."""
        return await self._caller(tx, token, now, renew=True)

    async def replayed(
        self, tx: MeshTx, scope: str, key: str | None, operation: str, fingerprint: str, model: type[R]
    ) -> R | None:
        return await self._replayed(tx, scope, key, operation, fingerprint, model)

    async def remember(
        self,
        tx: MeshTx,
        scope: str,
        key: str | None,
        operation: str,
        fingerprint: str,
        result: BaseModel,
        now: datetime,
    ) -> None:
        await self._remember(tx, scope, key, operation, fingerprint, result.model_dump(mode="json"), now)

    # ------------------------------------------------------------------ check-in

    async def checkin(
        self,
        request: CheckinRequest,
        *,
        token: str | None = None,
        idempotency_key: str | None = None,
        active: bool | None = None,
    ) -> CheckinPreview | CheckinRecord:
        """Create or renew the session of ``agent_id``; a preview unless ``confirm``.

        A live agent_id is renewed only with its own token; an expired (or checked-out) one is claimed anew: a new
        session, a new token, a fresh and empty inbox.

        ``active``: whether this renewal is the agent's activity (``muster_mesh.presence``). None: only when it
        starts a session or changes the status text; a renewal that changes neither is a heartbeat."""
        # Two tries: a concurrent first check-in or a concurrent same-key retry may win the race once; the second
        # run then sees its row and answers from it (refusal or replay).
        return await _replaying(lambda: self._checkin(request, token, idempotency_key, active))

    async def _checkin(
        self, request: CheckinRequest, token: str | None, key: str | None, active: bool | None
    ) -> CheckinPreview | CheckinRecord:
        now = self._now()
        presented = token_hash(token) if token else None
        scope = f"checkin:{request.agent_id}"
        # Only an idempotency key's record is checked against a fingerprint: none is computed without one.
        fingerprint = (
            _fingerprint("checkin", {**request.model_dump(mode="json", exclude={"confirm"}), "token": presented})
            if key is not None
            else ""
        )
        if request.confirm and presented is not None and key is None:
            # The common case, a live agent renewing its own lease: one statement, which re-checks the session, so
            # it needs no transaction around it. When it renews nothing, the check-in runs in full below.
            async with self.store.standalone() as one:
                renewed = await self._renew_checkin(one, request, presented, now, active)
            if renewed is not None:
                return renewed
        async with self.store.transaction() as tx:
            if request.confirm:
                remembered = await self._remembered(tx, scope, key, "checkin", fingerprint)
                if remembered is not None:
                    if remembered.pop(TOKEN_GIVEN, False):
                        raise TokenGivenOnce(request.agent_id)
                    return CheckinRecord.model_validate({**remembered, "replayed": True})
            current = await tx.get_agent(request.agent_id, for_update=True)
            action = await self._checkin_action(tx, request, current, presented, now)
            minted = new_token() if action != "renew" else None
            hashed = token_hash(minted) if minted else (presented or "")
            record = self._checkin_record(
                request,
                current if action != "create" else None,
                current,
                hashed,
                now,
                active=active if action == "renew" else True,
            )
            shown = view(record, now)
            if not request.confirm:
                return CheckinPreview(action=action, agent=shown)
            if current is None:
                if not await tx.create_agent(record):
                    raise _Replay
            else:
                await tx.replace_agent(record)
                if action == "create":
                    # A new session on an agent_id whose lease ended: what the old session held ended with it.
                    await tx.end_holdings(request.agent_id)
            if action == "takeover" and current is not None:
                await self._supersede(tx, current, now)
            result = CheckinRecord(**shown.__dict__, token=minted, action=action)
            # The token is stored only as a hash: a retry of a check-in that made one is told so, and how to get
            # another (TokenGivenOnce), rather than answered a record it cannot use.
            remembered = {**result.model_dump(mode="json", exclude={"token"}), TOKEN_GIVEN: minted is not None}
            await self._remember(tx, scope, key, "checkin", fingerprint, remembered, now)
            return result

    @staticmethod
    async def _renew_checkin(
        tx: MeshTx, request: CheckinRequest, presented: str, now: datetime, active: bool | None
    ) -> CheckinRecord | None:
        ttl_given = request.ttl_seconds or (default_ttl(request.role) if request.role is not None else None)
        changes = AgentChanges(
            role=request.role,
            repo=request.repo,
            caps=tuple(request.caps) if request.caps is not None else None,
            status=request.status,
        )
        renewed = await tx.renew_checkin(
            request.agent_id, presented, now, ttl_seconds=ttl_given, changes=changes, active=active
        )
        return CheckinRecord(**view_fields(renewed, now), action="renew") if renewed is not None else None

    @staticmethod
    def _checkin_record(
        request: CheckinRequest,
        kept: AgentRecord | None,
        current: AgentRecord | None,
        hashed: str,
        now: datetime,
        *,
        active: bool | None = None,
    ) -> AgentRecord:
        """The row after the check-in: the request's fields over the ``kept`` session's (none for a new session)."""
        role = request.role if request.role is not None else (kept.role if kept else None)
        if request.ttl_seconds is not None:
            ttl = request.ttl_seconds
        elif kept is not None and request.role is None:
            ttl = kept.ttl_seconds
        else:
            ttl = default_ttl(role)
        status = request.status if request.status is not None else (kept.status if kept else "")
        # A new session starts after the backlog: the inbox delivers only what arrives after its check-in.
        last_seq = current.last_seq if current else 0
        return AgentRecord(
            agent_id=request.agent_id,
            token_hash=hashed,
            role=role,
            repo=request.repo if request.repo is not None else (kept.repo if kept else None),
            caps=tuple(request.caps) if request.caps is not None else (kept.caps if kept else ()),
            status=status,
            ttl_seconds=ttl,
            last_seen_at=now,
            status_since=kept.status_since if kept and kept.status == status else now,
            expires_at=now + timedelta(seconds=ttl),
            active_at=_active_after(kept, status, now, active),
            last_seq=last_seq,
            read_cursor=kept.read_cursor if kept else last_seq,
            floor_seq=kept.floor_seq if kept else last_seq,
        )

    @staticmethod
    async def _checkin_action(
        tx: MeshTx, request: CheckinRequest, current: AgentRecord | None, presented: str | None, now: datetime
    ) -> Action:
        """What a check-in does to the agent_id as it stands: refuses, renews, takes over or creates a session."""
        if current is None or not current.live_at(now):
            return "create"
        if presented is None:
            if request.takeover:
                return "takeover"
            raise IdentityConflict(current.agent_id, current.expires_at)
        if presented != current.token_hash:
            superseded = await tx.get_idempotency(SUPERSEDED_SCOPE, presented)
            if superseded is not None and superseded.result["agent_id"] == current.agent_id:
                raise Superseded(current.agent_id, superseded.result["at"])
            raise NotTheHolder(current.agent_id)
        return "renew"

    async def _supersede(self, tx: MeshTx, previous: AgentRecord, now: datetime) -> None:
        """Remember the taken-over session's token hash, so that its holder is told why it stopped working. Kept as
        long as that session could have lasted."""
        record = IdempotencyRecord(
            scope=SUPERSEDED_SCOPE,
            key=previous.token_hash,
            operation="takeover",
            fingerprint="",
            result={"agent_id": previous.agent_id, "at": now.isoformat()},
            created_at=now,
            expires_at=max(previous.expires_at, now + self.limits.idempotency_ttl),
        )
        await tx.put_idempotency(record)

    # ------------------------------------------------------------------ directory

    async def list_agents(self, query: DirectoryQuery = EVERY_LIVE_AGENT, *, token: str | None = None) -> AgentList:
        """The directory in agent_id order, a page at a time: live agents (all when ``include_expired``) with
        heartbeat and status ages. A token, when given, renews its agent's lease."""
        page = await self.directory(query, token=token)
        return page.model()

    async def directory(self, query: DirectoryQuery = EVERY_LIVE_AGENT, *, token: str | None = None) -> DirectoryPage:
        """``list_agents`` as read, before its models are built (see ``DirectoryPage``)."""
        now = self._now()
        limit = self._page_size(query.limit)
        # Without a token, a page is one read: no transaction around it.
        async with self.store.transaction() if token is not None else self.store.standalone() as tx:
            if token is not None:
                await self._caller(tx, token, now, renew=True)
            rows = await tx.directory_rows(query.where(now), after=query.cursor, limit=limit + 1)
        shown = rows[:limit]
        return DirectoryPage(shown, now, shown[-1][0] if len(rows) > limit else None)

    async def backlog(self, query: DirectoryQuery = EVERY_LIVE_AGENT) -> BacklogList:
        """Unread counts per agent, a page of the directory at a time, for people watching the mesh. Read from the
        counters every agent record keeps (no message is touched), so it renews no lease and needs no token."""
        now = self._now()
        limit = self._page_size(query.limit)
        async with self.store.standalone() as tx:
            rows = await tx.list_agents(query.where(now), after=query.cursor, limit=limit + 1)
        shown = [Backlog(agent_id=a.agent_id, unread=a.last_seq - a.read_cursor) for a in rows[:limit]]
        return BacklogList(
            agents=shown,
            total=sum(b.unread for b in shown),
            next_cursor=shown[-1].agent_id if len(rows) > limit else None,
        )

    def _page_size(self, asked: int | None) -> int:
        return min(max(asked or self.limits.default_page, 1), self.limits.max_page)

    async def get_agent(self, agent_id: str, *, token: str | None = None) -> AgentView:
        """One agent (live or not, until swept); ``AgentNotFound`` when it never checked in."""
        now = self._now()
        async with self.store.transaction() if token is not None else self.store.standalone() as tx:
            if token is not None:
                await self._caller(tx, token, now, renew=True)
            agent = await tx.get_agent(agent_id)
        if agent is None:
            raise AgentNotFound(agent_id)
        return view(agent, now)

    # ------------------------------------------------------------------ send

    async def send(self, request: SendRequest, *, token: str | None) -> SendPreview | SendResult:
        """Store a message in each addressed live inbox; a preview (who would store it) unless ``confirm``."""
        address = request.address()
        if len(address) != 1:
            raise InvalidAddress(sorted(address))
        size = len(request.body.encode())
        if size > self.limits.max_message_bytes:
            raise MessageTooLarge(size, self.limits.max_message_bytes)
        result, entries = await _replaying(lambda: self._send(request, token))
        if entries:
            try:
                await self.notifier.publish(sorted(entries), entries)
            except Exception:
                # The message is committed: failing the call now would invite a duplicate retry. Waiters still
                # see it at their next read (at the latest when their long-poll times out).
                log.warning("wake-up publish failed after a committed send", exc_info=True)
            # The message is committed and the wake-ups are out: let the woken readers of this process answer
            # before this send does (one pass of the event loop), so that the delivery, not the acknowledgement,
            # goes out first.
            await anyio.lowlevel.checkpoint()
        return result

    async def _send(
        self, request: SendRequest, token: str | None
    ) -> tuple[SendPreview | SendResult, dict[str, InboxEntry]]:
        now = self._now()
        hashed = self._hash(token)
        fingerprint = (
            _fingerprint("send", request.model_dump(mode="json", exclude={"confirm", "idempotency_key"}))
            if request.idempotency_key is not None
            else ""
        )
        common = request.confirm and request.idempotency_key is None
        if common and request.to is not None:
            sent = await self._send_in_one_step(request, request.to, hashed, now)
            if sent is not None:
                return sent
        async with self.store.transaction() as tx:
            ctx = SendContext(tx=tx, request=request, hashed=hashed, now=now, fingerprint=fingerprint)
            if common and not self.store.serial and request.to is not None:
                return await self._send_direct_unread(ctx, request.to)
            sender = await self._sender(ctx)
            if request.confirm:
                scope = f"agent:{sender.agent_id}"
                replayed = await self._replayed(tx, scope, request.idempotency_key, "send", fingerprint, SendResult)
                if replayed is not None:
                    return replayed, {}
            if request.to is not None:
                return await self._send_direct(ctx, sender, request.to)
            return await self._send_fanout(ctx, sender)

    async def _send_in_one_step(
        self, request: SendRequest, to: str, hashed: str, now: datetime
    ) -> tuple[SendResult, dict[str, InboxEntry]] | None:
        """The common direct send where the store renews the sender and delivers in one step; None when it cannot
        (the transaction then says why, or does it in several)."""
        delivered = await self.store.renew_and_deliver(
            hashed, to, now, message_id=uuid.uuid4().hex, body=request.body, thread_id=request.thread_id
        )
        if delivered is None:
            return None
        entry, followed = delivered
        result = SendResult(
            message_id=entry.message.message_id, recipients=[to], stored=1, followed=[to] if followed else []
        )
        return result, {to: entry}

    async def _sender(self, ctx: SendContext) -> AgentRecord:
        # Where transactions overlap, read without a lock: the sender's row is renewed later, in agent_id order
        # with the recipients', so that two agents messaging each other cannot deadlock.
        if self.store.serial and ctx.request.confirm:
            found = await ctx.tx.renew(ctx.hashed, ctx.now)
        else:
            found = await ctx.tx.find_by_token(ctx.hashed)
        return await self._usable(ctx.tx, ctx.hashed, found, ctx.now)

    async def _send_direct_unread(self, ctx: SendContext, to: str) -> tuple[SendResult, dict[str, InboxEntry]]:
        """The common direct send where transactions overlap: the token's agent_id comes from the store's cache (the
        renewal verifies it), so the sender's renewal and the recipient's sequence are taken in agent_id order
        without a read first."""
        sender_id = await ctx.tx.agent_id_for(ctx.hashed)
        if sender_id is None:
            await self._unknown(ctx.tx, ctx.hashed)
        request = ctx.request
        message = MessageRecord(
            message_id=uuid.uuid4().hex,
            sender=sender_id,
            body=request.body,
            thread_id=request.thread_id,
            sent_at=ctx.now,
        )
        found: AgentRecord | None = None
        seqs: dict[str, int] = {}
        for agent_id in sorted({sender_id, to}):
            if agent_id == sender_id:
                found = await self._usable(ctx.tx, ctx.hashed, await ctx.tx.renew(ctx.hashed, ctx.now), ctx.now)
            if agent_id == to:
                # The recipient's sequence and the message in one step: should the sender's renewal after it
                # fail, the transaction and its wake-up are undone together.
                seqs = await ctx.tx.deliver(message, to, ctx.now)
        assert found is not None and found.agent_id == sender_id
        await self._bumped(ctx, to, seqs)
        followed = await ctx.tx.followed([to], ctx.now)
        result = SendResult(
            message_id=message.message_id, recipients=sorted(seqs), stored=len(seqs), followed=sorted(followed)
        )
        return result, {agent_id: InboxEntry(seq=seq, message=message) for agent_id, seq in seqs.items()}

    async def _send_direct(
        self, ctx: SendContext, sender: AgentRecord, to: str
    ) -> tuple[SendPreview | SendResult, dict[str, InboxEntry]]:
        if not ctx.request.confirm:
            await self._direct_target(ctx.tx, to, ctx.now)
            return SendPreview(recipients=[to]), {}
        seqs: dict[str, int] = {}
        # A serial store renewed the sender when it was read; a message to oneself is delivered like any other.
        for agent_id in sorted({sender.agent_id, to}):
            if agent_id == sender.agent_id and not self.store.serial:
                await self._touch_sender(ctx, sender)
            if agent_id == to:
                seqs = await ctx.tx.bump([agent_id], ctx.now)
        await self._bumped(ctx, to, seqs)
        return await self._store_message(ctx, sender, seqs)

    async def _send_fanout(
        self, ctx: SendContext, sender: AgentRecord
    ) -> tuple[SendPreview | SendResult, dict[str, InboxEntry]]:
        # Fan-out goes to the live agents matching at send time, never back to the sender.
        request = ctx.request
        where = AgentFilter(live_at=ctx.now, role=request.role, repo=request.repo, cap=request.cap)
        matches = await ctx.tx.list_agents(where, after=None, limit=self.limits.max_fanout)
        candidates = [a.agent_id for a in matches if a.agent_id != sender.agent_id]
        if not request.confirm:
            return SendPreview(recipients=candidates), {}
        wait = self._fanout.take(sender.agent_id, ctx.now)
        if wait:
            raise RateLimited(sender.agent_id, self.limits.fanout_per_minute, wait)
        # Every row this transaction writes is locked first, in agent_id order: concurrent fan-outs and agents
        # messaging each other cannot deadlock. Leases are re-checked under the locks.
        await ctx.tx.lock_agents([*candidates, sender.agent_id])
        if not self.store.serial:
            await self._touch_sender(ctx, sender)
        seqs = await ctx.tx.bump(candidates, ctx.now) if candidates else {}
        return await self._store_message(ctx, sender, seqs)

    @staticmethod
    async def _touch_sender(ctx: SendContext, sender: AgentRecord) -> None:
        expires_at = ctx.now + timedelta(seconds=sender.ttl_seconds)
        if not await ctx.tx.touch(sender.agent_id, ctx.hashed, ctx.now, expires_at):
            raise InvalidToken("the token's session ended meanwhile; check in again")

    async def _bumped(self, ctx: SendContext, to: str, seqs: dict[str, int]) -> None:
        """A direct target that was not bumped is missing or expired: say which."""
        if not seqs:
            await self._direct_target(ctx.tx, to, ctx.now)
            raise AssertionError("unreachable: the target is live but was not bumped")

    async def _store_message(
        self, ctx: SendContext, sender: AgentRecord, seqs: dict[str, int]
    ) -> tuple[SendResult, dict[str, InboxEntry]]:
        tx, request, now = ctx.tx, ctx.request, ctx.now
        message_id = uuid.uuid4().hex if seqs else None
        entries: dict[str, InboxEntry] = {}
        if message_id is not None:
            message = MessageRecord(
                message_id=message_id,
                sender=sender.agent_id,
                body=request.body,
                thread_id=request.thread_id,
                sent_at=now,
            )
            await tx.add_message(message, seqs)
            entries = {agent_id: InboxEntry(seq=seq, message=message) for agent_id, seq in seqs.items()}
        followed = await tx.followed(list(seqs), now) if seqs else set()
        result = SendResult(message_id=message_id, recipients=sorted(seqs), stored=len(seqs), followed=sorted(followed))
        await self._remember(
            tx,
            f"agent:{sender.agent_id}",
            request.idempotency_key,
            "send",
            ctx.fingerprint,
            result.model_dump(mode="json"),
            now,
        )
        return result, entries

    @staticmethod
    async def _direct_target(tx: MeshTx, agent_id: str, now: datetime) -> None:
        target = await tx.get_agent(agent_id)
        if target is None:
            raise RecipientNotFound(agent_id)
        if not target.live_at(now):
            raise RecipientExpired(target.agent_id, target.expires_at, target.last_seen_at)

    # ------------------------------------------------------------------ inbox

    async def read_inbox(
        self,
        *,
        token: str | None,
        after: int | None = None,
        limit: int | None = None,
        wait_seconds: float = 0,
        follow: bool = False,
    ) -> InboxPage:
        """Messages after ``after`` (default: the acknowledged cursor). With ``wait_seconds``, a long-poll: answers as
        soon as a message is stored, or empty at the deadline. Reading never moves the stored cursor.

        Presence: only a read without ``wait_seconds`` and ``follow`` is activity (``muster_mesh.presence``).

        Receipts: what a read returns is recorded as read, and as woken too when a long-poll was waiting for it
        (subscribed to its inbox: every long-poll but one whose first read found messages).
        ``follow`` is for a reader that follows the inbox on the agent's behalf (an SSE stream, the follower of
        ``muster mcp``): what it is handed is recorded as woken only, since the agent has not read it yet."""
        limit = min(max(limit or self.limits.default_page, 1), self.limits.max_page)
        wait_seconds = min(max(wait_seconds, 0.0), self.limits.max_wait_seconds)
        deadline = anyio.current_time() + wait_seconds
        hashed = self._hash(token)
        # A reader that polled before is subscribed before its one read; otherwise the read says whose inbox it is.
        agent_id = self._agent_ids.get(hashed) if wait_seconds > 0 else None
        # Presence: a read is the agent's activity; a long-poll is the agent waiting, and a follower's read is not
        # the agent at all. Both renew the lease (``muster_mesh.presence``).
        active = not follow and wait_seconds == 0
        if agent_id is None:
            agent, page = await self._read(hashed, after, limit, read=not follow, active=active)
            if page.messages or wait_seconds == 0:
                return await self._received(agent.agent_id, page, follow=follow, waited=False)
            agent_id = agent.agent_id
        # Subscribed before the read that decides to wait, so a message committed after that read still wakes us.
        async with self.notifier.subscribe(agent_id) as subscription:
            # From here on the reader is a live follower of its inbox: what it is handed is woken as well as read,
            # and a sender is told that it follows.
            await self.store.follow(agent_id, self._now() + timedelta(seconds=deadline - anyio.current_time()))
            _, page = await self._read(hashed, after, limit, read=not follow, active=False)
            while True:
                remaining = deadline - anyio.current_time()
                if page.messages or remaining <= 0:
                    break
                with anyio.move_on_after(remaining):
                    await subscription.wait()
                handed = self._handed(subscription.take(), page.next_cursor, limit)
                # The lease was renewed when this call began; a page handed over with the wake-up needs no read.
                if handed is None:
                    handed = (await self._read(hashed, after, limit, read=False, active=False))[1]
                page = handed
        return await self._received(agent_id, page, follow=follow, waited=True)

    async def _received(self, agent_id: str, page: InboxPage, *, follow: bool, waited: bool) -> InboxPage:
        """Record the receipts the read did not (a plain read records its page as read in the read itself): a
        follower's page as woken, a waiting reader's as woken and read. One step, only when the page holds any."""
        if page.messages and (follow or waited):
            marks = _FOLLOWED if follow else _WOKEN_AND_READ
            first, last = page.messages[0].seq, page.messages[-1].seq
            await self.store.mark_inbox(agent_id, after=first - 1, through=last, now=self._now(), marks=marks)
        return page

    @staticmethod
    def _handed(entries: list[InboxEntry], cursor: int, limit: int) -> InboxPage | None:
        """The page that follows ``cursor`` from entries handed over with wake-ups, if they continue it without a
        gap (otherwise the store is read)."""
        run: list[InboxEntry] = []
        for entry in sorted(entries, key=lambda e: e.seq):
            if entry.seq == cursor + len(run) + 1:
                run.append(entry)
        if not run:
            return None
        shown = run[:limit]
        beyond = any(e.seq > shown[-1].seq for e in entries)
        return InboxPage(messages=[_message(e) for e in shown], next_cursor=shown[-1].seq, has_more=beyond)

    async def _read(
        self, hashed: str, after: int | None, limit: int, *, read: bool, active: bool
    ) -> tuple[AgentRecord, InboxPage]:
        """A page of the inbox; ``read``: its messages are recorded as read (a receipt) by the read itself;
        ``active``: the read is the agent's activity (a follower's renews the lease only)."""
        now = self._now()
        shown = limit if read else 0
        # One step where the store can (the common read); the transaction otherwise, which also says why a read is
        # refused.
        found = await self.store.renew_and_read(hashed, now, after=after, limit=limit + 1, shown=shown, active=active)
        if found is None:
            found = await self._read_in_transaction(hashed, after, limit + 1, now, shown, active)
        agent, entries = found
        self._remember_agent(hashed, agent.agent_id)
        start = agent.read_cursor if after is None else max(after, agent.floor_seq)
        page = entries[:limit]
        return agent, InboxPage(
            messages=[_message(e) for e in page],
            next_cursor=page[-1].seq if page else start,
            has_more=len(entries) > limit,
        )

    async def _read_in_transaction(
        self, hashed: str, after: int | None, limit: int, now: datetime, shown: int, active: bool
    ) -> tuple[AgentRecord, list[InboxEntry]]:
        async with self.store.transaction() as tx:
            agent = await self._usable(tx, hashed, await tx.renew(hashed, now, active=active), now)
            if after is not None and after > agent.last_seq:
                # Refused like an ack beyond it: such a cursor can only be a mistake, and a reader parked there would
                # silently skip every message up to it.
                raise InvalidCursor(after, agent.last_seq, field="after")
            start = agent.read_cursor if after is None else max(after, agent.floor_seq)
            entries = await tx.read_inbox(agent.agent_id, after=start, limit=limit)
            if shown and entries:
                through = entries[: min(shown, len(entries))][-1].seq
                await tx.mark_inbox(agent.agent_id, after=start, through=through, now=now, marks=_READ)
            return agent, entries

    def _remember_agent(self, hashed: str, agent_id: str) -> None:
        if hashed in self._agent_ids:
            return
        if len(self._agent_ids) >= MAX_KNOWN_TOKENS:
            self._agent_ids.clear()
        self._agent_ids[hashed] = agent_id

    async def unread(self, *, token: str | None) -> int:
        """How many messages follow the acknowledged cursor (for wake prompts); renews the lease like any call,
        though not as the agent's activity (the one who asks is whoever would wake it)."""
        now = self._now()
        async with self.store.transaction() as tx:
            hashed = self._hash(token)
            agent = await self._usable(tx, hashed, await tx.renew(hashed, now, active=False), now)
        return agent.last_seq - agent.read_cursor

    async def woken(self, *, token: str | None) -> int:
        """A wake was made for the messages after the acknowledged cursor (a run started or steered for them, a
        pane prompted): their receipts record it as woken, where not recorded yet. Renews the lease as ``unread``
        does; returns how many messages that was."""
        now = self._now()
        async with self.store.transaction() as tx:
            hashed = self._hash(token)
            agent = await self._usable(tx, hashed, await tx.renew(hashed, now, active=False), now)
            if agent.last_seq > agent.read_cursor:
                marks = _FOLLOWED
                await tx.mark_inbox(
                    agent.agent_id, after=agent.read_cursor, through=agent.last_seq, now=now, marks=marks
                )
        return agent.last_seq - agent.read_cursor

    async def whoami(self, *, token: str | None) -> AgentView:
        """The caller's own agent (for calls the mesh answers beside its tools, such as search); renews the lease
        like any call."""
        now = self._now()
        # The renewal is one statement re-checking its own conditions: no transaction around it.
        async with self.store.standalone() as tx:
            agent = await self._caller(tx, token, now, renew=True)
        return view(agent, now)

    async def ack(
        self, request: AckRequest, *, token: str | None, idempotency_key: str | None = None
    ) -> AckPreview | AckResult:
        """Move the stored cursor forward to ``cursor`` (never back); a preview unless ``confirm``."""
        return await _replaying(lambda: self._ack(request, token, idempotency_key))

    async def _ack(self, request: AckRequest, token: str | None, key: str | None) -> AckPreview | AckResult:
        now = self._now()
        fingerprint = _fingerprint("ack", {"cursor": request.cursor})
        async with self.store.transaction() as tx:
            # A confirmed ack renews, which also locks the row: last_seq and read_cursor cannot move under us.
            agent = await self._caller(tx, token, now, renew=request.confirm)
            scope = f"agent:{agent.agent_id}"
            if request.confirm:
                replayed = await self._replayed(tx, scope, key, "ack", fingerprint, AckResult)
                if replayed is not None:
                    return replayed
            if request.cursor > agent.last_seq:
                raise InvalidCursor(request.cursor, agent.last_seq)
            cursor = max(agent.read_cursor, request.cursor)
            if not request.confirm:
                return AckPreview(cursor=cursor)
            if cursor != agent.read_cursor:
                await tx.set_cursor(agent.agent_id, cursor)
                await tx.mark_inbox(agent.agent_id, after=agent.read_cursor, through=cursor, now=now, marks=_ACKED)
            result = AckResult(cursor=cursor, unread=agent.last_seq - cursor)
            await self._remember(tx, scope, key, "ack", fingerprint, result.model_dump(mode="json"), now)
            return result

    # ------------------------------------------------------------------ receipts

    async def receipts(self, message_id: str, *, token: str | None) -> MessageReceipts:
        """What became of a message in each inbox that stored it: for its sender, every recipient's receipt; for a
        recipient, its own. Anyone else is told there is no such message (never that it exists)."""
        now = self._now()
        async with self.store.transaction() as tx:
            caller = await self._caller(tx, token, now, renew=True)
            found = await tx.message_receipts(message_id)
        if found is None:
            raise MessageNotFound(message_id)
        message, rows = found
        if message.sender != caller.agent_id:
            rows = [r for r in rows if r.recipient == caller.agent_id]
            if not rows:
                raise MessageNotFound(message_id)
        return MessageReceipts(
            message_id=message.message_id,
            sender=message.sender,
            thread_id=message.thread_id,
            sent_at=message.sent_at,
            receipts=[
                Receipt(
                    agent_id=r.recipient,
                    stored_at=message.sent_at,
                    woken_at=r.woken_at,
                    read_at=r.read_at,
                    acknowledged_at=r.acked_at,
                )
                for r in rows
            ],
        )

    # ------------------------------------------------------------------ check-out

    async def checkout(
        self, request: CheckoutRequest, *, token: str | None, idempotency_key: str | None = None
    ) -> CheckoutPreview | CheckoutResult:
        """Leave the roster: the lease ends now, the token stops working and the agent_id is free to be claimed."""
        return await _replaying(lambda: self._checkout(request, token, idempotency_key))

    async def _checkout(
        self, request: CheckoutRequest, token: str | None, key: str | None
    ) -> CheckoutPreview | CheckoutResult:
        now = self._now()
        hashed = self._hash(token)
        fingerprint = _fingerprint("checkout", {})
        async with self.store.transaction() as tx:
            if request.confirm and key is not None:
                # Checked before the lease: a retry after a successful check-out must replay, not fail.
                found = await tx.find_by_token(hashed)
                if found is not None:
                    replayed = await self._replayed(
                        tx, f"agent:{found.agent_id}", key, "checkout", fingerprint, CheckoutResult
                    )
                    if replayed is not None:
                        return replayed
            agent = await self._usable(tx, hashed, await tx.find_by_token(hashed), now)
            if not request.confirm:
                return CheckoutPreview(agent=view(agent, now))
            await tx.get_agent(agent.agent_id, for_update=True)
            await tx.end_lease(agent.agent_id, now)
            await tx.end_holdings(agent.agent_id)
            result = CheckoutResult(agent=view(replace(agent, last_seen_at=now, expires_at=now), now))
            await self._remember(
                tx, f"agent:{agent.agent_id}", key, "checkout", fingerprint, result.model_dump(mode="json"), now
            )
            return result

    # ------------------------------------------------------------------ hygiene

    async def sweep(self) -> SweepReport:
        """Delete expired idempotency keys, read messages past retention and agents long expired, in batches (one
        transaction each, so the sweeper never holds the database for long); the agents a batch delivered held-back
        messages to are woken once it commits."""
        now = self._now()
        policy = SweepPolicy(
            now=now,
            read_before=now - self.limits.read_retention,
            agents_expired_before=now - self.limits.expired_agent_retention,
            batch=self.limits.sweep_batch,
        )
        total = SweepReport()
        while True:
            async with self.store.transaction() as tx:
                report = await tx.sweep(policy)
            if report.woken:
                try:
                    await self.notifier.publish(sorted(report.woken))
                except Exception:  # committed: the waiters see the messages at their next read
                    log.warning("wake-up publish failed after a sweep delivered messages", exc_info=True)
            total.add(report)
            if max(report.agents, report.inbox_entries, report.messages, report.idempotency_keys) < policy.batch:
                return total
