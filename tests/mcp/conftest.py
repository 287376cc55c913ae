"""One live service per module and database, with a real a2a-sdk agent in its config (see tests/client)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.a2a.peers import Peer, a2a_peer
from tests.client.conftest import module_db_url, name  # noqa: F401  (fixtures shared with the client's tests)
from tests.client.support import live_service_in_thread
from tests.mesh.support import ServerProcess


@pytest.fixture(scope="module")
async def peer() -> AsyncIterator[Peer]:
    async with a2a_peer("Alpha") as alpha:
        yield alpha


@pytest.fixture(scope="module")
async def service(
    module_db_url: str,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    peer: Peer,
) -> AsyncIterator[ServerProcess]:
    agents: dict[str, dict[str, object]] = {"alpha": {"card": peer.base, "pollEvery": 20}}
    async with live_service_in_thread(module_db_url, tmp_path_factory.mktemp("config"), agents=agents) as server:
        yield server
