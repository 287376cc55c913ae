"""The mesh: roster with presence leases, durable inboxes, wake-ups. All the rules live here, once, for every store."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel

from muster_mesh.errors import (
    IdempotencyConflict,
    IdentityConflict,
    InvalidCursor,
    InvalidToken,
    LeaseExpired,
    MessageTooLarge,
    RecipientExpired,
    RecipientNotFound,
    TokenRequired,
)
from muster_mesh.models import (
    AckRequest,
    AckResult,
    Action,
    Address,
    AgentList,
    AgentView,
    CheckinRequest,
    CheckinResult,
    InboxMessage,
    InboxPage,
    SendRequest,
    SendResult,
)
from muster_mesh.notify import LocalNotifier
from muster_mesh.records import (
    AgentRecord,
    IdempotencyRecord,
    InboxEntry,
    MessageRecord,
    SweepPolicy,
    SweepReport,
)
from muster_mesh.store import MeshStore, MeshTx, Notifier
from muster_mesh.tokens import new_token, token_hash

log = logging.getLogger("muster.mesh")

Clock = Callable[[], datetime]
R = TypeVar("R", bound=BaseModel)

SHORT_LEASE_ROLES = frozenset({"ping", "verification"})
SHORT_TTL_SECONDS = 900
WORKING_TTL_SECONDS = 3600


def utc_now() -> datetime:
    return datetime.now(UTC)


def default_ttl(role: str | None) -> int:
    """The silence a role can afford: short for probes, an hour for working roles."""
    return SHORT_TTL_SECONDS if role in SHORT_LEASE_ROLES else WORKING_TTL_SECONDS


@dataclass(frozen=True)
class MeshLimits:
    max_message_bytes: int = 64 * 1024
    max_wait_seconds: float = 60.0
    default_page: int = 100
    max_page: int = 500
    read_retention: timedelta = timedelta(days=7)
    expired_agent_retention: timedelta = timedelta(days=7)
    idempotency_ttl: timedelta = timedelta(hours=24)


class _Replay(Exception):
    """A concurrent request with the same idempotency key committed first: run again to replay its answer."""


def _view(agent: AgentRecord, now: datetime) -> AgentView:
    return AgentView(
        agent_id=agent.agent_id,
        role=agent.role,
        repo=agent.repo,
        caps=list(agent.caps),
        status=agent.status,
        ttl_seconds=agent.ttl_seconds,
        checked_in_at=agent.checked_in_at,
        last_seen_at=agent.last_seen_at,
        status_changed_at=agent.status_changed_at,
        expires_at=agent.expires_at,
        alive=agent.live_at(now),
        heartbeat_age_seconds=(now - agent.last_seen_at).total_seconds(),
        status_age_seconds=(now - agent.status_changed_at).total_seconds(),
        expires_in_seconds=(agent.expires_at - now).total_seconds(),
    )


def _matches(agent: AgentRecord, to: Address) -> bool:
    return (
        (to.role is None or agent.role == to.role)
        and (to.repo is None or agent.repo == to.repo)
        and (to.cap is None or to.cap in agent.caps)
    )


def _fingerprint(operation: str, payload: dict[str, Any]) -> str:
    canonical = json.dumps({"op": operation, **payload}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


class Mesh:
    """The four tools (check-in, list, send, inbox) plus ack and the sweeper, over any ``MeshStore``."""

    def __init__(
        self,
        store: MeshStore,
        notifier: Notifier | None = None,
        *,
        clock: Clock = utc_now,
        limits: MeshLimits | None = None,
    ) -> None:
        self.store = store
        self.notifier: Notifier = notifier if notifier is not None else LocalNotifier()
        self.clock = clock
        self.limits = limits or MeshLimits()

    # ------------------------------------------------------------------ helpers

    def _now(self) -> datetime:
        now = self.clock()
        if now.tzinfo is None:
            raise ValueError("the mesh clock must return timezone-aware datetimes")
        return now.astimezone(UTC)

    async def _authenticate(self, tx: MeshTx, token: str | None, now: datetime, *, renew: bool) -> AgentRecord:
        """The caller's agent from its token; ``renew`` extends its lease (every acting call does)."""
        if not token:
            raise TokenRequired("this mesh call needs the session token from check-in (Authorization: Bearer …)")
        agent = await tx.find_by_token(token_hash(token))
        if agent is None:
            raise InvalidToken("the token is not the current session of any agent; check in again")
        if not agent.live_at(now):
            raise LeaseExpired(agent.agent_id, agent.expires_at)
        if renew:
            expires_at = now + timedelta(seconds=agent.ttl_seconds)
            await tx.touch_agent(agent.agent_id, now, expires_at)
            agent = replace(agent, last_seen_at=now, expires_at=expires_at)
        return agent

    async def _replayed(
        self, tx: MeshTx, scope: str, key: str | None, operation: str, fingerprint: str, model: type[R]
    ) -> R | None:
        if key is None:
            return None
        # A record stays binding until the sweeper removes it: honouring it a little past expires_at is harmless,
        # while ignoring it would leave its row in the way of a new one with the same key.
        record = await tx.get_idempotency(scope, key)
        if record is None:
            return None
        if record.operation != operation or record.fingerprint != fingerprint:
            raise IdempotencyConflict(key, operation)
        return model.model_validate({**record.result, "replayed": True})

    async def _remember(
        self,
        tx: MeshTx,
        scope: str,
        key: str | None,
        operation: str,
        fingerprint: str,
        result: BaseModel,
        now: datetime,
    ) -> None:
        if key is None:
            return
        record = IdempotencyRecord(
            scope=scope,
            key=key,
            operation=operation,
            fingerprint=fingerprint,
            result=result.model_dump(mode="json"),
            created_at=now,
            expires_at=now + self.limits.idempotency_ttl,
        )
        if not await tx.put_idempotency(record):
            raise _Replay

    # ------------------------------------------------------------------ check-in

    async def checkin(self, request: CheckinRequest, *, token: str | None = None) -> CheckinResult:
        """Create, renew or replace (after expiry) the session of ``agent_id``; a preview unless ``confirm``."""
        # Two tries: a concurrent first check-in or a concurrent same-key retry may win the race once; the second
        # run then sees its row and answers from it (refusal or replay).
        for attempt in (1, 2):
            try:
                return await self._checkin(request, token)
            except _Replay:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _checkin(self, request: CheckinRequest, token: str | None) -> CheckinResult:
        now = self._now()
        presented = token_hash(token) if token else None
        scope = f"checkin:{request.agent_id}"
        payload = request.model_dump(mode="json", exclude={"confirm", "idempotency_key"})
        fingerprint = _fingerprint("checkin", {**payload, "token": presented})
        async with self.store.transaction() as tx:
            if request.confirm:
                replayed = await self._replayed(
                    tx, scope, request.idempotency_key, "checkin", fingerprint, CheckinResult
                )
                if replayed is not None:
                    return replayed
            current = await tx.get_agent(request.agent_id, for_update=True)
            action: Action
            if current is None:
                action = "create"
            elif presented is not None and presented == current.token_hash:
                action = "renew"
            elif current.live_at(now):
                raise IdentityConflict(current.agent_id, current.expires_at)
            else:
                action = "replace"

            role = request.role if request.role is not None else (current.role if current else None)
            ttl = request.ttl_seconds or default_ttl(role)
            status = request.status if request.status is not None else (current.status if current else "")
            status_changed = current.status_changed_at if current and current.status == status else now
            new_token_value = new_token() if action != "renew" else None
            record = AgentRecord(
                agent_id=request.agent_id,
                session_id=current.session_id if current and action == "renew" else uuid.uuid4().hex,
                token_hash=token_hash(new_token_value) if new_token_value else (presented or ""),
                role=role,
                repo=request.repo if request.repo is not None else (current.repo if current else None),
                caps=tuple(request.caps) if request.caps is not None else (current.caps if current else ()),
                status=status,
                ttl_seconds=ttl,
                checked_in_at=current.checked_in_at if current and action == "renew" else now,
                last_seen_at=now,
                status_changed_at=status_changed if action == "renew" else now,
                expires_at=now + timedelta(seconds=ttl),
                last_seq=current.last_seq if current else 0,
                # A new session starts after the backlog: agent_inbox delivers only what arrives after check-in.
                read_cursor=current.read_cursor
                if current and action == "renew"
                else (current.last_seq if current else 0),
                floor_seq=current.floor_seq if current and action == "renew" else (current.last_seq if current else 0),
            )
            result = CheckinResult(
                preview=not request.confirm,
                action=action,
                ttl_seconds=ttl,
                agent=_view(record, now),
                token=new_token_value if request.confirm else None,
            )
            if not request.confirm:
                return result
            if action == "create":
                if not await tx.create_agent(record):
                    raise _Replay
            else:
                await tx.replace_agent(record)
            await self._remember(tx, scope, request.idempotency_key, "checkin", fingerprint, result, now)
            return result

    # ------------------------------------------------------------------ list

    async def list_agents(
        self,
        *,
        token: str | None = None,
        include_expired: bool = False,
        role: str | None = None,
        repo: str | None = None,
        cap: str | None = None,
    ) -> AgentList:
        """The directory: live agents (all when ``include_expired``), with heartbeat and status ages."""
        now = self._now()
        async with self.store.transaction() as tx:
            if token is not None:
                await self._authenticate(tx, token, now, renew=True)
            agents = await tx.list_agents(live_at=None if include_expired else now)
        wanted = [
            a
            for a in agents
            if (role is None or a.role == role) and (repo is None or a.repo == repo) and (cap is None or cap in a.caps)
        ]
        return AgentList(now=now, agents=[_view(a, now) for a in wanted])

    # ------------------------------------------------------------------ send

    async def send(self, request: SendRequest, *, token: str | None) -> SendResult:
        """Store a message in each addressed live inbox; a preview (who would receive it) unless ``confirm``."""
        size = len(request.body.encode())
        if size > self.limits.max_message_bytes:
            raise MessageTooLarge(size, self.limits.max_message_bytes)
        for attempt in (1, 2):
            try:
                result = await self._send(request, token)
            except _Replay:
                if attempt == 2:
                    raise
                continue
            if result.stored and not result.preview and not result.replayed:
                try:
                    await self.notifier.publish(result.recipients)
                except Exception:
                    # The message is committed: failing the call now would invite a duplicate retry. Waiters still
                    # see it at their next read (at the latest when their long-poll times out).
                    log.warning("wake-up publish failed after a committed send", exc_info=True)
            return result
        raise AssertionError("unreachable")

    async def _send(self, request: SendRequest, token: str | None) -> SendResult:
        now = self._now()
        fingerprint = _fingerprint("send", request.model_dump(mode="json", exclude={"confirm", "idempotency_key"}))
        async with self.store.transaction() as tx:
            # Not renewed yet: the sender's row is locked below together with the recipients', in one order.
            sender = await self._authenticate(tx, token, now, renew=False)
            scope = f"agent:{sender.agent_id}"
            if request.confirm:
                replayed = await self._replayed(tx, scope, request.idempotency_key, "send", fingerprint, SendResult)
                if replayed is not None:
                    return replayed
            to = request.to
            if to.agent is not None:
                target = await tx.get_agent(to.agent)
                if target is None:
                    raise RecipientNotFound(to.agent)
                if not target.live_at(now):
                    raise RecipientExpired(target.agent_id, target.expires_at)
                candidates = [to.agent]
            else:
                # Fan-out goes to the live agents matching at send time, never back to the sender.
                live = await tx.list_agents(live_at=now)
                candidates = [a.agent_id for a in live if _matches(a, to) and a.agent_id != sender.agent_id]
            if not request.confirm:
                return SendResult(preview=True, message_id=None, recipients=candidates, stored=0)
            # Every row this transaction writes is locked here, in agent_id order: two agents messaging each other
            # at once cannot deadlock. Leases are re-checked under the locks.
            locked = {a.agent_id: a for a in await tx.lock_agents([*candidates, sender.agent_id])}
            if sender.agent_id not in locked or locked[sender.agent_id].token_hash != sender.token_hash:
                raise InvalidToken("the token is not the current session of any agent; check in again")
            await tx.touch_agent(sender.agent_id, now, now + timedelta(seconds=sender.ttl_seconds))
            recipients = [i for i in candidates if i in locked and locked[i].live_at(now)]
            if to.agent is not None and not recipients:
                gone = locked.get(to.agent)
                if gone is None:
                    raise RecipientNotFound(to.agent)
                raise RecipientExpired(gone.agent_id, gone.expires_at)
            message = MessageRecord(
                message_id=uuid.uuid4().hex,
                sender=sender.agent_id,
                address=to.as_dict(),
                subject=request.subject,
                body=request.body,
                sent_at=now,
            )
            seqs = await tx.add_message(message, recipients)
            result = SendResult(preview=False, message_id=message.message_id, recipients=recipients, stored=len(seqs))
            await self._remember(tx, scope, request.idempotency_key, "send", fingerprint, result, now)
            return result

    # ------------------------------------------------------------------ inbox

    async def inbox(
        self, *, token: str | None, after: int | None = None, limit: int | None = None, wait_seconds: float = 0
    ) -> InboxPage:
        """Messages after ``after`` (default: the acknowledged cursor). With ``wait_seconds``, a long-poll: answers as
        soon as a message arrives, or empty at the deadline. Reading never moves the stored cursor."""
        limit = min(max(limit or self.limits.default_page, 1), self.limits.max_page)
        wait_seconds = min(max(wait_seconds, 0.0), self.limits.max_wait_seconds)
        if wait_seconds == 0:
            return (await self._read(token, after, limit))[1]
        async with self.store.transaction() as tx:
            agent = await self._authenticate(tx, token, self._now(), renew=True)
        deadline = anyio.current_time() + wait_seconds
        # Subscribed before the first read, so a message committed after that read still wakes us.
        async with self.notifier.subscribe(agent.agent_id) as subscription:
            while True:
                _, page = await self._read(token, after, limit)
                remaining = deadline - anyio.current_time()
                if page.messages or remaining <= 0:
                    return page
                with anyio.move_on_after(remaining):
                    await subscription.wait()

    async def _read(self, token: str | None, after: int | None, limit: int) -> tuple[AgentRecord, InboxPage]:
        now = self._now()
        async with self.store.transaction() as tx:
            agent = await self._authenticate(tx, token, now, renew=True)
            start = agent.read_cursor if after is None else max(after, agent.floor_seq)
            entries = await tx.read_inbox(agent.agent_id, after=start, limit=limit + 1)
        shown = entries[:limit]
        return agent, InboxPage(
            messages=[_message(e) for e in shown],
            next_cursor=shown[-1].seq if shown else start,
            has_more=len(entries) > limit,
            cursor=agent.read_cursor,
            unread=agent.last_seq - agent.read_cursor,
        )

    async def ack(self, request: AckRequest, *, token: str | None) -> AckResult:
        """Move the stored cursor forward to ``cursor`` (never back); a preview unless ``confirm``."""
        for attempt in (1, 2):
            try:
                return await self._ack(request, token)
            except _Replay:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _ack(self, request: AckRequest, token: str | None) -> AckResult:
        now = self._now()
        fingerprint = _fingerprint("ack", {"cursor": request.cursor})
        async with self.store.transaction() as tx:
            agent = await self._authenticate(tx, token, now, renew=request.confirm)
            scope = f"agent:{agent.agent_id}"
            if request.confirm:
                replayed = await self._replayed(tx, scope, request.idempotency_key, "ack", fingerprint, AckResult)
                if replayed is not None:
                    return replayed
            agent = await tx.get_agent(agent.agent_id, for_update=True) or agent
            if request.cursor > agent.last_seq:
                raise InvalidCursor(request.cursor, agent.last_seq)
            cursor = max(agent.read_cursor, request.cursor)
            result = AckResult(
                preview=not request.confirm,
                cursor=cursor,
                previous=agent.read_cursor,
                unread=agent.last_seq - cursor,
            )
            if not request.confirm:
                return result
            if cursor != agent.read_cursor:
                await tx.set_cursor(agent.agent_id, cursor)
            await self._remember(tx, scope, request.idempotency_key, "ack", fingerprint, result, now)
            return result

    # ------------------------------------------------------------------ hygiene

    async def sweep(self) -> SweepReport:
        """Delete expired idempotency keys, read messages past retention and agents long expired."""
        now = self._now()
        policy = SweepPolicy(
            now=now,
            read_before=now - self.limits.read_retention,
            agents_expired_before=now - self.limits.expired_agent_retention,
        )
        async with self.store.transaction() as tx:
            return await tx.sweep(policy)


def _message(entry: InboxEntry) -> InboxMessage:
    m = entry.message
    return InboxMessage(
        seq=entry.seq,
        message_id=m.message_id,
        sender=m.sender,
        to=dict(m.address),
        subject=m.subject,
        body=m.body,
        sent_at=m.sent_at,
    )
