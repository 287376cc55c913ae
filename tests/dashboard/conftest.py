"""A real headless Chromium (Debian's ``chromium``, driven by Playwright for Python) and the app served over HTTP on
a loopback port with an injected clock."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from muster_api.app import create_app
from muster_api.db.engine import create_engine
from muster_api.runtime import Runtime
from muster_api.settings import Settings
from muster_mesh import FakeClock
from tests.support.live import live_server

CHROMIUM = Path("/usr/bin/chromium")
# No request of the browser's own (updates, sync, field trials) may leave the machine either.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(os.environ.get("MUSTER_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))


# Module scope, not session: Playwright's sync API keeps an event loop running in this thread while it is open, and
# anyio cannot run the async tests of other modules under it.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not CHROMIUM.exists():
        if os.environ.get("MUSTER_REQUIRE_BROWSER", "") not in ("", "0"):
            pytest.fail(f"MUSTER_REQUIRE_BROWSER is set but {CHROMIUM} is missing (apt-get install chromium)")
        pytest.skip(f"browser tests: {CHROMIUM} is missing (Debian: apt-get install chromium)")
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    yield browser
    browser.close()


@dataclass
class Watched:
    """A page with what it asked for and what it was shown, kept for the assertions."""

    page: Page
    base_url: str
    requests: list[str] = field(default_factory=list)
    not_modified: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def row(self, agent_id: str) -> Any:
        return self.page.locator(f'#roster tr[data-agent-id="{agent_id}"]')


@pytest.fixture
def watch(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``watch(base_url)`` opens a page in a fresh context (its own session storage) and records its traffic."""
    contexts = []

    def open_page(base_url: str) -> Watched:
        context = browser.new_context(viewport={"width": 1400, "height": 800})
        contexts.append(context)
        page = context.new_page()
        watched = Watched(page, base_url)
        page.on("request", lambda r: watched.requests.append(r.url))
        page.on("response", lambda r: r.status == 304 and watched.not_modified.append(r.url))
        page.on("pageerror", lambda e: watched.errors.append(str(e)))

        def on_dialog(dialog: Any) -> None:
            watched.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        return watched

    yield open_page
    for context in contexts:
        context.close()


@dataclass
class LiveApp:
    base_url: str
    clock: FakeClock
    http: httpx.Client
    db_url: str

    def checkin(self, agent_id: str, token: str | None = None, **fields: Any) -> str | None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        r = self.http.post("/mesh/checkin", json={"agent_id": agent_id, "confirm": True, **fields}, headers=headers)
        assert r.status_code == 200, r.text
        minted: str | None = r.json().get("token")
        return minted

    def send(self, token: str, to: str, body: str) -> None:
        r = self.http.post(
            "/mesh/messages",
            json={"to": to, "body": body, "confirm": True},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, r.text


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[Any]:
    """``live(**settings)`` serves the app on ``db_url`` with a FakeClock the test moves."""
    stack: list[Any] = []

    def start(**settings: Any) -> LiveApp:
        remote = tmp_path / "muster.toml"  # written by a test that wants remote A2A agents
        if remote.exists():
            settings["config"] = remote
        config = Settings(database_url=db_url, **settings)
        clock = FakeClock()
        app = create_app(runtime=Runtime(settings=config, engine=create_engine(config.database_url), now=clock))
        server = live_server(app)
        base_url = server.__enter__()
        stack.append(server)
        headers = {"X-API-Key": settings["api_keys"][0]} if settings.get("api_keys") else {}
        http = httpx.Client(base_url=base_url, headers=headers, timeout=30)
        stack.append(http)
        return LiveApp(base_url, clock, http, db_url)

    yield start
    for item in reversed(stack):
        item.__exit__(None, None, None)


def artifact_name(request: pytest.FixtureRequest) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)
