"""A2A agents' health in the service: an agent that did not resolve is retried with backoff until it does; an agent
whose calls keep failing shows ``degraded`` with the last error, and ``ok`` again after a success; an unknown tool's
404 lists the tools there are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from muster_api.a2a.component import DEGRADED_AFTER
from tests.a2a.peers import raw_peer
from tests.a2a.test_resolution import CARD, v1_card
from tests.a2a.test_service import write_config
from tests.support.app import serve

pytestmark = pytest.mark.anyio


async def statuses(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in (await client.get("/a2a/agents")).json()["agents"]}


async def answer_hello(request: Request) -> Response:
    body = await request.json()
    message = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hello"}]}
    return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": {"message": message}})


async def test_an_agent_down_at_start_is_retried_until_it_resolves(db_url: str, tmp_path: Path) -> None:
    async with raw_peer() as late:
        late.text(CARD, "starting", status=503)
        config = write_config(tmp_path / "muster.toml", {"late": {"card": late.base}})
        async with serve(db_url, config=config) as client:
            assert (await statuses(client))["late"]["status"] == "error"
            late.json(CARD, v1_card("Late", late.base + "/rpc"))
            late.routes["/rpc"] = answer_hello
            # No reload asked for: the service retries by itself (first retry after about a second).
            with anyio.fail_after(30):
                while (await statuses(client))["late"]["status"] != "ok":
                    await anyio.sleep(0.1)
            (tool,) = (await statuses(client))["late"]["tools"]
            called = await client.post(f"/a2a/tools/{tool['name']}/call", json={"task": "hi"})
            assert called.json()["text"] == "hello"


async def test_repeated_call_failures_degrade_and_a_success_restores(db_url: str, tmp_path: Path) -> None:
    async with raw_peer() as flaky:
        flaky.json(CARD, v1_card("Flaky", flaky.base + "/rpc"))
        flaky.text("/rpc", "[1, 2, 3]")  # not a JSON-RPC answer: the call itself fails
        config = write_config(tmp_path / "muster.toml", {"flaky": {"card": flaky.base}})
        async with serve(db_url, config=config) as client:
            (tool,) = (await statuses(client))["flaky"]["tools"]
            call = f"/a2a/tools/{tool['name']}/call"
            for n in range(1, DEGRADED_AFTER + 1):
                assert (await client.post(call, json={"task": "x"})).json()["is_error"]
                shown = (await statuses(client))["flaky"]
                if n < DEGRADED_AFTER:
                    assert shown["status"] == "ok", "one failure may be the task's fault"
            assert shown["status"] == "degraded" and "Invalid JSON-RPC response" in shown["error"]
            flaky.routes["/rpc"] = answer_hello
            assert (await client.post(call, json={"task": "x"})).json()["text"] == "hello"
            shown = (await statuses(client))["flaky"]
            assert shown["status"] == "ok" and shown["error"] is None


async def test_an_unknown_tool_lists_the_tools(db_url: str, tmp_path: Path) -> None:
    async with raw_peer() as peer:
        peer.json(CARD, v1_card("Known", peer.base + "/rpc"))
        config = write_config(tmp_path / "muster.toml", {"known": {"card": peer.base}})
        async with serve(db_url, config=config) as client:
            names = [t["name"] for t in (await statuses(client))["known"]["tools"]]
            missing = await client.post("/a2a/tools/Nope_do/call", json={"task": "x"})
            assert missing.status_code == 404
            body = missing.json()
            assert body["code"] == "unknown_tool" and body["tool"] == "Nope_do"
            assert body["tools"] == names and names[0] in body["detail"]
