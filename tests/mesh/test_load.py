"""The mesh under load and under a crash, through real server processes on 127.0.0.1.

- Concurrency: 20 senders × 200 messages to 5 long-polling receivers: every message received exactly once, in
  per-sender order, with gap-free inbox sequences.
- Durability: a server killed with SIGKILL while messages are being sent, restarted on the same SQLite file: every
  message whose send was answered is in the inbox.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import anyio
import httpx
import pytest

from tests.mesh.support import auth, join, server_process

# Server processes under load.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SENDERS = 20
PER_SENDER = 200
RECEIVERS = 5


async def test_20_senders_200_messages_5_long_polling_receivers(db_url: str) -> None:
    limits = httpx.Limits(max_connections=SENDERS + RECEIVERS + 5, max_keepalive_connections=SENDERS + RECEIVERS + 5)
    with server_process(db_url) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60, limits=limits) as client:
            receivers = [await join(client, f"rx{r}") for r in range(RECEIVERS)]
            senders = [await join(client, f"tx{s:02d}") for s in range(SENDERS)]
            expected: dict[int, int] = defaultdict(int)
            for s in range(SENDERS):
                for k in range(PER_SENDER):
                    expected[(s + k) % RECEIVERS] += 1
            received: dict[int, list[dict[str, object]]] = defaultdict(list)
            pages: dict[int, int] = defaultdict(int)

            async def receive(r: int) -> None:
                cursor = 0
                while len(received[r]) < expected[r]:
                    url = f"/mesh/inbox?after={cursor}&limit=500&wait_seconds=20"
                    page = (await client.get(url, headers=auth(receivers[r]))).json()
                    assert page["messages"], "a long-poll only comes back empty at its 20 s deadline"
                    received[r] += page["messages"]
                    pages[r] += 1
                    cursor = page["next_cursor"]

            async def send(s: int) -> None:
                for k in range(PER_SENDER):
                    msg = {"to": f"rx{(s + k) % RECEIVERS}", "body": f"{s}:{k}", "confirm": True}
                    r = await client.post("/mesh/messages", json=msg, headers=auth(senders[s]))
                    assert r.status_code == 200 and r.json()["stored"] == 1, r.text

            with anyio.fail_after(240):
                async with anyio.create_task_group() as tg:
                    for r in range(RECEIVERS):
                        tg.start_soon(receive, r)
                    for s in range(SENDERS):
                        tg.start_soon(send, s)

            # Nothing more arrives later: each inbox holds exactly what was sent to it.
            for r in range(RECEIVERS):
                rest = await client.get(f"/mesh/inbox?after={received[r][-1]['seq']}", headers=auth(receivers[r]))
                assert rest.json()["messages"] == []
    everything: list[tuple[int, int]] = []
    for r in range(RECEIVERS):
        messages = received[r]
        assert [m["seq"] for m in messages] == list(range(1, expected[r] + 1)), "gap-free, in order, no repeats"
        per_sender: dict[str, list[int]] = defaultdict(list)
        for m in messages:
            sender, k = str(m["body"]).split(":")
            assert m["from"] == f"tx{int(sender):02d}", "the sender is the token's agent"
            per_sender[sender].append(int(k))
            everything.append((int(sender), int(k)))
        for ks in per_sender.values():
            assert ks == sorted(ks), "each sender's messages arrive in the order they were sent"
    assert len(everything) == len(set(everything)) == SENDERS * PER_SENDER, "every message exactly once"
    assert sum(pages.values()) < SENDERS * PER_SENDER, "long-polls return batches, not one message per poll"


async def test_sigkill_loses_no_answered_message(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'durable.db'}"
    answered: list[str] = []
    with server_process(db_url) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
            receiver = await join(client, "rx", ttl_seconds=3600)
            senders = [await join(client, f"tx{s}", ttl_seconds=3600) for s in range(4)]

            async def send(s: int) -> None:
                for k in range(100_000):
                    msg = {"to": "rx", "body": f"{s}:{k}", "confirm": True}
                    try:
                        r = await client.post("/mesh/messages", json=msg, headers=auth(senders[s]))
                    except httpx.TransportError:
                        return  # the server is gone: this send was never answered
                    assert r.status_code == 200, r.text
                    answered.append(r.json()["message_id"])

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for s in range(len(senders)):
                        tg.start_soon(send, s)
                    while len(answered) < 300:
                        await anyio.sleep(0.01)
                    # Killed mid-stream: sends are in flight at this moment.
                    server.kill()
    assert len(answered) >= 300
    with server_process(db_url) as restarted:
        async with httpx.AsyncClient(base_url=restarted.base_url, timeout=10) as client:
            stored: list[str] = []
            cursor = 0
            while True:
                page = (await client.get(f"/mesh/inbox?after={cursor}&limit=500", headers=auth(receiver))).json()
                stored += [m["message_id"] for m in page["messages"]]
                cursor = page["next_cursor"]
                if not page["has_more"]:
                    break
    missing = set(answered) - set(stored)
    assert not missing, f"{len(missing)} answered sends lost"
    assert len(stored) == len(set(stored))
