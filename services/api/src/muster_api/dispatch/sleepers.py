"""Wake by message: agents with ``wake = true`` stay on the mesh while the service serves them, and a message to one
that is not running starts a run of it — the headless Herdr.

Every instance keeps the agent's session renewed (status ``asleep — wakes on a message`` while no run of it is
active) with the token kept in ``dispatch_sleepers``, and follows its inbox. Arrivals are let settle (a burst is one
arrival); then the wake: nothing when the inbox holds nothing unread; a run in the agent's last workspace that
continues its last conversation (restored from the stored snapshot on whichever worker claims it) with a fixed
prompt that names how many messages wait, never what they say; the same text steered into a live-input run that is
running; otherwise a wake owed to the end of the active run. At most one wake per ``wake_interval``, decided by the
UPDATE that records it, whichever instance asks first: several instances wake an agent once. A wake the interval
refuses is owed as a row (``wake_due_at``) that any instance takes when due.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Protocol

import anyio
from anyio.abc import TaskGroup
from sqlalchemy import and_, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from muster_api.dispatch.config import AgentDefinition
from muster_api.dispatch.models import ActiveRun, RunIn
from muster_api.dispatch.pools import Pool, PoolState
from muster_api.dispatch.runs import create_run
from muster_api.dispatch.tables import runs, sleepers
from muster_mesh import IdentityConflict, Mesh, MeshError, Subscription
from muster_mesh.models import CheckinRecord, CheckinRequest, WakeAnswer
from muster_mesh.tasks import Tasks


class SleeperState(PoolState, Protocol):
    """What a sleeper needs of the capability (``component.DispatchState`` is one)."""

    @property
    def mesh(self) -> Mesh | None: ...
    @property
    def tasks(self) -> Tasks | None: ...
    @property
    def sleepers(self) -> dict[str, Sleeper]: ...


log = logging.getLogger("muster.dispatch.sleepers")

ASLEEP = "asleep — wakes on a message"
SETTLE_SECONDS = 0.25
SETTLE_LIMIT = 3.0
SESSION_TTL = 60  # as a run's presence: an agent whose every instance died leaves the roster within a minute


def wake_prompt(count: int) -> str:
    """The fixed text of a wake: how many messages, never their bodies."""
    noun = "message" if count == 1 else "messages"
    return f"[auto-wake] {count} new mesh {noun}; call agent_inbox"


class SleeperStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def token(self, agent_id: str) -> str | None:
        async with self.engine.connect() as conn:
            found = await conn.scalar(select(sleepers.c.token).where(sleepers.c.agent_id == agent_id))
        return str(found) if found else None

    async def keep(self, agent_id: str, agent: str, token: str) -> None:
        async with self.engine.begin() as conn:
            changed = await conn.execute(
                update(sleepers).where(sleepers.c.agent_id == agent_id).values(agent=agent, token=token)
            )
            if changed.rowcount == 0:
                await conn.execute(sleepers.insert().values(agent_id=agent_id, agent=agent, token=token, pending=False))

    async def last_wake(self, agent_id: str) -> datetime | None:
        async with self.engine.connect() as conn:
            found: datetime | None = await conn.scalar(
                select(sleepers.c.last_wake_at).where(sleepers.c.agent_id == agent_id)
            )
        return found

    async def gate(self, agent_id: str, now: datetime, interval: float) -> bool:
        """Record a wake now, unless one was recorded less than ``interval`` seconds ago (then False)."""
        since = now - timedelta(seconds=interval)
        statement = (
            update(sleepers)
            .where(
                and_(
                    sleepers.c.agent_id == agent_id,
                    or_(sleepers.c.last_wake_at.is_(None), sleepers.c.last_wake_at <= since),
                )
            )
            .values(last_wake_at=now, pending=False, wake_due_at=None)
        )
        async with self.engine.begin() as conn:
            return (await conn.execute(statement)).rowcount == 1

    async def defer(self, agent_id: str, due: datetime) -> None:
        """A wake owed at ``due`` (the earliest kept when one is owed already): a row, made by whichever instance is
        alive then."""
        statement = (
            update(sleepers)
            .where(
                and_(
                    sleepers.c.agent_id == agent_id,
                    or_(sleepers.c.wake_due_at.is_(None), sleepers.c.wake_due_at > due),
                )
            )
            .values(wake_due_at=due)
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)

    async def take_due(self, agent_id: str, now: datetime) -> bool:
        """The wake owed by ``now``, taken (by one instance: the UPDATE decides)."""
        statement = (
            update(sleepers)
            .where(and_(sleepers.c.agent_id == agent_id, sleepers.c.wake_due_at <= now))
            .values(wake_due_at=None)
        )
        async with self.engine.begin() as conn:
            return (await conn.execute(statement)).rowcount == 1

    async def owe(self, agent_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(update(sleepers).where(sleepers.c.agent_id == agent_id).values(pending=True))

    async def take_owed(self, agent_id: str) -> bool:
        statement = (
            update(sleepers).where(and_(sleepers.c.agent_id == agent_id, sleepers.c.pending)).values(pending=False)
        )
        async with self.engine.begin() as conn:
            return (await conn.execute(statement)).rowcount == 1


async def _last_run(state: SleeperState, agent: str) -> tuple[str, str | None] | None:
    """(workspace, conversation) of the agent's newest run, and whether one is active (then its id)."""
    query = select(runs.c.workspace, runs.c.conversation).where(runs.c.agent == agent).order_by(runs.c.id.desc())
    async with state.store.reads.connect() as conn:
        row = (await conn.execute(query.limit(1))).first()
    return (str(row[0]), row[1]) if row is not None else None


