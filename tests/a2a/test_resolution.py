"""Failing agents are isolated and explained: a scripted raw HTTP peer plays the broken servers."""

from __future__ import annotations

import json

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from muster_a2a import CardCache, load_agents, remote_agent
from muster_a2a.origins import credentials_allowed
from tests.a2a.peers import a2a_peer, raw_peer
from tests.support.net import free_port

pytestmark = pytest.mark.anyio

CARD = "/.well-known/agent-card.json"


def v1_card(name: str, url: str, binding: str = "JSONRPC") -> dict[str, object]:
    return {
        "name": name,
        "description": "raw",
        "version": "1",
        "supportedInterfaces": [{"url": url, "protocolBinding": binding, "protocolVersion": "1.0"}],
        "capabilities": {},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "do", "name": "Do", "description": "does", "tags": []}],
    }


async def test_unreachable_port() -> None:
    agent = await remote_agent(f"http://127.0.0.1:{free_port()}", card_cache=CardCache())
    assert (agent.card, agent.tools) == (None, [])
    assert agent.error is not None and agent.error.startswith("unreachable")


async def test_card_http_500() -> None:
    async with raw_peer() as peer:
        peer.text(CARD, "oops", status=500)
        agent = await remote_agent(peer.base, card_cache=CardCache())
    assert agent.card is None and agent.tools == []
    assert agent.error is not None and "HTTP 500" in agent.error


async def test_invalid_json_card() -> None:
    async with raw_peer() as peer:
        peer.text(CARD, "{not json")
        agent = await remote_agent(peer.base + CARD, card_cache=CardCache())
    assert (
        agent.card is None and agent.error is not None and "invalid card" in agent.error and "not JSON" in agent.error
    )


@pytest.mark.parametrize("document", [[1, 2], {"description": "no name"}, {"name": 5}])
async def test_not_a_card(document: object) -> None:
    async with raw_peer() as peer:
        peer.json(CARD, document)
        agent = await remote_agent(peer.base, card_cache=CardCache())
    assert agent.card is None and agent.error is not None and "invalid card" in agent.error


async def test_card_without_interfaces() -> None:
    async with raw_peer() as peer:
        card = v1_card("Lonely", "x")
        del card["supportedInterfaces"]
        peer.json(CARD, card)
        agent = await remote_agent(peer.base, card_cache=CardCache())
    assert agent.card is None and agent.tools == []
    assert agent.error == "no usable interface: the card lists no interfaces"


async def test_grpc_only_card_has_no_usable_interface() -> None:
    agent = await remote_agent(v1_card("Grpc", "https://agent.example:443", binding="GRPC"))
    assert agent.error is not None and "no usable interface" in agent.error and "GRPC" in agent.error


async def test_legacy_well_known_path_is_tried() -> None:
    async with raw_peer() as peer:
        peer.json("/.well-known/agent.json", v1_card("Old", peer.base + "/rpc"))
        agent = await remote_agent(peer.base, card_cache=CardCache())
    assert agent.error is None and agent.card is not None and agent.card.name == "Old"


async def test_plain_http_refused_except_loopback_unless_allowed() -> None:
    agent = await remote_agent("http://agents.example.com", card_cache=CardCache())
    assert agent.error is not None and "plain http refused" in agent.error
    card = v1_card("Remote", "http://agents.example.com/rpc")
    refused = await remote_agent(card)
    assert refused.error is not None and "plain http refused" in refused.error
    allowed = await remote_agent(card, allow_http=True)
    assert allowed.error is None and allowed.endpoint == "http://agents.example.com/rpc"


