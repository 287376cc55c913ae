"""One live service per module and database, with a real a2a-sdk agent in its config (see tests/client)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.a2a.peers import Peer, a2a_peer
from tests.client.conftest import db_url, name  # noqa: F401  (fixtures shared with the client's tests)
from tests.client.support import live_service_in_thread
from tests.dispatch.conftest import (  # noqa: F401  (the real CLIs and the fake model servers, for the host tests)
    anthropic_server,
    fake_anthropic,
    fake_openai,
    installed_clis,
    openai_server,
)
from tests.mesh.support import ServerProcess


@pytest.fixture(scope="module")
async def peer() -> AsyncIterator[Peer]:
    async with a2a_peer("Alpha") as alpha:
        yield alpha


@pytest.fixture(scope="module")
async def service(
    db_url: str,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    peer: Peer,
) -> AsyncIterator[ServerProcess]:
    agents: dict[str, dict[str, object]] = {"alpha": {"card": peer.base, "pollEvery": 20}}
    async with live_service_in_thread(db_url, tmp_path_factory.mktemp("config"), agents=agents) as server:
        yield server
