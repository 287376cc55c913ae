"""A mesh notification between instances carries the message when it fits: the woken waiter on the other instance
gets the entry as one on the sending instance does, and falls back to reading the store when it does not fit."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import pytest

from muster_api.db.engine import create_engine
from muster_api.db.notify import MAX_PAYLOAD, PgNotifier
from muster_mesh import InboxEntry, MessageRecord

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