async def test_jsonrpc_error_response_is_a_tool_error() -> None:
    async with raw_peer() as peer:
        peer.json(CARD, v1_card("Grumpy", peer.base + "/rpc"))

        async def rpc(request: Request) -> Response:
            body = await request.json()
            return JSONResponse(
                {"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32001, "message": "Task not found: t-9"}}
            )

        peer.routes["/rpc"] = rpc
        [tool] = (await remote_agent(peer.base, card_cache=CardCache())).tools
        result = await tool.call("anything")
    assert result.is_error
    assert "Task not found: t-9" in result.text and "Grumpy" in result.text
    assert result.metadata["state"] == "error"


async def test_garbage_rpc_answer_is_a_tool_error() -> None:
    async with raw_peer() as peer:
        peer.json(CARD, v1_card("Garbled", peer.base + "/rpc"))
        peer.text("/rpc", "[1, 2, 3]")
        [tool] = (await remote_agent(peer.base, card_cache=CardCache())).tools
        result = await tool.call("anything")
    assert result.is_error and "Garbled" in result.text


async def test_credentials_stay_on_the_configured_origin() -> None:
    # The card is served by 127.0.0.1 but points its interface at "localhost" (another host): no credentials there.
    async with raw_peer() as card_host, raw_peer(host="localhost") as other:
        card_host.json(CARD, v1_card("Pointer", other.base + "/rpc"))

        async def rpc(request: Request) -> Response:
            body = await request.json()
            return JSONResponse(
                {
                    "jsonrpc": "2.0",
                    "id": body["id"],
                    "result": {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hello"}]}},
                }
            )

        other.routes["/rpc"] = rpc
        secret = {"Authorization": "Bearer s3cret", "X-Api-Key": "k3y"}
        agent = await remote_agent(card_host.base, headers=secret, card_cache=CardCache())
        assert agent.sends_credentials is False
        result = await agent.tools[0].call("hi")
        assert result.text == "hello"
        trusted = await remote_agent(card_host.base, headers=secret, allow_hosts=["localhost"], card_cache=CardCache())
        await trusted.tools[0].call("hi")
    card_request_headers = [h for path, h in card_host.seen if path == CARD]
    assert card_request_headers and all(h.get("authorization") == "Bearer s3cret" for h in card_request_headers)
    untrusted_call, trusted_call = [h for path, h in other.seen if path == "/rpc"]
    assert "authorization" not in untrusted_call and "x-api-key" not in untrusted_call
    assert trusted_call.get("authorization") == "Bearer s3cret" and trusted_call.get("x-api-key") == "k3y"


async def test_credentials_stay_off_the_same_host_on_another_port() -> None:
    # Same host, another port: another origin (another process, perhaps another owner) gets no credentials.
    async with raw_peer() as card_host, raw_peer() as other_port:
        assert httpx.URL(card_host.base).host == httpx.URL(other_port.base).host
        card_host.json(CARD, v1_card("Porter", other_port.base + "/rpc"))

        async def rpc(request: Request) -> Response:
            body = await request.json()
            return JSONResponse(
                {
                    "jsonrpc": "2.0",
                    "id": body["id"],
                    "result": {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hello"}]}},
                }
            )

        other_port.routes["/rpc"] = rpc
        secret = {"Authorization": "Bearer s3cret"}
        agent = await remote_agent(card_host.base, headers=secret, card_cache=CardCache())
        assert agent.sends_credentials is False
        assert (await agent.tools[0].call("hi")).text == "hello"
    (call,) = [h for path, h in other_port.seen if path == "/rpc"]
    assert "authorization" not in call


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://agents.example/rpc", True),
        ("https://agents.example:443/other", True),
        ("https://AGENTS.example/rpc", True),
        ("http://agents.example/rpc", False),  # same host, another scheme
        ("http://agents.example:443/rpc", False),  # same host and port, another scheme
        ("https://agents.example:8443/rpc", False),  # same host, another port
        ("https://other.example/rpc", False),
    ],
)
def test_credentials_compare_scheme_host_and_port(url: str, allowed: bool) -> None:
    assert credentials_allowed(url, "https://agents.example/.well-known/agent-card.json", []) is allowed


async def test_credentials_go_to_the_same_origin_endpoint() -> None:
    async with a2a_peer("Same") as peer:
        agent = await remote_agent(peer.base, headers={"Authorization": "Bearer t"}, card_cache=CardCache())
        assert agent.sends_credentials
        await agent.tools[0].call("message ok")
    rpc_headers = peer.seen_headers[-1]
    assert rpc_headers.get("authorization") == "Bearer t"


async def test_card_cache_honours_max_age_and_etag() -> None:
    now = [0.0]
    cache = CardCache(clock=lambda: now[0])
    async with a2a_peer("Cached", cache_control="max-age=60") as peer:
        for _ in range(3):
            assert (await remote_agent(peer.base, card_cache=cache)).error is None
        card_gets = [h for h in peer.seen_headers if "if-none-match" in h or h.get("accept") == "application/json"]
        assert len(card_gets) == 1, "fresh for 60 s: one fetch"
        now[0] = 61.0
        assert (await remote_agent(peer.base, card_cache=cache)).error is None
        revalidation = peer.seen_headers[-1]
        assert revalidation.get("if-none-match", "").startswith('W/"'), "stale: revalidated with the ETag"


async def test_invalid_card_is_never_cached() -> None:
    cache = CardCache()
    async with raw_peer() as peer:
        good = v1_card("Flaky", peer.base + "/rpc")
        peer.json(CARD, good, headers={"Cache-Control": "max-age=600", "ETag": '"v1"'})
        assert (await remote_agent(peer.base, card_cache=cache)).error is None
        assert len(cache) == 1
        cache_control = {"Cache-Control": "max-age=600"}
        peer.routes.clear()
        peer.json(CARD, {"broken": True}, headers=cache_control)
        # Still fresh: served from the cache without asking.
        assert (await remote_agent(peer.base, card_cache=cache)).error is None
        fresh = CardCache()
        assert (await remote_agent(peer.base, card_cache=fresh)).error is not None
        assert len(fresh) == 0


async def test_one_bad_agent_among_good_ones_and_collisions() -> None:
    async with (
        a2a_peer("Twin", skills=[("echo", "Echo")]) as one,
        a2a_peer("Twin", kind="rest") as two,
        a2a_peer("Other", kind="v03") as three,
        raw_peer() as broken,
    ):
        broken.text(CARD, "nope", status=500)
        config = {
            "agents": {
                "b-twin": {"card": two.base, "pollEvery": 20},
                "a-twin": {"card": one.base, "poll-every": 20},
                "c-other": {"card": three.base, "poll_every": 20},
                "d-broken": {"card": broken.base},
                "e-down": {"card": f"http://127.0.0.1:{free_port()}"},
                "f-off": {"card": one.base, "enabled": False},
                "g-nocard": {"url": one.base},
            }
        }
        async with await load_agents(config, card_cache=CardCache()) as agents:
            assert [a.name for a in agents.agents] == ["a-twin", "b-twin", "c-other", "d-broken", "e-down"]
            assert [t.name for t in agents.tools] == ["Twin_echo", "Twin_echo_2", "Other_echo"]
            [collision] = agents.collisions
            assert collision.model_dump() == {
                "name": "Twin_echo",
                "agent": "b-twin",
                "kept_by": "a-twin",
                "renamed_to": "Twin_echo_2",
            }
            status = agents.status
            assert {n: s.status for n, s in status.items()} == {
                "a-twin": "ok",
                "b-twin": "ok",
                "c-other": "ok",
                "d-broken": "error",
                "e-down": "error",
            }
            assert status["b-twin"].dialect == "v1.0/HTTP+JSON" and status["c-other"].dialect == "v0.3/JSONRPC"
            assert status["d-broken"].error is not None and "HTTP 500" in status["d-broken"].error
            assert "g-nocard" in agents.skipped
            for name, expected in [
                ("Twin_echo", "complete a"),
                ("Twin_echo_2", "complete b"),
                ("Other_echo", "complete c"),
            ]:
                result = await agents.tool(name).call(expected)
                assert result.text.split("\n")[0] == expected.split(" ")[1]
            assert agents.tool("Twin_echo_2").agent.name == "b-twin"


def test_card_document_roundtrip_json() -> None:
    # The card document path: a dict is parsed by the SDK exactly like a fetched one.
    assert json.loads(json.dumps(v1_card("A", "https://a.example/rpc")))["name"] == "A"


async def test_card_redirect_is_not_followed() -> None:
    async with raw_peer() as peer:

        async def moved(request: Request) -> Response:
            return Response(status_code=301, headers={"Location": "https://elsewhere.example/card.json"})

        peer.routes[CARD] = moved
        agent = await remote_agent(peer.base + CARD, headers={"Authorization": "Bearer x"}, card_cache=CardCache())
    assert agent.error is not None and "HTTP 301" in agent.error and "elsewhere.example" in agent.error


@pytest.mark.slow
async def test_slow_answer_outlives_httpx_default_timeout() -> None:
    # httpx's default is 5 s for every phase; an agent that takes 5.5 s to answer must not be cut off.
    import anyio

    async with raw_peer() as peer:
        peer.json(CARD, v1_card("Ponderous", peer.base + "/rpc"))

        async def rpc(request: Request) -> Response:
            body = await request.json()
            await anyio.sleep(5.5)
            task = {
                "id": "t-1",
                "contextId": "c-1",
                "status": {"state": "TASK_STATE_COMPLETED"},
                "artifacts": [{"artifactId": "a", "parts": [{"text": "worth the wait"}]}],
            }
            return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": {"task": task}})

        peer.routes["/rpc"] = rpc
        [tool] = (await remote_agent(peer.base, timeout=20_000, card_cache=CardCache())).tools
        result = await tool.call("take your time")
    assert (result.text, result.is_error, result.metadata["state"]) == ("worth the wait", False, "completed")
