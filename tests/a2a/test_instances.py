"""Several service instances on one database: a call in flight is followed by exactly one of them (the holder of its
lease), taken over when that holder dies, and a reload closes the agent sets nothing runs on any more.

Instances are told apart at the remote agent by an ``X-Instance`` header (each has its own config file), and the
scripted a2a-sdk server counts the GetTask requests it receives per task and per instance. Lease expiries come from
a clock the test moves; the renewal and scan periods (real seconds) are shortened so that the loops run meanwhile.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.server.request_handlers.response_helpers import agent_card_to_dict

from muster_api.a2a.component import A2AState
from muster_api.app import create_app
from muster_api.db.engine import create_engine
from muster_api.runtime import Runtime
from muster_api.settings import A2ASettings, Settings
from tests.a2a.peers import Peer, a2a_peer, raw_peer
from tests.a2a.test_service import wait_for, write_config
from tests.support.app import running

# Slow: several service instances and their lease loops.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

QUICK_LOOPS = A2ASettings(renew_seconds=0.05, scan_seconds=0.05)
# Renewals and scans only when the test asks for them (deterministic races).
NO_LOOPS = A2ASettings(renew_seconds=3600.0, scan_seconds=3600.0)
LEASE = QUICK_LOOPS.lease
assert NO_LOOPS.lease == LEASE


class Clock:
    """The injected clock: real time at the start, then moved only by the test."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.at

    def advance(self, delta: timedelta) -> None:
        self.at += delta


@asynccontextmanager
async def instance(
    db_url: str,
    tmp_path: Path,
    name: str,
    peer: Peer,
    clock: Clock,
    *,
    card: str | None = None,
    a2a: A2ASettings | None = None,
) -> AsyncIterator[tuple[httpx.AsyncClient, A2AState]]:
    """One service instance on ``db_url``; its requests to the agent carry ``X-Instance: <name>``."""
    config = write_config(
        tmp_path / f"{name}.toml",
        {
            "shared": {
                "card": card or peer.base,
                "pollEvery": 20,
                "headers": {"X-Instance": name},
                # A card served by a front names the agent's own port: let the tag reach it.
                "allowHosts": ["127.0.0.1"],
            }
        },
    )
    settings = Settings(database_url=db_url, config=config, a2a=a2a or A2ASettings())
    app = create_app(runtime=Runtime(settings=settings, engine=create_engine(settings.database_url), now=clock))
    async with running(app) as client:
        yield client, app.state.a2a


async def until(condition: Callable[[], Awaitable[bool] | bool], seconds: float = 20.0) -> None:
    with anyio.fail_after(seconds):
        while True:
            outcome = condition()
            if outcome if isinstance(outcome, bool) else await outcome:
                return
            await anyio.sleep(0.02)


def crash(state: A2AState) -> None:
    """A process that dies runs no shutdown: it does not hand its calls over, their leases have to lapse."""

    async def nothing() -> None:
        return None

    state.hand_over = nothing  # type: ignore[method-assign]