async def _active_run(state: SleeperState, agent: str) -> ActiveRun | None:
    """The agent's queued or running run, if any (the roster's runtime column reads the same)."""
    return (await state.store.active_runs([agent])).get(agent)


class Sleeper:
    """One ``wake = true`` agent, as this instance serves it."""

    def __init__(self, state: SleeperState, definition: AgentDefinition, store: SleeperStore) -> None:
        agent_id = definition.mesh_agent_id()
        membership = definition.membership
        assert agent_id is not None and membership is not None and state.mesh is not None
        self.state = state
        self.mesh = state.mesh
        self.definition = definition
        self.agent_id = agent_id
        self.store = store
        self.interval = definition.wake_interval
        self._group: TaskGroup | None = None
        self._waiting = False
        self.request = CheckinRequest(
            agent_id=agent_id,
            role=membership.role,
            repo=membership.repo,
            caps=list(membership.caps),
            ttl_seconds=SESSION_TTL,
            confirm=True,
        )

    @property
    def idle_status(self) -> str:
        """The status while no run of the agent is active."""
        serve = self.definition.serves
        if self.definition.wakes or serve is None:
            return ASLEEP
        return f"serving {serve.role} tasks"

    async def _token(self) -> str | None:
        return await self.store.token(self.agent_id)

    async def run(self) -> None:
        async with anyio.create_task_group() as group:
            self._group = group
            group.start_soon(self._keep_session)
            if self.definition.serves is not None and self.state.tasks is not None:
                pool = Pool(self.state, self.definition, self.agent_id, self._token, self.state.tasks)
                group.start_soon(pool.run)
            if self.definition.wakes:
                await self._follow()

    async def _later(self, now: datetime) -> None:
        """Wake again once the interval since the last wake has passed (messages that came too soon after a wake are
        not lost, nor kept waiting longer than the interval asks): the owed wake is a row, taken when due by whichever
        instance looks first (each looks at every renewal, and this one also at the due time), so the death of this
        process loses nothing."""
        last = await self.store.last_wake(self.agent_id)
        due = max(last or now, now - timedelta(seconds=self.interval)) + timedelta(seconds=self.interval)
        await self.store.defer(self.agent_id, due)
        log.info("%s: woken less than %gs ago; the next wake is due at %s", self.agent_id, self.interval, due)
        if self._waiting or self._group is None:
            return
        self._waiting = True

        async def at_due() -> None:
            await anyio.sleep(max((due - now).total_seconds(), 0.0))
            self._waiting = False
            try:
                await self.owed_wakes()
            except Exception:
                log.exception("%s: a deferred wake failed", self.agent_id)

        self._group.start_soon(at_due)

    async def owed_wakes(self) -> None:
        """The wakes owed now: one due after its interval, or one owed to the end of a run no longer active (its
        worker died before it could make it)."""
        due = await self.store.take_due(self.agent_id, self.state.now())
        orphaned = not due and await _active_run(self.state, self.definition.name) is None
        if due or (orphaned and await self.store.take_owed(self.agent_id)):
            await self.wake()

    # ------------------------------------------------------------ the session

    async def _keep_session(self) -> None:
        while True:
            try:
                await self.renew()
                if self.definition.wakes:
                    await self.owed_wakes()
            except Exception:  # a database hiccup: the next renewal tries again
                log.exception("%s: keeping the sleeping agent on the mesh failed", self.agent_id)
            await anyio.sleep(self.state.settings.renew_every)

    async def renew(self) -> str | None:
        """The session renewed (status ``ASLEEP`` unless a run of the agent is active), or made; its token."""
        active = await _active_run(self.state, self.definition.name)
        request = self.request.model_copy(update={"status": None if active else self.idle_status})
        token = await self.store.token(self.agent_id)
        if token is not None:
            try:
                renewed = await self.mesh.checkin(request, token=token)
            except MeshError:
                pass  # the session ended (a lapse, a check-out): make a new one
            else:
                # A lapsed session is claimed anew under a new token (every instance was down past the lease).
                assert isinstance(renewed, CheckinRecord)
                if renewed.token is not None and renewed.token != token:
                    await self.store.keep(self.agent_id, self.definition.name, renewed.token)
                    return renewed.token
                return token
        try:
            answer = await self.mesh.checkin(request.model_copy(update={"status": self.idle_status}))
        except IdentityConflict:
            return None  # another instance made it a moment ago, or someone else holds the name: next round
        assert isinstance(answer, CheckinRecord) and answer.token is not None
        await self.store.keep(self.agent_id, self.definition.name, answer.token)
        return answer.token

    # ------------------------------------------------------------ the inbox

    async def _follow(self) -> None:
        while True:
            try:
                async with self.mesh.notifier.subscribe(self.agent_id) as subscription:
                    while True:
                        await subscription.wait()
                        await self._settle(subscription)
                        subscription.take()
                        await self.wake()
            except Exception:
                log.exception("%s: following the inbox failed; following again", self.agent_id)
                await anyio.sleep(self.state.settings.renew_every)

    @staticmethod
    async def _settle(subscription: Subscription) -> None:
        """Until no message came for ``SETTLE_SECONDS``, at most ``SETTLE_LIMIT`` in all: a burst is one arrival,
        and a steady stream still wakes."""
        with anyio.move_on_after(SETTLE_LIMIT):
            while True:
                with anyio.move_on_after(SETTLE_SECONDS) as quiet:
                    await subscription.wait()
                if quiet.cancelled_caught:
                    return

    async def wake(self) -> str:
        """What the messages waiting do: ``scheduled`` (a run, now or at the active run's end), ``steered`` (the
        live run is told), or ``none`` (nothing unread, or woken less than an interval ago)."""
        token = await self.store.token(self.agent_id)
        if token is None:
            return "none"
        unread = await self.mesh.unread(token=token)
        if unread == 0:
            return "none"
        active = await _active_run(self.state, self.definition.name)
        now = self.state.now()
        if active is not None:
            if not active.steerable:
                await self.store.owe(self.agent_id)
                return "scheduled"
            if not await self.store.gate(self.agent_id, now, self.interval):
                await self._later(now)
                return "none"
            await self.state.store.add_control(active.id, "steer", wake_prompt(unread), now)
            await self._woken(token)
            return "steered"
        if not await self.store.gate(self.agent_id, now, self.interval):
            await self._later(now)
            return "none"
        if not await self._start(unread):
            return "none"
        await self._woken(token)
        return "scheduled"

    async def _woken(self, token: str) -> None:
        """The receipts of the messages the wake was made for say so."""
        try:
            await self.mesh.woken(token=token)
        except MeshError as exc:  # receipts only: the wake itself was made
            log.warning("%s: the wake was not recorded in the receipts: %s", self.agent_id, exc)

    async def _start(self, unread: int) -> bool:
        last = await _last_run(self.state, self.definition.name)
        workspace, conversation = last if last is not None else (self.agent_id, None)
        body: dict[str, object] = {"agent": self.definition.name, "prompt": wake_prompt(unread)}
        body["workspace"] = workspace
        if conversation:
            body["continuation"] = {"conversation": conversation}
        try:
            run = await create_run(self.state, RunIn.model_validate(body))
        except Exception as exc:  # a busy workspace, a broken agent: logged, the messages stay in the inbox
            log.warning("%s: the wake found no way to run: %s", self.agent_id, exc)
            return False
        log.info("%s woken by %d message(s): run %s", self.agent_id, unread, run.id)
        return True

    async def foresee(self) -> WakeAnswer:
        """What a message arriving now will do (the sender's answer; the wake itself follows once arrivals settle)."""
        if await self.store.token(self.agent_id) is None:
            return "none"
        active = await _active_run(self.state, self.definition.name)
        if active is not None and active.steerable:
            return "steered"
        return "scheduled"

    async def after_run(self) -> None:
        """A run of the agent ended: the wake owed to it, if messages came meanwhile."""
        if await self.store.take_owed(self.agent_id):
            await self.wake()


async def foresee_wake(state: SleeperState, agent_id: str) -> WakeAnswer | None:
    """The ``wake`` of a send's answer: None unless ``agent_id`` is an agent this service wakes."""
    for sleeper in state.sleepers.values():
        if sleeper.agent_id == agent_id:
            return await sleeper.foresee()
    return None


async def serve_sleepers(state: SleeperState) -> None:
    """Every ``wake = true`` or ``serve_tasks`` agent of the config, kept (and followed, or serving) until
    cancelled."""
    if state.mesh is None:
        return
    store = SleeperStore(state.runtime.engine)
    async with anyio.create_task_group() as group:
        for definition in state.agents.definitions.values():
            if definition.kept and definition.membership is not None:
                sleeper = Sleeper(state, definition, store)
                state.sleepers[definition.name] = sleeper
                group.start_soon(sleeper.run)
