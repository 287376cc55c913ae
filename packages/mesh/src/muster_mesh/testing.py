"""The conformance suite every ``MeshStore`` must pass, driven through ``Mesh`` (the rules) on a fresh store.

It needs no test framework: each check is ``async def check(make)`` where ``make(clock)`` is an async context
manager yielding a ``Mesh`` on a new, empty store with that clock. A test runner parametrises over ``CHECKS``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anyio

from muster_mesh.errors import (
    IdempotencyConflict,
    IdentityConflict,
    InvalidCursor,
    InvalidToken,
    LeaseExpired,
    MeshError,
    MessageTooLarge,
    RecipientExpired,
    RecipientNotFound,
    TokenRequired,
)
from muster_mesh.mesh import Mesh
from muster_mesh.models import AckRequest, Address, AgentList, CheckinRequest, SendRequest

E = TypeVar("E", bound=MeshError)


class ManualClock:
    """A clock that moves only when told: leases expire without sleeping."""

    def __init__(self, start: datetime | None = None) -> None:
        self.current = start or datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


MeshFactory = Callable[[ManualClock], AbstractAsyncContextManager[Mesh]]
Check = Callable[[MeshFactory], Coroutine[Any, Any, None]]
CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    CHECKS[fn.__name__] = fn
    return fn


async def raises(kind: type[E], call: Awaitable[object]) -> E:
    try:
        await call
    except kind as exc:
        return exc
    raise AssertionError(f"expected {kind.__name__}")


async def join(mesh: Mesh, agent_id: str, **fields: Any) -> str:
    """Check in (confirmed) and return the session token."""
    result = await mesh.checkin(CheckinRequest(agent_id=agent_id, confirm=True, **fields))
    assert result.token is not None
    return result.token


async def send(mesh: Mesh, token: str, body: str = "hi", **to: str) -> list[str]:
    result = await mesh.send(SendRequest(to=Address(**to), body=body, confirm=True), token=token)
    return result.recipients


# ---------------------------------------------------------------------------------------------------- check-in


@check
async def preview_checkin_changes_nothing(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        preview = await mesh.checkin(CheckinRequest(agent_id="builder", role="builder"))
        assert preview.preview and preview.action == "create" and preview.token is None
        assert preview.ttl_seconds == 3600
        assert (await mesh.list_agents(include_expired=True)).agents == []


@check
async def ttl_defaults_from_role_and_explicit_ttl(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        for agent_id, role, ttl, expected in [
            ("b", "builder", None, 3600),
            ("p", "ping", None, 900),
            ("v", "verification", None, 900),
            ("n", None, None, 3600),
            ("x", "ping", 120, 120),
        ]:
            r = await mesh.checkin(CheckinRequest(agent_id=agent_id, role=role, ttl_seconds=ttl, confirm=True))
            assert r.ttl_seconds == expected, (agent_id, r.ttl_seconds)
            assert r.agent.expires_in_seconds == expected


@check
async def first_confirmed_checkin_gives_token_renewal_does_not(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        first = await mesh.checkin(CheckinRequest(agent_id="qa", role="reviewer", status="reading", confirm=True))
        assert first.action == "create" and first.token and not first.preview
        clock.advance(100)
        again = await mesh.checkin(CheckinRequest(agent_id="qa", status="reading", confirm=True), token=first.token)
        assert again.action == "renew" and again.token is None
        assert again.agent.role == "reviewer", "fields left out keep their value on renewal"
        assert again.agent.checked_in_at == first.agent.checked_in_at
        assert again.agent.expires_at == clock() + timedelta(seconds=3600)


@check
async def live_agent_id_is_not_stolen(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        token = await join(mesh, "release", role="release")
        err = await raises(IdentityConflict, mesh.checkin(CheckinRequest(agent_id="release", confirm=True)))
        assert err.problem_extra["code"] == "agent_id_in_use"
        await raises(IdentityConflict, mesh.checkin(CheckinRequest(agent_id="release")))
        other = await join(mesh, "other")
        await raises(IdentityConflict, mesh.checkin(CheckinRequest(agent_id="release", confirm=True), token=other))
        # The holder is untouched: its token still works.
        await mesh.inbox(token=token)


@check
async def expired_agent_id_can_be_taken_over(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        old = await join(mesh, "builder", ttl_seconds=60)
        clock.advance(61)
        preview = await mesh.checkin(CheckinRequest(agent_id="builder"))
        assert preview.action == "replace"
        new = await mesh.checkin(CheckinRequest(agent_id="builder", confirm=True))
        assert new.action == "replace" and new.token and new.token != old
        await raises(InvalidToken, mesh.inbox(token=old))
        await mesh.inbox(token=new.token)


@check
async def expired_token_is_refused_until_it_checks_in_again(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        token = await join(mesh, "qa", ttl_seconds=60)
        clock.advance(60)
        err = await raises(LeaseExpired, mesh.inbox(token=token))
        assert err.problem_extra["code"] == "lease_expired"
        again = await mesh.checkin(CheckinRequest(agent_id="qa", confirm=True), token=token)
        assert again.action == "renew", "the same token resumes its own session"
        await mesh.inbox(token=token)


@check
async def tokens_are_required_and_checked(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        await raises(TokenRequired, mesh.inbox(token=None))
        await raises(InvalidToken, mesh.inbox(token="mst_nope"))
        await raises(TokenRequired, mesh.send(SendRequest(to=Address(agent="x"), body="b", confirm=True), token=None))


# ---------------------------------------------------------------------------------------------------- presence


@check
async def every_call_renews_the_lease(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        token = await join(mesh, "builder", ttl_seconds=600)
        for _ in range(3):
            clock.advance(500)
            await mesh.inbox(token=token)
        clock.advance(500)
        await mesh.list_agents(token=token)
        clock.advance(500)
        peer = await join(mesh, "peer")
        await send(mesh, token, agent="peer")
        clock.advance(500)
        await mesh.ack(AckRequest(cursor=0, confirm=True), token=token)
        clock.advance(500)
        listed = {a.agent_id: a for a in (await mesh.list_agents(token=peer)).agents}
        assert listed["builder"].alive and listed["builder"].heartbeat_age_seconds == 500


@check
async def expired_entries_leave_the_directory(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        await join(mesh, "short", ttl_seconds=60)
        await join(mesh, "long", ttl_seconds=3600)
        clock.advance(61)
        assert [a.agent_id for a in (await mesh.list_agents()).agents] == ["long"]
        everyone = {a.agent_id: a for a in (await mesh.list_agents(include_expired=True)).agents}
        assert set(everyone) == {"short", "long"}
        assert not everyone["short"].alive and everyone["short"].expires_in_seconds == -1


@check
async def heartbeat_and_status_ages_are_kept_apart(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        token = await join(mesh, "builder", status="running tests")
        clock.advance(1800)
        await mesh.checkin(CheckinRequest(agent_id="builder", status="running tests", confirm=True), token=token)
        clock.advance(60)
        (view,) = (await mesh.list_agents()).agents
        assert view.heartbeat_age_seconds == 60
        assert view.status_age_seconds == 1860, "same status text: its age keeps growing"
        await mesh.checkin(CheckinRequest(agent_id="builder", status="writing docs", confirm=True), token=token)
        clock.advance(5)
        (view,) = (await mesh.list_agents()).agents
        assert view.status == "writing docs" and view.status_age_seconds == 5


@check
async def list_filters_by_role_repo_cap(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        await join(mesh, "a", role="builder", repo="muster", caps=["merge"])
        await join(mesh, "b", role="reviewer", repo="muster", caps=["merge", "deploy"])
        await join(mesh, "c", role="reviewer", repo="other")

        def ids(listing: AgentList) -> list[str]:
            return [x.agent_id for x in listing.agents]

        assert ids(await mesh.list_agents(role="reviewer")) == ["b", "c"]
        assert ids(await mesh.list_agents(repo="muster")) == ["a", "b"]
        assert ids(await mesh.list_agents(cap="deploy")) == ["b"]


# ---------------------------------------------------------------------------------------------------- messages


@check
async def inbox_sequence_cursor_and_idempotent_reads(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        for i in range(5):
            assert await send(mesh, alice, f"m{i}", agent="bob") == ["bob"]
        page = await mesh.inbox(token=bob, limit=2)
        assert [m.seq for m in page.messages] == [1, 2] and page.has_more and page.next_cursor == 2
        assert page.messages[0].sender == "alice" and page.messages[0].body == "m0"
        assert page.messages[0].to == {"agent": "bob"}
        again = await mesh.inbox(token=bob, limit=2)
        assert again.messages == page.messages, "reading does not move the stored cursor"
        rest = await mesh.inbox(token=bob, after=page.next_cursor, limit=10)
        assert [m.body for m in rest.messages] == ["m2", "m3", "m4"] and not rest.has_more
        assert (await mesh.inbox(token=bob, after=2)).messages == rest.messages, "same cursor, same messages"
        assert rest.unread == 5 and rest.cursor == 0
        ack = await mesh.ack(AckRequest(cursor=3, confirm=True), token=bob)
        assert (ack.previous, ack.cursor, ack.unread) == (0, 3, 2)
        after_ack = await mesh.inbox(token=bob)
        assert [m.seq for m in after_ack.messages] == [4, 5] and after_ack.cursor == 3
        assert (await mesh.inbox(token=alice)).messages == [], "inboxes are per recipient"


@check
async def ack_preview_bounds_and_no_going_back(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        await send(mesh, alice, agent="bob")
        await send(mesh, alice, agent="bob")
        preview = await mesh.ack(AckRequest(cursor=2), token=bob)
        assert preview.preview and preview.cursor == 2
        assert (await mesh.inbox(token=bob)).cursor == 0, "a preview changes nothing"
        err = await raises(InvalidCursor, mesh.ack(AckRequest(cursor=3, confirm=True), token=bob))
        assert err.problem_extra["last_seq"] == 2
        await mesh.ack(AckRequest(cursor=2, confirm=True), token=bob)
        back = await mesh.ack(AckRequest(cursor=1, confirm=True), token=bob)
        assert back.cursor == 2 and back.unread == 0


@check
async def sending_to_missing_or_expired_is_refused_and_stores_nothing(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice", ttl_seconds=3600)
        await join(mesh, "gone", ttl_seconds=60)
        await raises(RecipientNotFound, send(mesh, alice, agent="nobody"))
        clock.advance(61)
        err = await raises(RecipientExpired, send(mesh, alice, agent="gone"))
        assert err.problem_extra["agent_id"] == "gone"
        # Taking the id over shows the refused message was never stored.
        fresh = await join(mesh, "gone")
        assert (await mesh.inbox(token=fresh)).messages == []


@check
async def fan_out_reaches_live_matches_only_and_not_the_sender(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        lead = await join(mesh, "lead", role="reviewer", repo="muster", caps=["deploy"])
        r1 = await join(mesh, "r1", role="reviewer", repo="muster")
        await join(mesh, "r2", role="reviewer", repo="other", caps=["deploy"])
        await join(mesh, "late", role="reviewer", repo="muster", ttl_seconds=60)
        await join(mesh, "b1", role="builder", repo="muster", caps=["deploy"])
        clock.advance(61)
        assert await send(mesh, lead, role="reviewer") == ["r1", "r2"]
        assert await send(mesh, lead, repo="muster") == ["b1", "r1"]
        assert await send(mesh, lead, cap="deploy") == ["b1", "r2"]
        assert await send(mesh, lead, role="reviewer", repo="muster") == ["r1"]
        assert await send(mesh, lead, role="nobody") == []
        page = await mesh.inbox(token=r1)
        assert [m.seq for m in page.messages] == [1, 2, 3]
        assert page.messages[0].to == {"role": "reviewer"}


@check
async def send_preview_stores_nothing(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob", role="qa")
        preview = await mesh.send(SendRequest(to=Address(role="qa"), body="x"), token=alice)
        assert preview.preview and preview.recipients == ["bob"] and preview.stored == 0 and preview.message_id is None
        assert (await mesh.inbox(token=bob)).messages == []


@check
async def new_session_sees_only_what_arrives_after_checkin(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice", ttl_seconds=7200)
        await join(mesh, "bob", ttl_seconds=60)
        await send(mesh, alice, "old", agent="bob")
        clock.advance(61)
        bob = await join(mesh, "bob")
        assert (await mesh.inbox(token=bob)).messages == []
        assert (await mesh.inbox(token=bob, after=0)).messages == [], "the backlog stays out even with after=0"
        await send(mesh, alice, "new", agent="bob")
        page = await mesh.inbox(token=bob, after=0)
        assert [(m.seq, m.body) for m in page.messages] == [(2, "new")]


@check
async def message_size_is_bounded(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        alice = await join(mesh, "alice")
        await join(mesh, "bob")
        limit = mesh.limits.max_message_bytes
        err = await raises(MessageTooLarge, send(mesh, alice, "é" * (limit // 2 + 1), agent="bob"))
        assert err.problem_extra["limit"] == limit
        assert await send(mesh, alice, "x" * limit, agent="bob") == ["bob"]


# ---------------------------------------------------------------------------------------------------- idempotency


@check
async def idempotent_send_replays_and_conflicts(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        request = SendRequest(to=Address(agent="bob"), body="once", confirm=True, idempotency_key="k-1")
        first = await mesh.send(request, token=alice)
        retry = await mesh.send(request, token=alice)
        assert retry.replayed and not first.replayed and retry.message_id == first.message_id
        assert len((await mesh.inbox(token=bob)).messages) == 1
        changed = request.model_copy(update={"body": "twice"})
        await raises(IdempotencyConflict, mesh.send(changed, token=alice))
        # Keys belong to their sender: bob may use the same key for his own message.
        await join(mesh, "carol")
        other = SendRequest(to=Address(agent="carol"), body="mine", confirm=True, idempotency_key="k-1")
        assert not (await mesh.send(other, token=bob)).replayed


@check
async def idempotent_checkin_and_ack(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        request = CheckinRequest(agent_id="qa", role="reviewer", confirm=True, idempotency_key="c-1")
        first = await mesh.checkin(request)
        retry = await mesh.checkin(request)
        assert retry.replayed and retry.token == first.token, "a lost answer can be fetched again"
        await raises(IdempotencyConflict, mesh.checkin(request.model_copy(update={"role": "builder"})))
        alice = await join(mesh, "alice")
        assert first.token is not None
        await send(mesh, alice, agent="qa")
        ack = AckRequest(cursor=1, confirm=True, idempotency_key="a-1")
        assert not (await mesh.ack(ack, token=first.token)).replayed
        assert (await mesh.ack(ack, token=first.token)).replayed
        await raises(
            IdempotencyConflict, mesh.ack(AckRequest(cursor=0, confirm=True, idempotency_key="a-1"), token=first.token)
        )


@check
async def idempotency_key_is_free_again_once_swept(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice", ttl_seconds=86400)
        bob = await join(mesh, "bob", ttl_seconds=86400)
        first = SendRequest(to=Address(agent="bob"), body="one", confirm=True, idempotency_key="daily")
        await mesh.send(first, token=alice)
        half = mesh.limits.idempotency_ttl.total_seconds() / 2
        clock.advance(half)
        for token in (alice, bob):  # keeps both leases alive across the wait
            await mesh.inbox(token=token)
        clock.advance(half + 1)
        # Expired but not yet swept: still binding (a retry replays, a different request conflicts).
        assert (await mesh.send(first, token=alice)).replayed
        second = first.model_copy(update={"body": "two"})
        await raises(IdempotencyConflict, mesh.send(second, token=alice))
        assert (await mesh.sweep()).idempotency_keys == 1
        assert not (await mesh.send(second, token=alice)).replayed


# ---------------------------------------------------------------------------------------------------- wake, concurrency


async def _until_waiting(mesh: Mesh) -> None:
    # The notifier may not expose how many wait (a cross-process one); then the poll's own subscription order makes
    # the check hold anyway, only less sharply.
    for _ in range(500):
        if getattr(mesh.notifier, "waiting", 1) > 0:
            return
        await anyio.sleep(0.01)


@check
async def long_poll_returns_on_arrival_or_empty_at_deadline(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        empty = await mesh.inbox(token=bob, wait_seconds=0.2)
        assert empty.messages == [] and empty.next_cursor == 0
        pages = []

        async def poll() -> None:
            pages.append(await mesh.inbox(token=bob, wait_seconds=30))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                await _until_waiting(mesh)
                await send(mesh, alice, "wake up", agent="bob")
        assert [m.body for m in pages[0].messages] == ["wake up"]


@check
async def concurrent_sends_get_unique_contiguous_sequences(make: MeshFactory) -> None:
    async with make(ManualClock()) as mesh:
        senders = [await join(mesh, f"s{i}") for i in range(4)]
        inbox_token = await join(mesh, "sink", role="sink")
        await join(mesh, "sink2", role="sink")

        async def burst(token: str) -> None:
            for _ in range(5):
                await send(mesh, token, role="sink")

        async with anyio.create_task_group() as tg:
            for token in senders:
                tg.start_soon(burst, token)
        page = await mesh.inbox(token=inbox_token, limit=100)
        assert [m.seq for m in page.messages] == list(range(1, 21))
        assert len({m.message_id for m in page.messages}) == 20


# ---------------------------------------------------------------------------------------------------- hygiene


@check
async def sweeper_keeps_unread_and_drops_what_is_spent(make: MeshFactory) -> None:
    clock = ManualClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice", ttl_seconds=86400)
        bob = await join(mesh, "bob", ttl_seconds=86400)
        await join(mesh, "ghost", ttl_seconds=60)
        await send(mesh, alice, "read", agent="bob")
        await send(mesh, alice, "unread", agent="bob")
        await send(mesh, alice, "for ghost", agent="ghost")
        await mesh.ack(AckRequest(cursor=1, confirm=True, idempotency_key="x"), token=bob)
        nothing = await mesh.sweep()
        assert (nothing.messages, nothing.inbox_entries, nothing.agents) == (0, 0, 0)
        clock.advance(mesh.limits.read_retention.total_seconds() + 120)
        # Keep alice and bob live (a sweep is about spent rows, not live agents).
        await mesh.checkin(CheckinRequest(agent_id="alice", confirm=True), token=alice)
        await mesh.checkin(CheckinRequest(agent_id="bob", confirm=True), token=bob)
        report = await mesh.sweep()
        assert report.agents == 1 and report.idempotency_keys == 1
        assert report.inbox_entries == 2 and report.messages == 2, report
        page = await mesh.inbox(token=bob, after=0)
        assert [m.body for m in page.messages] == ["unread"]
        assert [a.agent_id for a in (await mesh.list_agents(include_expired=True)).agents] == ["alice", "bob"]