async def test_one_instance_follows_and_another_takes_over_when_it_dies(db_url: str, tmp_path: Path) -> None:
    clock = Clock()
    async with a2a_peer("Shared") as peer:
        async with instance(db_url, tmp_path, "b", peer, clock, a2a=QUICK_LOOPS) as (b_client, b):
            async with instance(db_url, tmp_path, "a", peer, clock, a2a=QUICK_LOOPS) as (a_client, a):
                started = await a_client.post("/a2a/tools/Shared_echo/call", json={"task": "slow 2", "wait": False})
                call_id = started.json()["id"]
                handle = await wait_for(a_client, call_id, until="handle")
                task_id = handle["task_id"]
                assert handle["owner"] == a.owner
                # Both instances renew and scan every 50 ms meanwhile; only the holder polls.
                await until(lambda: peer.get_tasks(task_id, x_instance="a") >= 5)
                assert await b.resume_in_flight() == 0, "a call held by a live instance is not claimed"
                assert peer.get_tasks(task_id, x_instance="b") == 0
                assert call_id in a.following and call_id not in b.following
                crash(a)
            by_a = peer.get_tasks(task_id, x_instance="a")
            stored = (await b_client.get(f"/a2a/calls/{call_id}")).json()
            assert stored["result"] is None and stored["owner"] == a.owner, "the dead holder's lease still runs"
            for _ in range(3):  # scans of b: the lease has not lapsed on the clock
                assert await b.resume_in_flight() == 0
            assert peer.get_tasks(task_id, x_instance="b") == 0 and call_id not in b.following

            clock.advance(LEASE + timedelta(seconds=1))
            done = await wait_for(b_client, call_id, until="done")
        assert (done["state"], done["result"]["text"], done["result"]["is_error"]) == ("completed", "done", False)
        assert done["task_id"] == task_id and (done["owner"], done["lease_expires_at"]) == (None, None)
        assert peer.get_tasks(task_id, x_instance="b") >= 1, "b took the call over by GetTask"
        assert peer.get_tasks(task_id, x_instance="a") == by_a, "a stopped polling when it stopped"
        assert peer.executor.started.count(task_id) == 1, "resumed, never sent again"


async def test_exactly_one_of_two_racing_instances_claims_a_lapsed_call(db_url: str, tmp_path: Path) -> None:
    clock = Clock()
    async with a2a_peer("Shared") as peer:
        async with instance(db_url, tmp_path, "x", peer, clock, a2a=NO_LOOPS) as (x_client, x):
            started = await x_client.post("/a2a/tools/Shared_echo/call", json={"task": "slow 1.5", "wait": False})
            call_id = started.json()["id"]
            task_id = (await wait_for(x_client, call_id, until="handle"))["task_id"]
            crash(x)
        async with (
            instance(db_url, tmp_path, "a", peer, clock, a2a=NO_LOOPS) as (a_client, a),
            instance(db_url, tmp_path, "b", peer, clock, a2a=NO_LOOPS) as (_, b),
        ):
            assert (a.following, b.following) == (set(), set()), "start-up leaves a live lease alone"
            clock.advance(LEASE + timedelta(seconds=1))
            claimed: dict[str, int] = {}

            async def scan(name: str, state: A2AState) -> None:
                claimed[name] = await state.resume_in_flight()

            async with anyio.create_task_group() as group:
                group.start_soon(scan, "a", a)
                group.start_soon(scan, "b", b)
            assert sorted(claimed.values()) == [0, 1], f"claimed by both or neither: {claimed}"
            winner = "a" if claimed["a"] else "b"
            done = await wait_for(a_client, call_id, until="done")
            assert done["result"]["text"] == "done"
            loser = "b" if winner == "a" else "a"
            assert peer.get_tasks(task_id, x_instance=winner) >= 1
            assert peer.get_tasks(task_id, x_instance=loser) == 0, "only the claimer follows the call"


async def test_a_holder_whose_call_was_taken_over_stops_following(db_url: str, tmp_path: Path) -> None:
    clock = Clock()
    async with (
        a2a_peer("Shared") as peer,
        instance(db_url, tmp_path, "a", peer, clock, a2a=NO_LOOPS) as (a_client, a),
        instance(db_url, tmp_path, "b", peer, clock, a2a=NO_LOOPS) as (b_client, b),
    ):
        answers: list[httpx.Response] = []

        async def wait_on_a() -> None:
            answers.append(await a_client.post("/a2a/tools/Shared_echo/call", json={"task": "slow 1.5"}))

        async with anyio.create_task_group() as group:
            group.start_soon(wait_on_a)
            await until(lambda: len(a.following) == 1)
            [call_id] = a.following
            handle = await wait_for(a_client, call_id, until="handle")
            # a stalls (no renewal) past its lease: b takes the call over.
            clock.advance(LEASE + timedelta(seconds=1))
            assert await b.resume_in_flight() == 1
            await a.renew()  # a learns it lost the call
            await until(lambda: call_id not in a.following)
            by_a = peer.get_tasks(handle["task_id"], x_instance="a")
        [answer] = answers
        assert answer.status_code == 409, answer.text
        assert answer.json()["call_id"] == call_id and "another instance" in answer.json()["detail"]
        done = await wait_for(b_client, call_id, until="done")
        assert done["result"]["text"] == "done" and done["owner"] is None
        assert peer.get_tasks(handle["task_id"], x_instance="a") == by_a
        assert peer.get_tasks(handle["task_id"], x_instance="b") >= 1


