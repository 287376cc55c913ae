"""The presence checks every ``MeshStore`` must pass (``last_activity`` and ``state``, ``muster_mesh.presence``).

As ``muster_mesh.testing``: each check is ``async def check(make)`` where ``make(clock)`` yields a ``Mesh`` on a new,
empty store with that clock; a runner parametrises over ``PRESENCE_CHECKS``. Every check reads an agent both ways
the service shows it (one agent, and a directory page, which a SQL store renders in the database) and requires them
to agree.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import anyio

from muster_mesh.clock import FakeClock
from muster_mesh.mesh import Mesh
from muster_mesh.models import AgentView, CheckinRecord, CheckinRequest, CheckoutRequest, InboxPage
from muster_mesh.presence import STALE_FRACTION, WORKING_SECONDS
from muster_mesh.records import DirectoryQuery
from muster_mesh.testing import MeshFactory, acked, join, sent

PresenceCheck = Callable[[MeshFactory], Coroutine[Any, Any, None]]
PRESENCE_CHECKS: dict[str, PresenceCheck] = {}

_EVERY_AGENT = DirectoryQuery(include_expired=True)


def check(fn: PresenceCheck) -> PresenceCheck:
    PRESENCE_CHECKS[fn.__name__] = fn
    return fn


async def seen(mesh: Mesh, agent_id: str) -> AgentView:
    """The agent as ``GET /mesh/agents/{id}`` shows it, checked against its entry of a directory page."""
    one = await mesh.get_agent(agent_id)
    listed = {a.agent_id: a for a in (await mesh.list_agents(_EVERY_AGENT)).agents}[agent_id]
    assert (listed.last_activity, listed.state) == (one.last_activity, one.state), (listed, one)
    assert listed.last_seen_at == one.last_seen_at
    return one


async def renewed(mesh: Mesh, agent_id: str, token: str, **fields: Any) -> CheckinRecord:
    result = await mesh.checkin(CheckinRequest(agent_id=agent_id, confirm=True, **fields), token=token)
    assert isinstance(result, CheckinRecord)
    return result


async def until_waiting(mesh: Mesh, agent_id: str, clock: FakeClock) -> AgentView:
    """The agent once a reader in another task waits on its inbox, having renewed the lease (at the clock's
    unmoving time) by the read that decided to wait."""
    for _ in range(1000):
        now = await mesh.get_agent(agent_id)
        if now.state == "waiting" and now.last_seen_at == clock():
            return await seen(mesh, agent_id)
        await anyio.sleep(0.01)
    raise AssertionError(f"{agent_id} never showed a reader waiting on its inbox")


async def while_waiting(
    mesh: Mesh, clock: FakeClock, sender: str, reader: str, *, follow: bool
) -> tuple[AgentView, InboxPage]:
    """``reader`` (the token of agent ``bob``) long-polls its inbox (as a follower when ``follow``); seen while it
    waits, then handed a message ``sender`` sends: the agent as seen while waiting, and the page handed over."""
    pages: list[InboxPage] = []

    async def poll() -> None:
        pages.append(await mesh.read_inbox(token=reader, follow=follow, wait_seconds=30))

    async with anyio.create_task_group() as group:
        group.start_soon(poll)
        waiting = await until_waiting(mesh, "bob", clock)
        await sent(mesh, sender, "wake up", to="bob")
    return waiting, pages[0]


@check
async def a_new_session_is_working_then_idle(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        await join(mesh, "alice", ttl_seconds=3600)
        began = clock()
        fresh = await seen(mesh, "alice")
        assert (fresh.last_activity, fresh.state) == (began, "working")
        clock.advance(WORKING_SECONDS)
        assert (await seen(mesh, "alice")).state == "working", "activity exactly a window ago still counts"
        clock.advance(1)
        later = await seen(mesh, "alice")
        assert (later.last_activity, later.state) == (began, "idle")


@check
async def an_agents_own_calls_are_activity(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        began = clock()
        clock.advance(100)
        await sent(mesh, alice, "review this", to="bob")
        assert (await seen(mesh, "alice")).last_activity == clock(), "a send"
        assert (await seen(mesh, "bob")).last_activity == began, "a message received is not the recipient's doing"
        clock.advance(100)
        page = await mesh.read_inbox(token=bob)
        assert (await seen(mesh, "bob")).last_activity == clock(), "an inbox read"
        clock.advance(100)
        await acked(mesh, bob, page.next_cursor)
        bob_seen = await seen(mesh, "bob")
        assert (bob_seen.last_activity, bob_seen.state) == (clock(), "working"), "an ack"
        clock.advance(100)
        await mesh.list_agents(token=alice)
        assert (await seen(mesh, "alice")).last_activity == clock(), "a directory read with the token"
        clock.advance(100)
        await sent(mesh, alice, "all of you", role="builder")
        assert (await seen(mesh, "alice")).last_activity == clock(), "a fan-out send"


@check
async def a_checkin_that_only_renews_is_a_heartbeat(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        token = await join(mesh, "alice", status="building")
        began = clock()
        for fields in ({"status": "building"}, {}, {"ttl_seconds": 900}):
            clock.advance(100)
            renewal = await renewed(mesh, "alice", token, **fields)
            assert (renewal.last_seen_at, renewal.last_activity) == (clock(), began), fields
            assert (await seen(mesh, "alice")).last_activity == began, fields
        clock.advance(100)
        changed = await renewed(mesh, "alice", token, status="testing")
        assert (changed.last_activity, changed.state) == (clock(), "working"), "a new status is the agent at work"
        assert (await seen(mesh, "alice")).last_activity == clock()
        at_work = clock()
        clock.advance(100)
        request = CheckinRequest(agent_id="alice", status="deploying", confirm=True)
        quiet = await mesh.checkin(request, token=token, active=False)
        assert isinstance(quiet, CheckinRecord) and quiet.status == "deploying" and quiet.last_activity == at_work
        clock.advance(100)
        told = await mesh.checkin(CheckinRequest(agent_id="alice", confirm=True), token=token, active=True)
        assert isinstance(told, CheckinRecord) and told.last_activity == clock(), "a renewal its caller calls activity"
        assert (await seen(mesh, "alice")).last_activity == clock()


@check
async def a_followers_reads_renew_the_lease_but_are_not_activity(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob", ttl_seconds=600)
        began = clock()
        clock.advance(300)
        await mesh.read_inbox(token=bob, follow=True)
        once = await seen(mesh, "bob")
        assert (once.last_seen_at, once.expires_at) == (clock(), clock() + timedelta(seconds=600)), "lease renewed"
        assert (once.last_activity, once.state) == (began, "idle"), "not activity"
        waiting, page = await while_waiting(mesh, clock, alice, bob, follow=True)
        assert waiting.last_activity == began
        assert [m.body for m in page.messages] == ["wake up"]
        after = await seen(mesh, "bob")
        assert after.last_activity == began and after.last_seen_at == clock(), "handed a message: still not activity"


@check
async def an_agents_own_long_poll_is_waiting(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        clock.advance(100)
        await mesh.read_inbox(token=bob)
        read_at = clock()
        clock.advance(WORKING_SECONDS + 1)
        waiting, page = await while_waiting(mesh, clock, alice, bob, follow=False)
        assert waiting.last_activity == read_at and waiting.last_seen_at == clock()
        assert [m.body for m in page.messages] == ["wake up"]
        assert (await seen(mesh, "bob")).last_activity == read_at


@check
async def a_lease_about_to_lapse_is_stale(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        await join(mesh, "alice", ttl_seconds=600)
        margin = 600 * STALE_FRACTION
        clock.advance(600 - margin - 1)
        assert (await seen(mesh, "alice")).state == "idle"
        clock.advance(1)
        about = await seen(mesh, "alice")
        assert (about.state, about.alive) == ("stale", True), "a quarter of the lease left"
        clock.advance(margin + 1)
        gone = await seen(mesh, "alice")
        assert (gone.state, gone.alive) == ("stale", False)


@check
async def a_checkout_leaves_the_agent_stale(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        token = await join(mesh, "alice")
        await mesh.checkout(CheckoutRequest(confirm=True), token=token)
        assert (await seen(mesh, "alice")).state == "stale"


@check
async def a_wake_marks_the_unread_woken_and_is_not_the_agents_activity(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        first = await sent(mesh, alice, "read already", to="bob")
        await acked(mesh, bob, (await mesh.read_inbox(token=bob)).next_cursor)
        read_at = clock()
        clock.advance(100)
        waiting = [await sent(mesh, alice, f"wake {n}", to="bob") for n in range(2)]
        clock.advance(5)
        assert await mesh.unread(token=bob) == 2
        assert await mesh.woken(token=bob) == 2
        woke_at = clock()
        clock.advance(5)
        assert await mesh.woken(token=bob) == 2, "still unread: the first wake is the one kept"
        for result in waiting:
            assert result.message_id is not None
            (receipt,) = (await mesh.receipts(result.message_id, token=alice)).receipts
            assert (receipt.woken_at, receipt.read_at) == (woke_at, None)
        assert first.message_id is not None
        (old,) = (await mesh.receipts(first.message_id, token=alice)).receipts
        assert old.woken_at is None and old.read_at == read_at, "acknowledged before the wake: not woken by it"
        bob_seen = await seen(mesh, "bob")
        assert bob_seen.last_activity == read_at and bob_seen.last_seen_at == clock(), "renewed, not activity"


@check
async def a_page_whose_states_changed_is_a_new_page(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        await join(mesh, "alice")

        async def fingerprint() -> bytes:
            return (await mesh.directory()).fingerprint()

        first = await fingerprint()
        clock.advance(1)
        assert await fingerprint() == first, "only the ages moved"
        clock.advance(WORKING_SECONDS)
        assert await fingerprint() != first, "working turned idle: the same rows, another page"


__all__ = ["PRESENCE_CHECKS", "seen"]
