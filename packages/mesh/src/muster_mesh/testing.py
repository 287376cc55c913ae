"""The conformance suite every ``MeshStore`` must pass, driven through ``Mesh`` (the rules) on a fresh store.

It needs no test framework: each check is ``async def check(make)`` where ``make(clock)`` is an async context
manager yielding a ``Mesh`` on a new, empty store with that clock. A test runner parametrises over ``CHECKS``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

import anyio

from muster_mesh.clock import FakeClock
from muster_mesh.errors import (
    AgentNotFound,
    IdempotencyConflict,
    IdentityConflict,
    InvalidAddress,
    InvalidCursor,
    InvalidToken,
    LeaseExpired,
    MeshError,
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
from muster_mesh.mesh import Mesh
from muster_mesh.models import (
    AckPreview,
    AckRequest,
    AckResult,
    AgentList,
    CheckinPreview,
    CheckinRecord,
    CheckinRequest,
    CheckoutPreview,
    CheckoutRequest,
    InboxPage,
    MessageReceipts,
    SendPreview,
    SendRequest,
    SendResult,
)
from muster_mesh.records import DirectoryQuery

E = TypeVar("E", bound=MeshError)

MeshFactory = Callable[[FakeClock], AbstractAsyncContextManager[Mesh]]
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


async def record(mesh: Mesh, agent_id: str, token: str | None = None, **fields: Any) -> CheckinRecord:
    result = await mesh.checkin(CheckinRequest(agent_id=agent_id, confirm=True, **fields), token=token)
    assert isinstance(result, CheckinRecord)
    return result


async def join(mesh: Mesh, agent_id: str, **fields: Any) -> str:
    """Check in (confirmed) and return the session token."""
    result = await record(mesh, agent_id, **fields)
    assert result.token is not None
    return result.token


async def sent(mesh: Mesh, token: str, body: str = "hi", **to: Any) -> SendResult:
    result = await mesh.send(SendRequest(body=body, confirm=True, **to), token=token)
    assert isinstance(result, SendResult)
    return result


async def send(mesh: Mesh, token: str, body: str = "hi", **to: Any) -> list[str]:
    return (await sent(mesh, token, body, **to)).recipients


async def acked(mesh: Mesh, token: str, cursor: int, key: str | None = None) -> AckResult:
    result = await mesh.ack(AckRequest(cursor=cursor, confirm=True), token=token, idempotency_key=key)
    assert isinstance(result, AckResult)
    return result


def replayed(result: object) -> bool:
    return bool(getattr(result, "replayed", False))


def ids(listing: AgentList) -> list[str]:
    return [x.agent_id for x in listing.agents]


# ---------------------------------------------------------------------------------------------------- check-in


@check
async def preview_checkin_changes_nothing(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        preview = await mesh.checkin(CheckinRequest(agent_id="builder", role="builder", status="s"))
        assert isinstance(preview, CheckinPreview) and preview.action == "create"
        assert preview.agent.ttl_seconds == 3600 and preview.agent.status == "s"
        assert preview.agent.expires_at == clock() + timedelta(seconds=3600)
        assert (await mesh.list_agents(DirectoryQuery(include_expired=True))).agents == []
        token = await join(mesh, "builder", ttl_seconds=600, status="s")
        clock.advance(100)
        renewal = await mesh.checkin(CheckinRequest(agent_id="builder", status="t"), token=token)
        assert isinstance(renewal, CheckinPreview) and renewal.action == "renew" and renewal.agent.status == "t"
        (kept,) = (await mesh.list_agents()).agents
        assert kept.status == "s" and kept.heartbeat_age_seconds == 100, "a preview does not even renew"


@check
async def ttl_defaults_from_role_and_explicit_ttl(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        for agent_id, role, ttl, expected in [
            ("b", "builder", None, 3600),
            ("r", "reviewer", None, 3600),
            ("p", "ping", None, 900),
            ("v", "verification", None, 900),
            ("n", None, None, 3600),
            ("x", "ping", 120, 120),
            ("y", None, 86400, 86400),
        ]:
            r = await record(mesh, agent_id, role=role, ttl_seconds=ttl)
            assert r.ttl_seconds == expected, (agent_id, r.ttl_seconds)
            assert (r.expires_at - r.last_seen_at).total_seconds() == expected


@check
async def first_confirmed_checkin_gives_token_renewal_does_not(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        first = await record(mesh, "qa", role="reviewer", status="reading", ttl_seconds=600)
        assert first.action == "create" and first.token and first.token.startswith("mst_")
        clock.advance(100)
        again = await record(mesh, "qa", first.token, status="reading")
        assert again.action == "renew" and again.token is None
        assert again.role == "reviewer" and again.ttl_seconds == 600, "fields left out keep their value on renewal"
        assert again.expires_at == clock() + timedelta(seconds=600)
        role_change = await record(mesh, "qa", first.token, role="ping")
        assert role_change.ttl_seconds == 900, "a new role without ttl_seconds takes the role's default"


@check
async def live_agent_id_is_not_stolen(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        token = await join(mesh, "release", role="release")
        err = await raises(IdentityConflict, mesh.checkin(CheckinRequest(agent_id="release", confirm=True)))
        assert err.problem_extra["code"] == "agent_id_in_use"
        await raises(IdentityConflict, mesh.checkin(CheckinRequest(agent_id="release")))
        other = await join(mesh, "other")
        await raises(NotTheHolder, mesh.checkin(CheckinRequest(agent_id="release", confirm=True), token=other))
        await raises(NotTheHolder, mesh.checkin(CheckinRequest(agent_id="release", confirm=True), token="mst_x"))
        # The holder is untouched: its token still works.
        assert (await mesh.read_inbox(token=token)).messages == []


@check
async def expired_agent_id_is_claimed_anew_with_an_empty_inbox(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice", ttl_seconds=7200)
        old = await join(mesh, "builder", ttl_seconds=60)
        await send(mesh, alice, "before", to="builder")
        clock.advance(61)
        await raises(LeaseExpired, mesh.read_inbox(token=old))
        preview = await mesh.checkin(CheckinRequest(agent_id="builder"))
        assert isinstance(preview, CheckinPreview) and preview.action == "create"
        new = await record(mesh, "builder", old)
        assert new.action == "create" and new.token and new.token != old, "even its old token starts a new session"
        await raises(InvalidToken, mesh.read_inbox(token=old))
        assert (await mesh.read_inbox(token=new.token, after=0)).messages == [], "a fresh, empty inbox"
        assert (await mesh.unread(token=new.token)) == 0


@check
async def tokens_are_required_and_checked(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        await raises(TokenRequired, mesh.read_inbox(token=None))
        await raises(InvalidToken, mesh.read_inbox(token="mst_nope"))
        await raises(TokenRequired, mesh.send(SendRequest(to="x", body="b", confirm=True), token=None))
        await raises(TokenRequired, mesh.ack(AckRequest(cursor=0, confirm=True), token=None))
        await raises(TokenRequired, mesh.checkout(CheckoutRequest(confirm=True), token=None))
        await raises(InvalidToken, mesh.list_agents(token="mst_nope"))


# ---------------------------------------------------------------------------------------------------- presence


@check
async def every_call_renews_the_lease(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        token = await join(mesh, "builder", ttl_seconds=600)
        peer = await join(mesh, "peer", ttl_seconds=86400)
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: mesh.read_inbox(token=token),
            lambda: mesh.list_agents(token=token),
            lambda: mesh.get_agent("peer", token=token),
            lambda: send(mesh, token, to="peer"),
            lambda: acked(mesh, token, 0),
            lambda: mesh.unread(token=token),
        ]
        for call in calls:
            clock.advance(500)
            await call()
        clock.advance(500)
        agent = await mesh.get_agent("builder", token=peer)
        assert agent.alive and agent.heartbeat_age_seconds == 500


@check
async def expired_entries_leave_the_directory_and_cannot_receive(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        await join(mesh, "short", ttl_seconds=60, role="qa")
        long = await join(mesh, "long", ttl_seconds=3600)
        clock.advance(61)
        assert ids(await mesh.list_agents()) == ["long"]
        everyone = {a.agent_id: a for a in (await mesh.list_agents(DirectoryQuery(include_expired=True))).agents}
        assert set(everyone) == {"short", "long"}
        assert not everyone["short"].alive and everyone["long"].alive
        assert not (await mesh.get_agent("short")).alive
        await raises(RecipientExpired, send(mesh, long, to="short"))
        assert await send(mesh, long, role="qa") == [], "fan-out skips the expired"


@check
async def checkout_leaves_the_roster(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        preview = await mesh.checkout(CheckoutRequest(), token=bob)
        assert isinstance(preview, CheckoutPreview) and preview.agent.agent_id == "bob"
        assert ids(await mesh.list_agents()) == ["alice", "bob"], "a preview changes nothing"
        await mesh.checkout(CheckoutRequest(confirm=True), token=bob)
        assert ids(await mesh.list_agents()) == ["alice"]
        await raises(LeaseExpired, mesh.read_inbox(token=bob))
        await raises(RecipientExpired, send(mesh, alice, to="bob"))
        assert (await record(mesh, "bob")).action == "create", "the agent_id is free again"


@check
async def heartbeat_and_status_ages_are_kept_apart(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        token = await join(mesh, "builder", status="running tests")
        clock.advance(1800)
        await record(mesh, "builder", token, status="running tests")
        clock.advance(60)
        (agent,) = (await mesh.list_agents()).agents
        assert agent.heartbeat_age_seconds == 60
        assert agent.status_age_seconds == 1860, "same status text: its age keeps growing"
        await record(mesh, "builder", token)
        clock.advance(5)
        assert (await mesh.get_agent("builder")).status_age_seconds == 1865, "no status given: unchanged"
        await record(mesh, "builder", token, status="writing docs")
        clock.advance(5)
        (agent,) = (await mesh.list_agents()).agents
        assert agent.status == "writing docs" and agent.status_age_seconds == 5
        assert agent.status_since == clock() - timedelta(seconds=5)


@check
async def list_filters_by_role_repo_cap_and_pages(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        await join(mesh, "a", role="builder", repo="muster", caps=["merge"])
        await join(mesh, "b", role="reviewer", repo="muster", caps=["merge", "deploy"])
        await join(mesh, "c", role="reviewer", repo="other")
        assert ids(await mesh.list_agents(DirectoryQuery(role="reviewer"))) == ["b", "c"]
        assert ids(await mesh.list_agents(DirectoryQuery(repo="muster"))) == ["a", "b"]
        assert ids(await mesh.list_agents(DirectoryQuery(cap="deploy"))) == ["b"]
        assert ids(await mesh.list_agents(DirectoryQuery(cap="merge", role="reviewer"))) == ["b"]
        for i in range(7):
            await join(mesh, f"p{i}")
        pages: list[str] = []
        cursor: str | None = None
        while True:
            page = await mesh.list_agents(DirectoryQuery(limit=4, cursor=cursor))
            pages += ids(page)
            assert len(page.agents) <= 4
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert pages == ["a", "b", "c", *[f"p{i}" for i in range(7)]]
        await raises(AgentNotFound, mesh.get_agent("nobody"))


# ---------------------------------------------------------------------------------------------------- messages


@check
async def inbox_sequence_cursor_and_idempotent_reads(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        for i in range(5):
            assert await send(mesh, alice, f"m{i}", to="bob", thread_id="t-1" if i == 0 else None) == ["bob"]
        page = await mesh.read_inbox(token=bob, limit=2)
        assert [m.seq for m in page.messages] == [1, 2] and page.has_more and page.next_cursor == 2
        first = page.messages[0]
        assert (first.sender, first.body, first.thread_id) == ("alice", "m0", "t-1")
        assert first.model_dump(by_alias=True)["from"] == "alice"
        again = await mesh.read_inbox(token=bob, limit=2)
        assert again.messages == page.messages, "reading does not move the stored cursor"
        rest = await mesh.read_inbox(token=bob, after=page.next_cursor, limit=10)
        assert [m.body for m in rest.messages] == ["m2", "m3", "m4"] and not rest.has_more
        assert (await mesh.read_inbox(token=bob, after=2)).messages == rest.messages, "same cursor, same messages"
        assert await mesh.unread(token=bob) == 5
        ack = await acked(mesh, bob, 3)
        assert (ack.cursor, ack.unread) == (3, 2)
        after_ack = await mesh.read_inbox(token=bob)
        assert [m.seq for m in after_ack.messages] == [4, 5]
        assert (await mesh.read_inbox(token=alice)).messages == [], "inboxes are per recipient"


@check
async def ack_preview_bounds_and_no_going_back(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        await send(mesh, alice, to="bob")
        await send(mesh, alice, to="bob")
        preview = await mesh.ack(AckRequest(cursor=2), token=bob)
        assert isinstance(preview, AckPreview) and preview.cursor == 2
        assert await mesh.unread(token=bob) == 2, "a preview changes nothing"
        err = await raises(InvalidCursor, mesh.ack(AckRequest(cursor=3, confirm=True), token=bob))
        assert err.problem_extra["last_seq"] == 2
        await acked(mesh, bob, 2)
        back = await acked(mesh, bob, 1)
        assert back.cursor == 2 and back.unread == 0


@check
async def sending_to_missing_or_expired_is_refused_and_stores_nothing(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice", ttl_seconds=3600)
        await join(mesh, "gone", ttl_seconds=60)
        await raises(RecipientNotFound, send(mesh, alice, to="nobody"))
        await raises(RecipientNotFound, mesh.send(SendRequest(to="nobody", body="x"), token=alice))
        seen = clock()
        clock.advance(61)
        err = await raises(RecipientExpired, send(mesh, alice, to="gone"))
        assert err.problem_extra["agent_id"] == "gone"
        # The refusal says when it was last seen, when its lease ended, and that no wake reaches it.
        assert err.problem_extra["last_seen_at"] == seen.isoformat()
        assert err.problem_extra["lease_ended_at"] == (seen + timedelta(seconds=60)).isoformat()
        assert err.problem_extra["wake_possible"] is False and "No wake can reach it" in str(err)
        await raises(RecipientExpired, mesh.send(SendRequest(to="gone", body="x"), token=alice))
        fresh = await join(mesh, "gone")
        assert (await mesh.read_inbox(token=fresh, after=0)).messages == []


@check
async def exactly_one_address(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        alice = await join(mesh, "alice")
        for to in ({}, {"to": "b", "role": "qa"}, {"role": "qa", "repo": "r"}):
            err = await raises(InvalidAddress, mesh.send(SendRequest(body="x", confirm=True, **to), token=alice))
            assert err.problem_extra["errors"][0]["field"] == "to"


@check
async def every_kind_of_send_renews_the_sender(make: MeshFactory) -> None:
    # Each send path (direct, direct with an idempotency key, fan-out, to oneself) renews the sender's lease: on a
    # store whose transactions overlap they are separate code paths, each with its own renewal.
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice", ttl_seconds=600)
        await join(mesh, "bob", role="qa", ttl_seconds=86400)
        sends: list[dict[str, Any]] = [
            {"to": "bob"},
            {"to": "bob", "idempotency_key": "k-1"},
            {"role": "qa"},
            {"role": "qa", "idempotency_key": "k-2"},
            {"to": "alice"},
        ]
        for address in sends:
            clock.advance(500)
            await mesh.send(SendRequest(body="hi", confirm=True, **address), token=alice)
            seen = await mesh.get_agent("alice")
            assert seen.last_seen_at == clock(), address
            assert seen.expires_at == clock() + timedelta(seconds=600), address
        clock.advance(500)
        await mesh.send(SendRequest(role="qa", body="preview"), token=alice)
        assert (await mesh.get_agent("alice")).last_seen_at == clock() - timedelta(seconds=500), (
            "a preview renews nothing"
        )


@check
async def every_plain_direct_send_renews_the_sender(make: MeshFactory) -> None:
    # A store may take a shorter path for a sender it has seen before (PostgreSQL's one-statement send, from the
    # sender's second plain direct send on): every send of a row renews the lease, not only the first.
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice", ttl_seconds=600)
        await join(mesh, "bob", ttl_seconds=86400)
        for n in range(4):
            clock.advance(300)
            assert await send(mesh, alice, f"plain {n}", to="bob") == ["bob"]
            seen = await mesh.get_agent("alice")
            assert (seen.last_seen_at, seen.expires_at) == (clock(), clock() + timedelta(seconds=600)), n
        assert (await mesh.get_agent("alice")).alive, "four sends 300 s apart kept a 600 s lease alive"


@check
async def fan_out_is_rate_limited_per_sender_and_direct_sends_are_not(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        burst = mesh.limits.fanout_per_minute
        loud = await join(mesh, "loud", ttl_seconds=86400)
        quiet = await join(mesh, "quiet", ttl_seconds=86400)
        r1 = await join(mesh, "r1", role="qa", ttl_seconds=86400)
        for _ in range(burst):
            assert await send(mesh, loud, role="qa") == ["r1"]
        err = await raises(RateLimited, send(mesh, loud, role="qa"))
        assert err.code == "rate_limited" and 0 < err.retry_after <= 60 / burst + 1e-9
        assert err.problem_extra["per_minute"] == burst
        assert await send(mesh, loud, to="r1") == ["r1"], "direct messages are not limited"
        assert await send(mesh, quiet, role="qa") == ["r1"], "each sender has its own rate"
        unread = await mesh.read_inbox(token=r1, limit=500)
        assert len(unread.messages) == burst + 2, "the refused fan-out stored nothing"
        clock.advance(err.retry_after)
        assert await send(mesh, loud, role="qa") == ["r1"], "the rate refills on the mesh's clock"


@check
async def fan_out_reaches_live_matches_only_and_not_the_sender(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        lead = await join(mesh, "lead", role="reviewer", repo="muster", caps=["deploy"])
        r1 = await join(mesh, "r1", role="reviewer", repo="muster")
        await join(mesh, "r2", role="reviewer", repo="other", caps=["deploy"])
        await join(mesh, "late", role="reviewer", repo="muster", ttl_seconds=60)
        await join(mesh, "b1", role="builder", repo="muster", caps=["deploy"])
        clock.advance(61)
        assert await send(mesh, lead, role="reviewer") == ["r1", "r2"]
        assert await send(mesh, lead, repo="muster") == ["b1", "r1"]
        result = await sent(mesh, lead, cap="deploy")
        assert result.recipients == ["b1", "r2"] and result.stored == 2 and result.message_id
        nobody = await sent(mesh, lead, role="nobody")
        assert (nobody.recipients, nobody.stored, nobody.message_id) == ([], 0, None)
        page = await mesh.read_inbox(token=r1)
        assert [m.seq for m in page.messages] == [1, 2]


@check
async def send_preview_stores_nothing(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob", role="qa")
        clock.advance(10)
        preview = await mesh.send(SendRequest(role="qa", body="x"), token=alice)
        assert isinstance(preview, SendPreview) and preview.recipients == ["bob"]
        direct = await mesh.send(SendRequest(to="bob", body="x"), token=alice)
        assert isinstance(direct, SendPreview) and direct.recipients == ["bob"]
        assert (await mesh.read_inbox(token=bob)).messages == []
        assert (await mesh.get_agent("alice")).heartbeat_age_seconds == 10


@check
async def new_session_sees_only_what_arrives_after_checkin(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice", ttl_seconds=7200)
        await join(mesh, "bob", ttl_seconds=60)
        await send(mesh, alice, "old", to="bob")
        clock.advance(61)
        bob = await join(mesh, "bob")
        assert (await mesh.read_inbox(token=bob)).messages == []
        assert (await mesh.read_inbox(token=bob, after=0)).messages == [], "the backlog stays out even with after=0"
        await send(mesh, alice, "new", to="bob")
        page = await mesh.read_inbox(token=bob, after=0)
        assert [(m.seq, m.body) for m in page.messages] == [(2, "new")]


@check
async def message_size_is_bounded(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        alice = await join(mesh, "alice")
        await join(mesh, "bob")
        limit = mesh.limits.max_message_bytes
        err = await raises(MessageTooLarge, send(mesh, alice, "é" * (limit // 2 + 1), to="bob"))
        assert err.problem_extra["limit"] == limit
        assert await send(mesh, alice, "x" * limit, to="bob") == ["bob"]


# ---------------------------------------------------------------------------------------------------- idempotency


@check
async def idempotent_send_replays_and_conflicts(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        request = SendRequest(to="bob", body="once", confirm=True, idempotency_key="k-1")
        first = await mesh.send(request, token=alice)
        retry = await mesh.send(request, token=alice)
        assert isinstance(first, SendResult) and isinstance(retry, SendResult)
        assert retry.replayed and not first.replayed and retry.message_id == first.message_id
        assert len((await mesh.read_inbox(token=bob)).messages) == 1
        changed = request.model_copy(update={"body": "twice"})
        await raises(IdempotencyConflict, mesh.send(changed, token=alice))
        # Keys belong to their sender: bob may use the same key for his own message.
        await join(mesh, "carol")
        other = SendRequest(to="carol", body="mine", confirm=True, idempotency_key="k-1")
        assert not replayed(await mesh.send(other, token=bob))


@check
async def takeover_issues_a_new_token_and_supersedes_the_old(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        lost = await join(mesh, "alice", role="builder")
        bob = await join(mesh, "bob")
        await send(mesh, bob, "kept", to="alice")
        await raises(IdentityConflict, mesh.checkin(CheckinRequest(agent_id="alice", confirm=True)))
        preview = await mesh.checkin(CheckinRequest(agent_id="alice", takeover=True))
        assert isinstance(preview, CheckinPreview) and preview.action == "takeover"
        assert await mesh.unread(token=lost) == 1, "a preview takes nothing over"
        clock.advance(5)
        took = await mesh.checkin(CheckinRequest(agent_id="alice", takeover=True, confirm=True))
        assert isinstance(took, CheckinRecord) and took.token and took.token != lost and took.role == "builder"
        assert [m.body for m in (await mesh.read_inbox(token=took.token)).messages] == ["kept"]
        for call in (
            mesh.read_inbox(token=lost),
            mesh.send(SendRequest(to="bob", body="x", confirm=True), token=lost),
            mesh.send(SendRequest(to="alice", body="x", confirm=True), token=lost),
            mesh.send(SendRequest(role="x", body="x", confirm=True), token=lost),
            mesh.ack(AckRequest(cursor=0, confirm=True), token=lost),
            mesh.checkout(CheckoutRequest(confirm=True), token=lost),
            mesh.checkin(CheckinRequest(agent_id="alice", confirm=True), token=lost),
        ):
            refused = await raises(Superseded, call)
            assert refused.problem_extra["agent_id"] == "alice"
        assert await mesh.unread(token=took.token) == 1


@check
async def idempotent_checkin_ack_and_checkout(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        request = CheckinRequest(agent_id="qa", role="reviewer", confirm=True)
        first = await mesh.checkin(request, idempotency_key="c-1")
        assert isinstance(first, CheckinRecord) and first.token
        # The token is never stored, so the retry of the check-in that made it cannot show it: it says so.
        await raises(TokenGivenOnce, mesh.checkin(request, idempotency_key="c-1"))
        renewal = CheckinRequest(agent_id="qa", status="renewed", confirm=True)
        renewed = await mesh.checkin(renewal, token=first.token, idempotency_key="c-2")
        retry = await mesh.checkin(renewal, token=first.token, idempotency_key="c-2")
        assert isinstance(renewed, CheckinRecord) and isinstance(retry, CheckinRecord)
        assert retry.replayed and retry.agent_id == "qa" and retry.expires_at == renewed.expires_at
        await raises(
            IdempotencyConflict, mesh.checkin(request.model_copy(update={"role": "builder"}), idempotency_key="c-1")
        )
        alice = await join(mesh, "alice")
        await send(mesh, alice, to="qa")
        assert not (await acked(mesh, first.token, 1, "a-1")).replayed
        assert (await acked(mesh, first.token, 1, "a-1")).replayed
        await raises(IdempotencyConflict, acked(mesh, first.token, 0, "a-1"))
        out = await mesh.checkout(CheckoutRequest(confirm=True), token=alice, idempotency_key="o-1")
        again = await mesh.checkout(CheckoutRequest(confirm=True), token=alice, idempotency_key="o-1")
        assert not replayed(out) and replayed(again)


@check
async def idempotency_key_is_free_again_once_swept(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice", ttl_seconds=86400)
        bob = await join(mesh, "bob", ttl_seconds=86400)
        first = SendRequest(to="bob", body="one", confirm=True, idempotency_key="daily")
        await mesh.send(first, token=alice)
        half = mesh.limits.idempotency_ttl.total_seconds() / 2
        clock.advance(half)
        for token in (alice, bob):  # keeps both leases alive across the wait
            await mesh.read_inbox(token=token)
        clock.advance(half + 1)
        # Expired but not yet swept: still binding (a retry replays, a different request conflicts).
        assert replayed(await mesh.send(first, token=alice))
        second = first.model_copy(update={"body": "two"})
        await raises(IdempotencyConflict, mesh.send(second, token=alice))
        assert (await mesh.sweep()).idempotency_keys == 1
        assert not replayed(await mesh.send(second, token=alice))


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
    async with make(FakeClock()) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        empty = await mesh.read_inbox(token=bob, wait_seconds=0.2)
        assert empty.messages == [] and empty.next_cursor == 0
        pages = []

        async def poll() -> None:
            pages.append(await mesh.read_inbox(token=bob, wait_seconds=30))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                await _until_waiting(mesh)
                await send(mesh, alice, "wake up", to="bob")
        assert [m.body for m in pages[0].messages] == ["wake up"]
        assert pages[0] == await mesh.read_inbox(token=bob, after=0), "a page handed over with the wake-up is the read"


@check
async def concurrent_sends_get_unique_contiguous_sequences(make: MeshFactory) -> None:
    async with make(FakeClock()) as mesh:
        senders = [await join(mesh, f"s{i}") for i in range(4)]
        inbox_token = await join(mesh, "sink", role="sink")
        await join(mesh, "sink2", role="sink")

        async def burst(token: str, i: int) -> None:
            for n in range(5):
                # Direct and fan-out sends, and agents messaging each other, interleaved.
                await send(mesh, token, role="sink") if n % 2 else await send(mesh, token, to="sink")
                await send(mesh, token, to=f"s{(i + 1) % 4}")

        async with anyio.create_task_group() as tg:
            for i, token in enumerate(senders):
                tg.start_soon(burst, token, i)
        page = await mesh.read_inbox(token=inbox_token, limit=100)
        assert [m.seq for m in page.messages] == list(range(1, 21))
        assert len({m.message_id for m in page.messages}) == 20


# ---------------------------------------------------------------------------------------------------- receipts


def _times(receipts: MessageReceipts) -> dict[str, tuple[Any, ...]]:
    return {r.agent_id: (r.stored_at, r.woken_at, r.read_at, r.acknowledged_at) for r in receipts.receipts}


@check
async def receipts_record_each_first_read_and_ack(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob", role="rev")
        carol = await join(mesh, "carol", role="rev")
        dave = await join(mesh, "dave")
        t0 = clock()
        direct = await sent(mesh, alice, "to bob", to="bob")
        fanned = await sent(mesh, alice, "to reviewers", role="rev")
        assert direct.message_id is not None and fanned.message_id is not None
        shown = await mesh.receipts(direct.message_id, token=alice)
        assert (shown.sender, shown.sent_at) == ("alice", t0)
        assert _times(shown) == {"bob": (t0, None, None, None)}, "stored only, until something else happens"
        clock.advance(5)
        t1 = clock()
        assert [m.seq for m in (await mesh.read_inbox(token=bob, limit=1)).messages] == [1]
        clock.advance(5)
        await mesh.read_inbox(token=bob)
        assert _times(await mesh.receipts(direct.message_id, token=alice)) == {"bob": (t0, None, t1, None)}
        t2 = clock()
        await acked(mesh, bob, 1)
        clock.advance(5)
        await acked(mesh, bob, 2)
        assert _times(await mesh.receipts(direct.message_id, token=bob)) == {"bob": (t0, None, t1, t2)}
        everyone = _times(await mesh.receipts(fanned.message_id, token=alice))
        assert everyone == {"bob": (t0, None, t2, clock()), "carol": (t0, None, None, None)}
        own = await mesh.receipts(fanned.message_id, token=carol)
        assert _times(own) == {"carol": (t0, None, None, None)}, "a recipient sees its own receipt only"
        # To anyone else the message does not exist: the same refusal as for an id never used.
        other = await raises(MessageNotFound, mesh.receipts(direct.message_id, token=dave))
        never = await raises(MessageNotFound, mesh.receipts("0" * 32, token=dave))
        assert other.problem_extra["code"] == never.problem_extra["code"] == "message_not_found"
        await raises(TokenRequired, mesh.receipts(direct.message_id, token=None))


@check
async def receipts_tell_a_waiting_reader_and_a_follower_from_a_read(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        pages: list[InboxPage] = []

        async def poll() -> None:
            pages.append(await mesh.read_inbox(token=bob, wait_seconds=30))

        assert (await sent(mesh, alice, "before", to="bob")).followed == [], "nobody follows bob's inbox yet"
        await acked(mesh, bob, 1)
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                await _until_waiting(mesh)
                first = await sent(mesh, alice, "while waiting", to="bob")
        assert [m.body for m in pages[0].messages] == ["while waiting"] and first.message_id is not None
        assert first.followed == ["bob"], "the sender is told a reader follows bob's inbox"
        t0 = clock()
        assert _times(await mesh.receipts(first.message_id, token=alice)) == {"bob": (t0, t0, t0, None)}
        clock.advance(31)
        second = await sent(mesh, alice, "followed", to="bob")
        assert second.message_id is not None and second.followed == [], "the long-poll's wait is over"
        clock.advance(5)
        followed = await mesh.read_inbox(token=bob, after=2, follow=True)
        assert [m.body for m in followed.messages] == ["followed"]
        # A follower (an SSE stream, the MCP follower) was handed it: woken, not read by the agent yet.
        t1 = clock() - timedelta(seconds=5)
        assert (await mesh.list_agents()).agents[0].agent_id == "alice"
        assert _times(await mesh.receipts(second.message_id, token=alice)) == {"bob": (t1, clock(), None, None)}


# ---------------------------------------------------------------------------------------------------- hygiene


@check
async def sweeper_keeps_unread_and_drops_what_is_spent(make: MeshFactory) -> None:
    clock = FakeClock()
    async with make(clock) as mesh:
        alice = await join(mesh, "alice", ttl_seconds=86400)
        bob = await join(mesh, "bob", ttl_seconds=86400)
        await join(mesh, "ghost", ttl_seconds=60)
        await send(mesh, alice, "read", to="bob")
        await send(mesh, alice, "unread", to="bob")
        await send(mesh, alice, "for ghost", to="ghost")
        await acked(mesh, bob, 1, "x")
        nothing = await mesh.sweep()
        assert (nothing.messages, nothing.inbox_entries, nothing.agents) == (0, 0, 0)
        # Keep alice and bob live across the retention window (a sweep is about spent rows, not live agents).
        waited = 0.0
        while waited <= mesh.limits.read_retention.total_seconds() + 120:
            clock.advance(80_000)
            waited += 80_000
            await mesh.unread(token=alice)
            await mesh.unread(token=bob)
        # Batches of one row per kind and transaction: the sweeper loops until a batch comes back short.
        report = await Mesh(mesh.store, mesh.notifier, clock=clock, limits=replace(mesh.limits, sweep_batch=1)).sweep()
        assert report.agents == 1 and report.idempotency_keys == 1
        assert report.inbox_entries == 2 and report.messages == 2, report
        assert (await mesh.sweep()).total() == 0
        page = await mesh.read_inbox(token=bob, after=0)
        assert [m.body for m in page.messages] == ["unread"]
        assert ids(await mesh.list_agents(DirectoryQuery(include_expired=True))) == ["alice", "bob"]