async def test_a_call_waiting_for_its_agent_stays_held_and_resumes_on_reload(db_url: str, tmp_path: Path) -> None:
    clock = Clock()
    card = "/.well-known/agent-card.json"
    async with a2a_peer("Shared") as peer, raw_peer() as front:
        front.json(card, agent_card_to_dict(peer.card))
        async with instance(db_url, tmp_path, "x", peer, clock, card=front.base, a2a=NO_LOOPS) as (x_client, _):
            started = await x_client.post("/a2a/tools/Shared_echo/call", json={"task": "slow 1", "wait": False})
            call_id = started.json()["id"]
            task_id = (await wait_for(x_client, call_id, until="handle"))["task_id"]
        # x stopped cleanly and handed the call over; the agent's card is down when a and b start.
        front.text(card, "down for maintenance", status=503)
        async with (
            instance(db_url, tmp_path, "a", peer, clock, card=front.base, a2a=NO_LOOPS) as (a_client, a),
            instance(db_url, tmp_path, "b", peer, clock, card=front.base, a2a=NO_LOOPS) as (_, b),
        ):
            await until(lambda: call_id in a.parked)
            waiting = (await a_client.get(f"/a2a/calls/{call_id}")).json()
            assert waiting["result"] is None and waiting["owner"] == a.owner
            # Held and renewed while it waits: no instance claims it again, not even past the first lease.
            clock.advance(LEASE + timedelta(seconds=1))
            await a.renew()
            assert (await b.resume_in_flight(), await a.resume_in_flight()) == (0, 0)
            assert b.following == set() and b.parked == set()

            front.json(card, agent_card_to_dict(peer.card))
            assert (await a_client.post("/a2a/reload")).json()["agents"][0]["status"] == "ok"
            done = await wait_for(a_client, call_id, until="done")
            assert (done["result"]["text"], done["owner"]) == ("done", None)
            assert a.parked == set()
        assert peer.get_tasks(task_id, x_instance="a") >= 1 and peer.get_tasks(task_id, x_instance="b") == 0
        assert peer.executor.started.count(task_id) == 1


async def test_reload_closes_a_superseded_agent_set_once_its_calls_end(db_url: str, tmp_path: Path) -> None:
    clock = Clock()
    async with a2a_peer("Shared") as peer, instance(db_url, tmp_path, "a", peer, clock) as (client, state):
        # Nothing runs: each reload closes the set it replaces at once, none is kept.
        for _ in range(3):
            previous = state.agents
            assert (await client.post("/a2a/reload")).status_code == 200
            assert previous.closed and state.agents is not previous and state.retired == []

        running_on = state.agents
        # Held until both reloads are made: a call of fixed length could end before them on a loaded machine.
        started = await client.post("/a2a/tools/Shared_echo/call", json={"task": "held", "wait": False})
        call_id = started.json()["id"]
        await wait_for(client, call_id, until="handle")
        assert (await client.post("/a2a/reload")).status_code == 200
        assert state.retired == [running_on] and not running_on.closed, "a call still runs on the old set"
        spare = state.agents
        assert (await client.post("/a2a/reload")).status_code == 200
        assert spare.closed and state.retired == [running_on], "the set in between had no call: closed at once"

        peer.executor.released.set()
        done = await wait_for(client, call_id, until="done")
        assert done["result"]["text"] == "done", "the call finished on the set it started on"
        await until(lambda: running_on.closed)
        assert state.retired == []
        answer: dict[str, Any] = (
            await client.post("/a2a/tools/Shared_echo/call", json={"task": "complete again"})
        ).json()
        assert answer["text"] == "again\nsecond part", "the current set still works"
