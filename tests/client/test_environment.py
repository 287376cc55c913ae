"""The asynchronous client reads the environment httpx's clients trust: ``MUSTER_URL`` and ``MUSTER_API_KEY``, the
proxy variables (``HTTP_PROXY`` through a real forward proxy, ``NO_PROXY`` around it) and the certificates
(``SSL_CERT_FILE`` naming the authority of a service that answers https)."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster_client import AsyncMusterClient, ServiceUnreachable
from tests.client.support import API_KEY
from tests.mcp.proxy import recording_proxy
from tests.mesh.support import ServerProcess
from tests.support.tls import self_signed

# Slow: a live service process.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)
    for var in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


async def test_through_the_proxy_the_environment_names(
    service: ServerProcess, name: str, no_proxy_env: pytest.MonkeyPatch
) -> None:
    async with recording_proxy() as proxy:
        no_proxy_env.setenv("MUSTER_URL", service.base_url)
        no_proxy_env.setenv("MUSTER_API_KEY", API_KEY)
        no_proxy_env.setenv("HTTP_PROXY", proxy.base)
        async with AsyncMusterClient() as client:
            await client.checkin(name, confirm=True)
            await client.send("through the proxy", to=name, confirm=True)
            page = await client.inbox()
            streamed = client.stream_inbox(after=0)
            first = await anext(streamed)
            await streamed.aclose()
        assert [m.body for m in page.messages] == ["through the proxy"] and first.body == "through the proxy"
        sent = [r for r in proxy.requests if r.startswith(f"POST {service.base_url}/mesh/messages?")]
        assert len(sent) == 1 and "through the proxy" in sent[0] and API_KEY in sent[0]
        assert any(r.startswith(f"GET {service.base_url}/mesh/inbox/stream?after=0") for r in proxy.requests)

        seen = len(proxy.requests)
        no_proxy_env.setenv("NO_PROXY", "localhost,127.0.0.1")
        async with AsyncMusterClient() as direct:
            assert (await direct.agents()).agents
        assert len(proxy.requests) == seen, "NO_PROXY names the service's host: the client goes straight to it"


async def test_certificates_from_ssl_cert_file(
    service: ServerProcess, tmp_path: Path, no_proxy_env: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed(tmp_path)
    async with recording_proxy(service.base_url, ssl_certfile=str(cert), ssl_keyfile=str(key)) as tls:
        assert tls.base.startswith("https://")
        async with AsyncMusterClient(tls.base, api_key=API_KEY) as untrusting:
            with pytest.raises(ServiceUnreachable) as refused:
                await untrusting.agents()
        assert "CERTIFICATE_VERIFY_FAILED" in refused.value.reason
        no_proxy_env.setenv("SSL_CERT_FILE", str(cert))
        async with AsyncMusterClient(tls.base, api_key=API_KEY) as trusting:
            await trusting.agents()
        assert any(r.startswith("GET /mesh/agents?") for r in tls.requests)
