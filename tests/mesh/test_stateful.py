"""The mesh's rules as a state machine: random sequences of check-in, takeover, send (direct and fan-out), read, ack,
check-out and clock advances, each answer compared with a small model of what the rules say. On the in-memory store
and on the SQL store (SQLite and PostgreSQL), bounded in examples so that the suite stays fast."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from muster_api.db.dialect import dialect_of
from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.mesh.component import make_store
from muster_api.settings import Settings
from muster_mesh import (
    AckRequest,
    AckResult,
    CheckinRecord,
    CheckinRequest,
    CheckoutRequest,
    FakeClock,
    IdentityConflict,
    InMemoryMeshStore,
    InvalidCursor,
    InvalidToken,
    LeaseExpired,
    Mesh,
    MeshError,
    MeshLimits,
    MeshStore,
    RecipientExpired,
    RecipientNotFound,
    SendRequest,
    SendResult,
    Superseded,
)
from muster_mesh.records import DirectoryQuery

T = TypeVar("T")
NAMES = ("a", "b")
ROLES = ("qa", "dev")
TTLS = (60, 600)
STEPS = 25
EXAMPLES = 15


@dataclass
class Agent:
    """What the model knows of one agent_id."""

    token: str
    role: str
    ttl: int
    expires_at: datetime
    last_seq: int = 0
    read_cursor: int = 0
    floor: int = 0
    inbox: list[tuple[int, str, str]] = field(default_factory=list)  # (seq, sender, body)
    # Tokens this agent_id held before: "superseded" (taken over) or "lapsed" (its session expired, then reclaimed).
    old_tokens: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Env:
    run: Callable[[Coroutine[Any, Any, Any]], Any]
    store: Callable[[], MeshStore]
    clock: FakeClock


class MeshRules(RuleBasedStateMachine):
    env: ClassVar[Env]

    def __init__(self) -> None:
        super().__init__()
        # Fresh agent ids per example: the SQL database is shared by every example of a run.
        self.prefix = uuid.uuid4().hex[:8]
        self.mesh = Mesh(self.env.store(), clock=self.env.clock, limits=MeshLimits(fanout_per_minute=1_000_000))
        self.model: dict[str, Agent] = {}
        self.bodies = 0

    # -- helpers ---------------------------------------------------------------------------------------------

    def id(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def now(self) -> datetime:
        return self.env.clock()

    def live(self, name: str) -> bool:
        agent = self.model.get(name)
        return agent is not None and agent.expires_at > self.now()

    def renew(self, name: str) -> None:
        agent = self.model[name]
        agent.expires_at = self.now() + timedelta(seconds=agent.ttl)

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T | MeshError:
        try:
            result: T = self.env.run(coroutine)
        except MeshError as exc:
            return exc
        return result

    def refused_caller(self, name: str, outcome: object) -> bool:
        """A call by ``name`` that the model says must be refused for its lease: check how, say whether."""
        if self.live(name):
            return False
        assert isinstance(outcome, LeaseExpired), outcome
        return True

    # -- rules -----------------------------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES), role=st.sampled_from(ROLES), ttl=st.sampled_from(TTLS))
    def check_in(self, name: str, role: str, ttl: int) -> None:
        request = CheckinRequest(agent_id=self.id(name), role=role, ttl_seconds=ttl, confirm=True)
        outcome = self.call(self.mesh.checkin(request))
        if self.live(name):
            assert isinstance(outcome, IdentityConflict), outcome
            return
        assert isinstance(outcome, CheckinRecord) and outcome.token, outcome
        previous = self.model.get(name)
        last = previous.last_seq if previous else 0
        # A new session starts after the backlog: a fresh, empty inbox.
        self.model[name] = Agent(outcome.token, role, ttl, self.now() + timedelta(seconds=ttl), last, last, last)

    @rule(name=st.sampled_from(NAMES))
    def renew_check_in(self, name: str) -> None:
        agent = self.model.get(name)
        if agent is None:
            return
        request = CheckinRequest(agent_id=self.id(name), status="renewing", confirm=True)
        outcome = self.call(self.mesh.checkin(request, token=agent.token))
        assert isinstance(outcome, CheckinRecord), outcome
        if self.live(name):
            assert outcome.token is None
            self.renew(name)
        else:
            # Expired: claimed anew, as a new session (the token presented was the lapsed one).
            assert outcome.token and outcome.token != agent.token
            agent.old_tokens.append((agent.token, "lapsed"))
            agent.token, agent.read_cursor, agent.floor = outcome.token, agent.last_seq, agent.last_seq
            agent.inbox = []
            # A new session keeps nothing of the old one: no role, so the default working lease.
            agent.role, agent.ttl = "", 3600
            agent.expires_at = self.now() + timedelta(seconds=agent.ttl)

    @rule(name=st.sampled_from(NAMES))
    def take_over(self, name: str) -> None:
        if not self.live(name):
            return
        agent = self.model[name]
        request = CheckinRequest(agent_id=self.id(name), takeover=True, confirm=True)
        outcome = self.call(self.mesh.checkin(request))
        assert isinstance(outcome, CheckinRecord) and outcome.token and outcome.token != agent.token, outcome
        agent.old_tokens.append((agent.token, "superseded"))
        agent.token = outcome.token
        self.renew(name)

    @rule(sender=st.sampled_from(NAMES), to=st.sampled_from(NAMES))
    def send_direct(self, sender: str, to: str) -> None:
        if sender not in self.model:
            return
        self.bodies += 1
        body = f"m{self.bodies}\n\twith a tab"
        request = SendRequest(to=self.id(to), body=body, confirm=True)
        outcome = self.call(self.mesh.send(request, token=self.model[sender].token))
        if self.refused_caller(sender, outcome):
            return
        if to not in self.model:
            assert isinstance(outcome, RecipientNotFound), outcome
            return
        if not self.live(to):
            assert isinstance(outcome, RecipientExpired), outcome
            return
        assert isinstance(outcome, SendResult) and outcome.recipients == [self.id(to)], outcome
        self.deliver(to, sender, body)
        self.renew(sender)

    @rule(sender=st.sampled_from(NAMES), role=st.sampled_from(ROLES))
    def send_fan_out(self, sender: str, role: str) -> None:
        if sender not in self.model:
            return
        self.bodies += 1
        body = f"m{self.bodies} to {role}"
        request = SendRequest(role=role, body=body, confirm=True)
        outcome = self.call(self.mesh.send(request, token=self.model[sender].token))
        if self.refused_caller(sender, outcome):
            return
        # Live agents of this example with the role, never the sender (agents of other examples have other roles'
        # ids but may share the role: only this example's are compared).
        expected = sorted(n for n, a in self.model.items() if a.role == role and n != sender and self.live(n))
        assert isinstance(outcome, SendResult), outcome
        mine = sorted(r.removeprefix(f"{self.prefix}-") for r in outcome.recipients if r.startswith(self.prefix))
        assert mine == expected, (mine, expected)
        for name in expected:
            self.deliver(name, sender, body)
        self.renew(sender)

    def deliver(self, to: str, sender: str, body: str) -> None:
        agent = self.model[to]
        agent.last_seq += 1
        agent.inbox.append((agent.last_seq, self.id(sender), body))

    @rule(name=st.sampled_from(NAMES), after=st.one_of(st.none(), st.integers(0, 12)))
    def read(self, name: str, after: int | None) -> None:
        agent = self.model.get(name)
        if agent is None:
            return
        outcome = self.call(self.mesh.read_inbox(token=agent.token, after=after, limit=500))
        if self.refused_caller(name, outcome):
            return
        if after is not None and after > agent.last_seq:
            assert isinstance(outcome, InvalidCursor), outcome
            return
        assert not isinstance(outcome, MeshError), outcome
        start = agent.read_cursor if after is None else max(after, agent.floor)
        got = [(m.seq, m.sender, m.body) for m in outcome.messages]
        assert got == [m for m in agent.inbox if m[0] > start], (got, agent.inbox, start)
        assert outcome.next_cursor == (got[-1][0] if got else start)
        self.renew(name)

    @rule(name=st.sampled_from(NAMES), cursor=st.integers(0, 12))
    def ack(self, name: str, cursor: int) -> None:
        agent = self.model.get(name)
        if agent is None:
            return
        outcome = self.call(self.mesh.ack(AckRequest(cursor=cursor, confirm=True), token=agent.token))
        if self.refused_caller(name, outcome):
            return
        if cursor > agent.last_seq:
            assert isinstance(outcome, InvalidCursor), outcome
            return
        agent.read_cursor = max(agent.read_cursor, cursor)
        assert isinstance(outcome, AckResult), outcome
        assert (outcome.cursor, outcome.unread) == (agent.read_cursor, agent.last_seq - agent.read_cursor)
        self.renew(name)

    @rule(name=st.sampled_from(NAMES))
    def check_out(self, name: str) -> None:
        agent = self.model.get(name)
        if agent is None:
            return
        outcome = self.call(self.mesh.checkout(CheckoutRequest(confirm=True), token=agent.token))
        if self.refused_caller(name, outcome):
            return
        assert not isinstance(outcome, MeshError), outcome
        agent.expires_at = self.now()

    @rule(seconds=st.sampled_from((1, 30, 61, 700)))
    def advance(self, seconds: int) -> None:
        self.env.clock.advance(seconds)

    @rule(name=st.sampled_from(NAMES))
    def old_token_refused(self, name: str) -> None:
        agent = self.model.get(name)
        if agent is None or not agent.old_tokens:
            return
        token, why = agent.old_tokens[-1]
        outcome = self.call(self.mesh.read_inbox(token=token))
        if why == "superseded":
            assert isinstance(outcome, Superseded), outcome
        else:
            assert type(outcome) is InvalidToken, outcome

    # -- invariants ------------------------------------------------------------------------------------------

    @invariant()
    def roster_is_the_live_agents(self) -> None:
        listing = self.env.run(self.mesh.list_agents(DirectoryQuery(limit=500)))
        mine = sorted(a.agent_id for a in listing.agents if a.agent_id.startswith(f"{self.prefix}-"))
        assert mine == sorted(self.id(n) for n in self.model if self.live(n))


def machine(env: Env) -> type[RuleBasedStateMachine]:
    return type("MeshRulesRun", (MeshRules,), {"env": env})


def run_machine(env: Env) -> None:
    run_state_machine_as_test(
        machine(env),
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.close()


def test_mesh_rules_on_the_memory_store(loop: asyncio.AbstractEventLoop) -> None:
    run_machine(Env(run=loop.run_until_complete, store=InMemoryMeshStore, clock=FakeClock()))


def test_mesh_rules_on_the_sql_store(db_url: str, loop: asyncio.AbstractEventLoop) -> None:
    engine = create_engine(Settings(database_url=db_url).database_url)
    loop.run_until_complete(upgrade(engine))
    store = make_store(engine, dialect_of(engine))
    try:
        run_machine(Env(run=loop.run_until_complete, store=lambda: store, clock=FakeClock()))
    finally:
        loop.run_until_complete(store.aclose())
        loop.run_until_complete(engine.dispose())
