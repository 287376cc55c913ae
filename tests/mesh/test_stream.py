"""The inbox as Server-Sent Events, through a real server process on 127.0.0.1 (in-process transports buffer)."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from tests.mesh.support import auth, join, server_process

# A server process per test.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def events(
    client: httpx.AsyncClient, headers: dict[str, str], count: int, on_first: object = None
) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    async with client.stream("GET", "/mesh/inbox/stream", headers=headers) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        async for line in stream.aiter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if fields.get("event") == "message":
                seen.append((fields["id"], json.loads(fields["data"])["body"]))
                if len(seen) == 1 and callable(on_first):
                    await on_first()
                if len(seen) == count:
                    return seen
            fields = {}
    return seen


async def test_stream_delivers_backlog_then_live_messages_and_resumes(db_url: str) -> None:
    with server_process(db_url) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
            alice = await join(client, "alice")
            bob = await join(client, "bob")

            async def send(body: str) -> None:
                msg = {"to": "bob", "body": body, "confirm": True}
                assert (await client.post("/mesh/messages", json=msg, headers=auth(alice))).status_code == 200

            await send("first")
            unauthorised = await client.get("/mesh/inbox/stream")
            assert unauthorised.status_code == 401 and unauthorised.json()["code"] == "token_required"
            with anyio.fail_after(20):
                got = await events(client, auth(bob), 2, on_first=lambda: send("second"))
            assert got == [("1", "first"), ("2", "second")]
            await send("third")
            with anyio.fail_after(20):
                resumed = await events(client, {**auth(bob), "Last-Event-ID": "2"}, 1)
            assert resumed == [("3", "third")], "Last-Event-ID resumes after the last event seen"


async def test_a_stream_wakes_and_only_a_read_reads(db_url: str) -> None:
    with server_process(db_url) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
            alice = await join(client, "alice")
            bob = await join(client, "bob")
            sent = await client.post(
                "/mesh/messages", json={"to": "bob", "body": "hi", "confirm": True}, headers=auth(alice)
            )
            message_id = sent.json()["message_id"]

            async def receipt() -> dict[str, object]:
                r = await client.get(f"/mesh/messages/{message_id}", headers=auth(alice))
                assert r.status_code == 200, r.text
                [only] = r.json()["receipts"]
                assert only["agent_id"] == "bob"
                return dict(only)

            assert {k for k, v in (await receipt()).items() if v is not None} == {"agent_id", "stored_at"}
            with anyio.fail_after(20):
                assert await events(client, auth(bob), 1) == [("1", "hi")]
            streamed = await receipt()
            assert streamed["woken_at"] is not None and streamed["read_at"] is None, "a stream wakes; it does not read"
            assert [m["body"] for m in (await client.get("/mesh/inbox", headers=auth(bob))).json()["messages"]] == [
                "hi"
            ]
            read = await receipt()
            assert read["read_at"] is not None and read["acknowledged_at"] is None
            acked = await client.post("/mesh/inbox/ack", json={"cursor": 1, "confirm": True}, headers=auth(bob))
            assert acked.status_code == 200
            done = await receipt()
            assert done["acknowledged_at"] is not None and done["woken_at"] == streamed["woken_at"], "first times kept"
