"""A mesh notification between instances carries the message when it fits: the woken waiter on the other instance
gets the entry as one on the sending instance does, and falls back to reading the store when it does not fit."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import pytest
from sqlalchemy import text

from muster_api.db.dialect import dialect_of
from muster_api.db.engine import create_engine
from muster_api.db.notify import MAX_PAYLOAD, PgNotifier
from muster_api.mesh.component import make_store
from muster_api.settings import Settings
from muster_mesh import CheckinRecord, CheckinRequest, InboxEntry, Mesh, MessageRecord, SendRequest, SendResult
from muster_mesh.tokens import token_hash
from tests.support.databases import PostgresServer

pytestmark = pytest.mark.anyio


def message(body: str) -> MessageRecord:
    return MessageRecord("m1", "alice", body, "t-1", datetime(2026, 1, 5, 9, 0, 0, 123456, tzinfo=UTC))


async def test_the_other_instance_is_handed_the_message() -> None:
    # Never connects: payloads are built and read in Python.
    engine = create_engine("postgresql+asyncpg://postgres@127.0.0.1:5432/unused")
    try:
        one, two = PgNotifier(engine), PgNotifier(engine)
        sent = message('héllo {"not": "json"}|,')
        channel, payload = one.payload(["bob", "carol"], sent, {"bob": 3, "carol": 7})
        assert channel == one.channel and payload is not None
        async with two.subscribe("bob") as bob, two.subscribe("carol") as carol, one.subscribe("bob") as echo:
            one._on_notify(None, 0, channel, payload)  # its own echo: already woken in-process
            two._on_notify(None, 0, channel, payload)
            with anyio.fail_after(5):
                await bob.wait()
            assert bob.take() == [InboxEntry(3, sent)]
            assert carol.take() == [InboxEntry(7, sent)]
            assert echo.take() == []

            big = message("x" * MAX_PAYLOAD)
            channel, payload = one.payload(["bob"], big, {"bob": 4})
            assert payload == f"{one.instance}|bob", "too big to carry: the recipients only"
            two._on_notify(None, 0, channel, payload)
            with anyio.fail_after(5):
                await bob.wait()
            assert bob.take() == [], "woken without the entry: the waiter reads the store"
    finally:
        await engine.dispose()


@pytest.mark.postgres  # LISTEN/NOTIFY between two notifiers on one database
async def test_a_direct_send_hands_the_other_instance_its_message(postgres_server: PostgresServer) -> None:
    db_url = postgres_server.create(migrated=True)
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        sending, waiting = PgNotifier(engine), PgNotifier(engine)
        async with anyio.create_task_group() as tg:
            await tg.start(waiting.run)
            await tg.start(sending.run)  # publishes on its own listening connection
            store = make_store(engine, dialect_of(engine))
            mesh = Mesh(store, sending)
            bob = await mesh.checkin(CheckinRequest(agent_id="bob", confirm=True))
            alice = await mesh.checkin(CheckinRequest(agent_id="alice", confirm=True))
            assert isinstance(alice, CheckinRecord) and isinstance(bob, CheckinRecord)
            async with waiting.subscribe("bob") as sub:
                for n, body in enumerate(['first {"x": 1}|,', "second"], start=1):
                    sent = await mesh.send(SendRequest(to="bob", body=body, confirm=True), token=alice.token)
                    with anyio.fail_after(10):
                        await sub.wait()
                    (entry,) = sub.take()
                    assert isinstance(sent, SendResult) and entry.message.message_id == sent.message_id
                    assert (entry.seq, entry.message.body, entry.message.sender) == (n, body, "alice")
                big = "x" * MAX_PAYLOAD
                await mesh.send(SendRequest(to="bob", body=big, confirm=True), token=alice.token)
                with anyio.fail_after(10):
                    await sub.wait()
                assert sub.take() == [], "too big to carry: woken with the recipient only"
            await store.aclose()
            tg.cancel_scope.cancel()
    finally:
        await engine.dispose()
        postgres_server.drop(db_url)


async def test_wake_ups_published_meanwhile_leave_in_one_statement() -> None:
    # Never connects: the statement is replaced by a recorder that holds the first one until the rest queued up.
    engine = create_engine("postgresql+asyncpg://postgres@127.0.0.1:5432/unused")
    try:
        notifier = PgNotifier(engine)
        statements: list[list[str]] = []
        release = anyio.Event()

        async def record(payloads: list[str]) -> None:
            statements.append(payloads)
            if len(statements) == 1:
                await release.wait()

        notifier._notify_now = record  # type: ignore[method-assign]
        sent = message("hi")
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for n in range(1, 11):
                    tg.start_soon(notifier.publish, [f"agent-{n:02d}"], {f"agent-{n:02d}": InboxEntry(n, sent)})
                    while len(statements) < 1:  # the first publish's statement is under way before the others come
                        await anyio.sleep(0)
                while len(notifier._queued) < 9:
                    await anyio.sleep(0)
                release.set()
        assert [len(s) for s in statements] == [1, 9], "the first alone, then everything queued while it ran"
        assert '"agent-01":1' in statements[0][0] and all(
            p.startswith(f"{notifier.instance}|{{") for p in statements[1]
        )
    finally:
        await engine.dispose()


@pytest.mark.postgres  # what a committed send's statement notified, seen by a listener
async def test_a_direct_send_statement_notifies_no_one_itself(postgres_server: PostgresServer) -> None:
    # PostgreSQL commits the transactions that NOTIFY one at a time, each through its WAL flush: the statement that
    # stores a message must not be one of them. Its wake-up is published after the commit.
    db_url = postgres_server.create(migrated=True)
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        listening = PgNotifier(engine)
        seen: list[str] = []
        listening._on_notify = lambda _conn, _pid, _channel, payload: seen.append(payload)  # type: ignore[method-assign]

        async def everything_heard(sentinel: str) -> list[str]:
            # Notifications arrive in commit order: once the sentinel is heard, all committed before it were too.
            async with engine.connect() as conn:
                await conn.execute(text("SELECT pg_notify(:c, :p)"), {"c": listening.channel, "p": sentinel})
                await conn.commit()
            with anyio.fail_after(10):
                while sentinel not in seen:
                    await anyio.sleep(0.01)
            heard = seen[: seen.index(sentinel)]
            seen.clear()
            return heard

        async with anyio.create_task_group() as tg:
            await tg.start(listening.run)
            sending = PgNotifier(engine)
            await tg.start(sending.run)  # publishes on its own listening connection
            store = make_store(engine, dialect_of(engine))
            mesh = Mesh(store, sending)
            bob = await mesh.checkin(CheckinRequest(agent_id="bob", confirm=True))
            alice = await mesh.checkin(CheckinRequest(agent_id="alice", confirm=True))
            assert isinstance(alice, CheckinRecord) and isinstance(bob, CheckinRecord) and alice.token
            await mesh.send(SendRequest(to="bob", body="warm the token's hints", confirm=True), token=alice.token)
            assert len(await everything_heard("first")) == 1, "the send's wake-up, published after its commit"
            delivered = await store.renew_and_deliver(
                token_hash(alice.token), "bob", datetime.now(UTC), message_id="m2", body="quiet", thread_id=None
            )
            assert delivered is not None and delivered[0].seq == 2, "stored in one statement"
            assert await everything_heard("second") == [], "the statement that stored it notified no one"
            await store.aclose()
            tg.cancel_scope.cancel()
    finally:
        await engine.dispose()
        postgres_server.drop(db_url)
