"""The service on a loopback port for the ``muster`` command to talk to, and a clean environment to run it in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from muster_api.app import create_app
from muster_api.settings import Settings
from tests.console.support import environment
from tests.support.live import live_server


@pytest.fixture
def service(db_url: str, tmp_path: Path) -> Iterator[Any]:
    """``service(**settings)`` → (base URL, an httpx client on it, the environment ``muster`` runs in)."""
    servers: list[Any] = []

    def start(**settings: Any) -> tuple[str, httpx.Client, dict[str, str]]:
        server = live_server(create_app(Settings(database_url=db_url, **settings)))
        url = server.__enter__()
        servers.append(server)
        http = httpx.Client(base_url=url, timeout=30)
        servers.append(http)
        return url, http, environment(url, tmp_path / "home")

    yield start
    for item in reversed(servers):
        item.__exit__(None, None, None)
