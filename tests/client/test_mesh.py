"""MusterClient and AsyncMusterClient against a live service: typed answers, previews, the token kept by the client,
idempotent replays, long-polls and SSE streams."""

from __future__ import annotations

import anyio
import pytest

from muster_client import (
    AckResult,
    AgentList,
    AsyncMusterClient,
    CheckinPreview,
    CheckinRecord,
    CheckoutResult,
    InboxMessage,
    MusterClient,
    SendPreview,
    SendResult,
)
from tests.client.support import API_KEY
from tests.mesh.support import ServerProcess

# Slow: a live service process.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def test_mesh_round_trip(service: ServerProcess, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    me, qa, reviewers = f"{name}-builder", f"{name}-qa", f"{name}-reviewer"
    monkeypatch.setenv("MUSTER_URL", service.base_url + "/")
    monkeypatch.setenv("MUSTER_API_KEY", API_KEY)
    with MusterClient() as builder, MusterClient() as reviewer:
        assert builder.url == service.base_url, "MUSTER_URL is read, without its trailing slash"

        preview = builder.checkin(me, role="builder", status="writing the client")
        assert isinstance(preview, CheckinPreview) and preview.action == "create"
        assert preview.agent.ttl_seconds == 3600 and builder.token is None
        assert builder.agents(role="builder", repo=name).agents == [], "a preview changes nothing"

        record = builder.checkin(me, role="builder", repo=name, status="writing the client", confirm=True)
        assert isinstance(record, CheckinRecord) and record.token and builder.token == record.token
        assert record.token not in repr(record) and record.token not in repr(builder)
        reviewer.checkin(qa, role=reviewers, caps=["merge"], ttl_seconds=600, confirm=True)

        listing = builder.agents(role=reviewers)
        assert isinstance(listing, AgentList)
        [seen] = listing.agents
        assert (seen.agent_id, seen.caps, seen.ttl_seconds, seen.alive) == (qa, ["merge"], 600, True)
        assert builder.agent(me).status == "writing the client"

        would = builder.send("PR #12 is ready", role=reviewers)
        assert isinstance(would, SendPreview) and would.recipients == [qa]
        assert reviewer.inbox().messages == []

        first = builder.send("PR #12 is ready", role=reviewers, thread_id="pr-12", confirm=True, idempotency_key=name)
        assert isinstance(first, SendResult) and first.stored == 1 and not first.replayed
        again = builder.send("PR #12 is ready", role=reviewers, thread_id="pr-12", confirm=True, idempotency_key=name)
        assert isinstance(again, SendResult) and again.replayed and again.message_id == first.message_id

        unread = builder.backlog(role=reviewers)
        assert [(b.agent_id, b.unread) for b in unread.agents] == [(qa, 1)] and unread.total == 1
        page = reviewer.inbox()
        [message] = page.messages
        assert isinstance(message, InboxMessage)
        assert (message.sender, message.body, message.thread_id) == (me, "PR #12 is ready", "pr-12")
        acked = reviewer.ack(page.next_cursor, confirm=True)
        assert isinstance(acked, AckResult) and acked.unread == 0
        assert [b.unread for b in builder.backlog(role=reviewers).agents] == [0]

        # The synchronous stream: what is stored, as it is read (closing the iterator ends the request).
        builder.send("one", to=qa, confirm=True)
        builder.send("two", to=qa, confirm=True)
        stream = reviewer.stream_inbox()
        assert [next(stream).body, next(stream).body] == ["one", "two"]
        stream.close()

        gone = builder.checkout(confirm=True)
        assert isinstance(gone, CheckoutResult) and not gone.agent.alive and builder.token is None


def test_a_follower_read_is_woken_not_read_nor_activity(service: ServerProcess, name: str) -> None:
    me, peer = f"{name}-follower", f"{name}-peer"
    with (
        MusterClient(service.base_url, api_key=API_KEY) as agent,
        MusterClient(service.base_url, api_key=API_KEY) as sender,
    ):
        agent.checkin(me, confirm=True)
        sender.checkin(peer, confirm=True)
        active_at = sender.agent(me).last_activity
        sent = sender.send("counted, not read", to=me, confirm=True)
        assert isinstance(sent, SendResult) and sent.message_id is not None

        counted = agent.inbox(follow=True)
        assert [m.body for m in counted.messages] == ["counted, not read"], "the caller's own inbox, in full"
        (receipt,) = sender.receipts(sent.message_id).receipts
        assert receipt.woken_at is not None and receipt.read_at is None
        seen = sender.agent(me)
        assert seen.last_activity == active_at, "a follower's read is not the agent's activity"
        assert seen.last_seen_at is not None and active_at is not None and seen.last_seen_at > active_at, "renewed"

        agent.inbox()
        (receipt,) = sender.receipts(sent.message_id).receipts
        assert receipt.read_at is not None, "a plain read is the agent reading it"
        assert sender.agent(me).last_activity != active_at


async def test_async_long_poll_and_stream(service: ServerProcess, name: str) -> None:
    url = service.base_url
    async with (
        AsyncMusterClient(url, api_key=API_KEY) as sender,
        AsyncMusterClient(url, api_key=API_KEY) as reader,
    ):
        await sender.checkin(f"{name}-sender", confirm=True)
        await reader.checkin(f"{name}-reader", confirm=True)
        to = f"{name}-reader"
        got: list[str] = []

        async def read() -> None:
            page = await reader.inbox(wait_seconds=30)
            got.extend(m.body for m in page.messages)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await sender.send("wake up", to=to, confirm=True)
        assert got == ["wake up"]

        # A long-poll outlasts the client's own timeout: the wait is added to the read timeout.
        async with AsyncMusterClient(url, api_key=API_KEY, token=reader.token, timeout=0.5) as short:
            empty = await short.inbox(after=1, wait_seconds=1.5)
        assert empty.messages == [] and empty.next_cursor == 1

        streamed: list[str] = []
        with anyio.fail_after(20):
            stream = reader.stream_inbox(after=1)
            await sender.send("live one", to=to, confirm=True)
            async for message in stream:
                streamed.append(message.body)
                if len(streamed) == 1:
                    await sender.send("live two", to=to, confirm=True)
                else:
                    break
            await stream.aclose()
        assert streamed == ["live one", "live two"]


def test_search_mine_and_all(service: ServerProcess, name: str) -> None:
    with (
        MusterClient(service.base_url, api_key=API_KEY) as alice,
        MusterClient(service.base_url, api_key=API_KEY) as bob,
    ):
        alice.checkin(f"{name}-alice", confirm=True)
        bob.checkin(f"{name}-bob", confirm=True)
        sent = alice.send(f"{name} release notes drafted", to=f"{name}-bob", thread_id="rel", confirm=True)
        assert isinstance(sent, SendResult)
        [hit] = bob.search(f"{name} drafted").hits
        assert (hit.message_id, hit.sender, hit.thread_id) == (sent.message_id, f"{name}-alice", "rel")
        assert "«drafted»" in hit.snippet
        assert [h.message_id for h in alice.search(name, view="all").hits] == [sent.message_id]
