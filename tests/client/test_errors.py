"""Problem answers become exceptions carrying status, code, detail and the named fields; no answer at all is one
ServiceUnreachable."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from muster_client import (
    ApiError,
    AsyncMusterClient,
    CheckinRecord,
    Conflict,
    InvalidRequest,
    MusterClient,
    MusterClientError,
    NotFound,
    PayloadTooLarge,
    SendResult,
    ServiceUnreachable,
    TooManyRequests,
    Unauthorized,
)
from tests.client.support import API_KEY, live_service
from tests.mesh.support import ServerProcess
from tests.support.net import free_port

# Slow: a live service process.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FANOUT_PER_MINUTE = 2


@pytest.fixture(scope="module")
def service(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A service that allows few fan-out sends, so that its 429 is reached in a few calls."""
    config = tmp_path_factory.mktemp("config")
    with live_service(db_url, config, MUSTER_MESH_FANOUT_PER_MINUTE=str(FANOUT_PER_MINUTE)) as server:
        yield server


def test_problems_raise_with_their_code(service: ServerProcess, name: str) -> None:
    with MusterClient(service.base_url, api_key=API_KEY) as client:
        with pytest.raises(Unauthorized) as no_token:
            client.inbox()
        assert (no_token.value.status, no_token.value.code) == (401, "token_required")
        assert isinstance(no_token.value, ApiError) and isinstance(no_token.value, MusterClientError)

        with pytest.raises(InvalidRequest) as bad:
            client.checkin(f"{name}-a", ttl_seconds=5, confirm=True)
        assert bad.value.status == 422 and bad.value.code == "invalid_request", "no code in the body: named by status"
        assert [e["field"] for e in bad.value.errors] == ["ttl_seconds"]
        assert "ttl_seconds" in bad.value.detail

        with MusterClient(service.base_url, api_key=API_KEY) as other:
            other.checkin(f"{name}-b", confirm=True)
        client.checkin(f"{name}-a", confirm=True)
        with pytest.raises(NotFound) as nobody:
            client.send("hello", to=f"{name}-nobody", confirm=True)
        assert nobody.value.code == "recipient_not_found" and f"{name}-nobody" in nobody.value.detail

        with pytest.raises(PayloadTooLarge) as big:
            client.send("x" * 70_000, to=f"{name}-b", confirm=True)
        assert big.value.code == "message_too_large"

        client.send("one", to=f"{name}-b", confirm=True, idempotency_key=f"{name}-k")
        with pytest.raises(Conflict) as reused:
            client.send("two", to=f"{name}-b", confirm=True, idempotency_key=f"{name}-k")
        assert reused.value.code == "idempotency_conflict"

        with pytest.raises(NotFound) as tool:
            client.a2a_call("Nope_echo", "x")
        assert tool.value.code == "unknown_tool" and "Nope_echo" in tool.value.detail

        for _ in range(FANOUT_PER_MINUTE):
            client.send("all hands", repo=f"{name}-nowhere", confirm=True)
        with pytest.raises(TooManyRequests) as limited:
            client.send("all hands", repo=f"{name}-nowhere", confirm=True)
        assert limited.value.code == "rate_limited" and limited.value.retry_after and limited.value.retry_after >= 1

    with MusterClient(service.base_url) as keyless, pytest.raises(Unauthorized) as guarded:
        keyless.agents()
    assert "X-API-Key" in guarded.value.detail


async def test_problems_raise_with_their_code_async(service: ServerProcess, name: str) -> None:
    """The asynchronous client reads answers through httpx.AsyncClient: the same errors."""
    async with AsyncMusterClient(service.base_url, api_key=API_KEY) as client:
        with pytest.raises(Unauthorized) as no_token:
            await client.inbox()
        assert (no_token.value.status, no_token.value.code) == (401, "token_required")

        with pytest.raises(InvalidRequest) as bad:
            await client.checkin(f"{name}-a", ttl_seconds=5, confirm=True)
        assert [e["field"] for e in bad.value.errors] == ["ttl_seconds"] and "ttl_seconds" in bad.value.detail

        await client.checkin(f"{name}-a", confirm=True)
        with pytest.raises(NotFound) as nobody:
            await client.send("hello", to=f"{name}-nobody", confirm=True)
        assert nobody.value.code == "recipient_not_found" and f"{name}-nobody" in nobody.value.detail

        first = await client.send("once", to=f"{name}-a", confirm=True, idempotency_key=f"{name}-k")
        again = await client.send("once", to=f"{name}-a", confirm=True, idempotency_key=f"{name}-k")
        assert isinstance(first, SendResult) and not first.replayed
        assert isinstance(again, SendResult) and again.replayed and again.message_id == first.message_id

        for _ in range(FANOUT_PER_MINUTE):
            await client.send("all hands", repo=f"{name}-nowhere", confirm=True)
        with pytest.raises(TooManyRequests) as limited:
            await client.send("all hands", repo=f"{name}-nowhere", confirm=True)
        assert limited.value.code == "rate_limited" and limited.value.retry_after and limited.value.retry_after >= 1

    async with AsyncMusterClient(service.base_url) as keyless:
        with pytest.raises(Unauthorized) as guarded:
            await keyless.agents()
    assert "X-API-Key" in guarded.value.detail


async def test_a_service_that_is_not_there_async() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with AsyncMusterClient(url, timeout=5) as client:
        with pytest.raises(ServiceUnreachable) as down:
            await client.agents()
        with pytest.raises(ServiceUnreachable):
            await anext(client.stream_inbox())
    assert down.value.url == url and "ConnectError" in down.value.reason


def test_a_service_that_is_not_there() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with MusterClient(url, timeout=5) as client, pytest.raises(ServiceUnreachable) as down:
        client.agents()
    assert down.value.url == url and str(down.value).startswith(f"the Muster service at {url} is not reachable")


def test_takeover_supersedes_the_lost_token(service: ServerProcess, name: str) -> None:
    with (
        MusterClient(service.base_url, api_key=API_KEY) as first,
        MusterClient(service.base_url, api_key=API_KEY) as second,
    ):
        first.checkin(name, status="working", confirm=True)
        with pytest.raises(Unauthorized) as in_use:
            second.checkin(name, confirm=True)
        assert in_use.value.code == "agent_id_in_use"
        taken = second.checkin(name, takeover=True, confirm=True)
        assert isinstance(taken, CheckinRecord) and taken.token and second.token == taken.token
        assert taken.status == "working", "the fields carry over"
        with pytest.raises(Unauthorized) as old:
            first.inbox()
        assert old.value.code == "superseded"
