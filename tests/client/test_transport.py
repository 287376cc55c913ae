"""Both clients carry their calls over the ``transport=`` they are given (httpx's seam): the request as the service
would see it, and the answer read back through the same path as over a socket."""

from __future__ import annotations

import json

import httpx
import pytest

from muster_client import AsyncMusterClient, MusterClient, NotFound, Ready

pytestmark = pytest.mark.anyio

SEEN: list[httpx.Request] = []


def answer(request: httpx.Request) -> httpx.Response:
    SEEN.append(request)
    if request.url.path == "/readyz":
        return httpx.Response(200, json={"status": "ready", "database": "sqlite", "revision": "head"})
    problem = {"title": "Not Found", "status": 404, "code": "agent_not_found", "detail": "no agent 'x'"}
    return httpx.Response(404, content=json.dumps(problem), headers={"Content-Type": "application/problem+json"})


def test_sync_client_over_a_given_transport() -> None:
    SEEN.clear()
    with MusterClient("http://muster.test", api_key="k", transport=httpx.MockTransport(answer)) as client:
        assert client.ready() == Ready(status="ready", database="sqlite", revision="head")
        with pytest.raises(NotFound) as missing:
            client.agent("x")
    assert missing.value.code == "agent_not_found"
    assert [r.url.path for r in SEEN] == ["/readyz", "/mesh/agents/x"]
    assert all(r.headers["X-API-Key"] == "k" and r.url.host == "muster.test" for r in SEEN)


async def test_async_client_over_a_given_transport() -> None:
    SEEN.clear()
    transport = httpx.MockTransport(answer)
    async with AsyncMusterClient("http://muster.test", api_key="k", token="t", transport=transport) as client:
        assert await client.ready() == Ready(status="ready", database="sqlite", revision="head")
        with pytest.raises(NotFound) as missing:
            await client.agent("x")
    assert missing.value.code == "agent_not_found"
    assert [r.url.path for r in SEEN] == ["/readyz", "/mesh/agents/x"]
    assert all(r.headers["X-API-Key"] == "k" and r.url.host == "muster.test" for r in SEEN)
    assert SEEN[1].headers["Authorization"] == "Bearer t"
