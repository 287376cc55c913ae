"""Egress without a sandbox: the policy's parsing, each harness's model endpoints, what the proxy reads of a request,
and the proxy itself on a unix socket (a real loopback server behind it)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from muster_dispatch import DispatchError, claude_harness, codex_harness, opencode_harness
from muster_dispatch.egress import Egress, EgressProxy, Endpoint, ProxyRequest
from muster_dispatch.sandboxes import check_egress

pytestmark = pytest.mark.anyio


def _endpoints(*texts: str) -> tuple[Endpoint, ...]:
    return tuple(sorted(Endpoint.parse(text) for text in texts))


def test_the_policy_reads_its_four_forms() -> None:
    assert Egress.parse("model") == Egress()
    assert Egress.parse("none").mode == "none" and not Egress.parse("open").proxied
    added = Egress.parse(["PyPI.org:443", "[::1]:8080"])
    assert added.mode == "model" and added.hosts == (Endpoint("pypi.org", 443), Endpoint("::1", 8080))
    assert set(added.allowed(_endpoints("api.openai.com:443"))) == {
        Endpoint("api.openai.com", 443),
        Endpoint("pypi.org", 443),
        Endpoint("::1", 8080),
    }
    assert Egress.parse("none").allowed(_endpoints("api.openai.com:443")) == ()
    for bad in ("everything", ["pypi.org"], ["a:0"], ["a b:1"], 3):
        with pytest.raises(DispatchError) as caught:
            Egress.parse(bad)
        assert caught.value.code == "configuration"


def test_local_refuses_an_egress_it_cannot_enforce() -> None:
    check_egress("local", Egress())
    check_egress("local", Egress("open"))
    check_egress("bwrap", Egress("none"))
    with pytest.raises(DispatchError, match="needs a sandbox"):
        check_egress("local", Egress("none"))


def test_each_harness_names_its_model_endpoints() -> None:
    claude, codex, opencode = claude_harness(), codex_harness(), opencode_harness()
    assert claude.endpoints({"ANTHROPIC_API_KEY": "k"}) == _endpoints("api.anthropic.com:443")
    assert claude.endpoints({}) == _endpoints("api.anthropic.com:443", "platform.claude.com:443")  # a login refreshes
    assert claude.endpoints({"ANTHROPIC_BASE_URL": "http://127.0.0.1:9000", "ANTHROPIC_API_KEY": "k"}) == _endpoints(
        "127.0.0.1:9000"
    )
    assert codex.endpoints({"OPENAI_API_KEY": "k"}) == _endpoints("api.openai.com:443", "chatgpt.com:443")
    assert codex.endpoints({"MUSTER_CODEX_BASE_URL": "http://localhost:81/v1"}) == _endpoints(
        "localhost:81", "auth.openai.com:443"
    )
    keyed = opencode.endpoints({"ANTHROPIC_API_KEY": "k"})
    assert keyed == _endpoints("api.anthropic.com:443", "models.dev:443")
    assert opencode.endpoints({"MUSTER_OPENCODE_BASE_URL": "https://llm.example:8443/v1"}) == _endpoints(
        "llm.example:8443", "models.dev:443"
    )


def test_the_proxy_reads_connect_and_absolute_uris_only() -> None:
    connect = ProxyRequest.parse(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n")
    assert connect == ProxyRequest(Endpoint("api.openai.com", 443), None)
    plain = ProxyRequest.parse(
        b"GET http://127.0.0.1:8000/v1/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nProxy-Connection: keep-alive\r\n"
        b"Connection: keep-alive\r\nAccept: */*\r\n\r\n"
    )
    assert plain is not None and plain.endpoint == Endpoint("127.0.0.1", 8000)
    assert plain.upstream_head == (
        b"GET /v1/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
    for bad in (b"GET /relative HTTP/1.1\r\n\r\n", b"CONNECT nowhere HTTP/1.1\r\n\r\n", b"junk\r\n\r\n"):
        assert ProxyRequest.parse(bad) is None


async def _upstream() -> tuple[asyncio.Server, int]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _through(directory: Path, first_line: bytes, request: bytes) -> bytes:
    handle = os.open(directory, os.O_PATH)  # the path is too long for a socket address: reach it by descriptor
    try:
        reader, writer = await asyncio.open_unix_connection(f"/proc/self/fd/{handle}/egress.sock")
    finally:
        os.close(handle)
    writer.write(first_line + request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


async def test_the_proxy_lets_allowed_endpoints_through_and_reports_the_others(tmp_path: Path) -> None:
    server, port = await _upstream()
    refused: list[Endpoint] = []
    proxy = EgressProxy([Endpoint("127.0.0.1", port)], refused.append)
    await proxy.open(tmp_path / ("long-" * 20) / "egress")  # longer than a socket path may be
    assert proxy.directory is not None
    try:
        get = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        assert (await _through(proxy.directory, f"127.0.0.1:{port}\n".encode(), get)).endswith(b"ok")
        absolute = f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        assert (await _through(proxy.directory, b"proxy\n", absolute)).endswith(b"ok")
        tunnel = f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode()
        assert (await _through(proxy.directory, b"proxy\n", tunnel + get)).startswith(b"HTTP/1.1 200 Connection")
        other = b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n"
        assert (await _through(proxy.directory, b"proxy\n", other)).startswith(b"HTTP/1.1 403")
        assert await _through(proxy.directory, b"127.0.0.1:2\n", get) == b""
        assert refused == [Endpoint("127.0.0.1", 1), Endpoint("127.0.0.1", 2)]
    finally:
        proxy.close()
        server.close()
    assert not proxy.directory.exists()
