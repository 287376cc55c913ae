"""One live service per test module and database: a server process costs seconds to start on a shared machine,
and each test here works under its own agent ids, so the tests of a module share it. ``db_url`` is therefore
module-scoped here (same legs, same ids, counted as the root fixture's)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.client.support import live_service
from tests.mesh.support import ServerProcess
from tests.support.databases import PostgresServer


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database for a whole module: a new SQLite file, or a new PostgreSQL database dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'muster.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    url = server.create()
    try:
        yield url
    finally:
        server.drop(url)


@pytest.fixture(scope="module")
def service(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with live_service(db_url, tmp_path_factory.mktemp("config")) as server:
        yield server


@pytest.fixture
def name() -> str:
    """A prefix that keeps this test's agent ids apart from the other tests' on the shared service."""
    return f"t{uuid.uuid4().hex[:8]}"
