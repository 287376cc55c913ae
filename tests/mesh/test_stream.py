"""The inbox as Server-Sent Events, through a real uvicorn server on 127.0.0.1 (in-process transports buffer)."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
import uvicorn

from muster_api.app import create_app
from muster_api.settings import Settings
from tests.mesh.support import auth, join

pytestmark = pytest.mark.anyio


@pytest.fixture
async def base_url(db_url: str) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(Settings(database_url=db_url)),
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        with anyio.fail_after(20):
            while not server.started:
                await anyio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
        server.should_exit = True
    sock.close()


async def test_stream_delivers_backlog_then_live_messages(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=20) as client:
        alice = await join(client, "alice")
        bob = await join(client, "bob")

        async def send(body: str) -> None:
            msg = {"to": {"agent": "bob"}, "body": body, "confirm": True}
            assert (await client.post("/mesh/messages", json=msg, headers=auth(alice))).status_code == 200

        await send("first")
        unauthorised = await client.get("/mesh/inbox/stream")
        assert unauthorised.status_code == 401 and unauthorised.json()["code"] == "token_required"
        events: list[tuple[str, dict[str, object]]] = []
        with anyio.fail_after(20):
            async with client.stream("GET", "/mesh/inbox/stream", headers=auth(bob)) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                fields: dict[str, str] = {}
                async for line in stream.aiter_lines():
                    if line:
                        name, _, value = line.partition(": ")
                        fields[name] = value
                        continue
                    if fields.get("event") == "message":
                        events.append((fields["id"], json.loads(fields["data"])))
                        if len(events) == 1:
                            await send("second")
                        else:
                            break
                    fields = {}
    assert [(i, e["body"]) for i, e in events] == [("1", "first"), ("2", "second")]
