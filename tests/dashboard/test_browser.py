"""The dashboard and the API docs in a real headless Chromium: what a person sees, and that it follows the mesh
without a reload. Each waits on what the page shows (Playwright's ``expect`` polls the DOM), never a fixed sleep."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from playwright.sync_api import expect

from tests.a2a.peers import a2a_peer
from tests.dashboard.conftest import artifact_name
from tests.runs.support import dispatch_env
from tests.support.net import free_port
from tests.support.rows import store_status

pytestmark = pytest.mark.browser

# The bound for a change to show up on an open dashboard.
WITHIN = 5_000
EXPIRED = re.compile(r"\bexpired\b")
STALE = re.compile(r"\bstale\b")


def same_origin(requests: list[str], base_url: str) -> None:
    strays = [url for url in requests if not url.startswith(base_url + "/")]
    assert strays == [], f"requests that left the service: {strays}"


def test_roster_follows_checkins_statuses_and_backlog(live: Any, watch: Any, request: pytest.FixtureRequest) -> None:
    app = live()
    builder = app.checkin("builder-1", role="builder", repo="muster", caps=["merge"], status="writing the store")
    app.checkin("reviewer-1", role="reviewer", repo="docs", status="idle")
    w = watch(app.base_url)
    w.page.goto(app.base_url + "/")
    expect(w.row("builder-1").locator(".status-text")).to_have_text("writing the store")
    expect(w.row("reviewer-1")).to_be_visible()
    expect(w.row("builder-1").locator("td.caps")).to_have_text("merge")
    # Just checked in: at work by the service's reckoning, and said as text with its age.
    expect(w.row("builder-1").locator("td.presence")).to_have_text(re.compile(r"^working · \d+s ago$"))
    expect(w.row("builder-1").locator("td.presence")).to_have_attribute("data-state", "working")
    expect(w.page.locator("#connection")).to_contain_text("live")
    # Polling again is a conditional GET the service answers without a body.
    with w.page.expect_response(lambda r: "/mesh/agents" in r.url and r.status == 304, timeout=WITHIN):
        pass

    tester = app.checkin("tester-1", role="tester", repo="muster", status="running the suite")
    app.checkin("builder-1", token=builder, status="opening the PR")
    expect(w.row("tester-1")).to_be_visible(timeout=WITHIN)
    expect(w.row("builder-1").locator(".status-text")).to_have_text("opening the PR", timeout=WITHIN)

    assert tester is not None
    app.send(tester, "builder-1", "please review")
    expect(w.row("builder-1").locator(".unread")).to_have_text("1", timeout=WITHIN)
    expect(w.row("tester-1").locator(".unread")).to_have_text("0")

    shown = w.row("builder-1").locator(".status-age").text_content()
    expect(w.row("builder-1").locator(".status-age")).not_to_have_text(shown or "", timeout=WITHIN)  # it ticks
    w.screenshot(artifact_name(request) + "-roster")

    w.page.select_option("#filter-repo", "docs")
    expect(w.page.locator("#roster tbody tr")).to_have_count(1)
    expect(w.row("reviewer-1")).to_be_visible()
    w.page.select_option("#filter-repo", "")
    w.page.select_option("#filter-cap", "merge")
    expect(w.page.locator("#roster tbody tr")).to_have_count(1)
    w.page.select_option("#filter-role", "tester")
    expect(w.page.locator("#roster tbody tr")).to_have_count(0)
    expect(w.page.locator("#roster-empty")).to_be_visible()

    assert w.page.evaluate("performance.getEntriesByType('navigation').length") == 1  # never reloaded
    assert w.errors == []
    same_origin(w.requests, app.base_url)


def test_an_expired_agent_is_greyed_then_gone(live: Any, watch: Any, request: pytest.FixtureRequest) -> None:
    app = live()
    app.checkin("short-lived", ttl_seconds=60, status="about to go")
    app.checkin("staying", status="here for the day")
    w = watch(app.base_url)
    w.page.goto(app.base_url + "/")
    expect(w.row("short-lived")).to_be_visible()
    expect(w.row("short-lived")).not_to_have_class(EXPIRED)

    app.clock.advance(61)
    expect(w.row("short-lived")).to_have_class(EXPIRED, timeout=WITHIN)
    expect(w.row("short-lived").locator(".expires")).to_contain_text("ended")
    expect(w.row("short-lived").locator(".tag.expired")).to_be_visible()
    expect(w.row("staying")).not_to_have_class(EXPIRED)
    w.screenshot(artifact_name(request) + "-expired")

    # After the grace period an expired agent leaves the page (the directory keeps it until swept).
    w.page.goto(app.base_url + "/?expired_grace=1")
    expect(w.row("staying")).to_be_visible()
    expect(w.row("short-lived")).to_be_hidden(timeout=WITHIN)


def test_a_quiet_agent_is_marked_stale(live: Any, watch: Any, request: pytest.FixtureRequest) -> None:
    app = live()
    app.checkin("quiet", status="thinking")
    w = watch(app.base_url)
    w.page.goto(app.base_url + "/?stale_heartbeat=120")
    expect(w.row("quiet")).to_be_visible()
    expect(w.row("quiet")).not_to_have_class(STALE)

    app.clock.advance(300)
    app.checkin("busy", status="just arrived")  # a change: the next poll brings the server's ages
    expect(w.row("quiet")).to_have_class(STALE, timeout=WITHIN)
    expect(w.row("quiet").locator(".tag.stale")).to_be_visible()
    expect(w.row("busy")).not_to_have_class(STALE)
    w.screenshot(artifact_name(request) + "-stale")


def test_agent_supplied_strings_are_shown_as_text_and_run_nothing(
    live: Any, watch: Any, request: pytest.FixtureRequest
) -> None:
    app = live()
    markup = "<img src=x onerror=alert(1)>"
    repo = "<b>bold</b><script>alert(2)</script>"
    app.checkin("mallory", role="attacker", repo=repo, status=markup)
    app.checkin("painter", status="harmless")
    # The API refuses control characters in a status now; a row stored before that rule still reaches the page.
    store_status(app.db_url, "painter", "\x1b[31mred\x1b[0m and \u202eevil\u202c \x1b]8;;http://x\x07link\x1b]8;;\x07")
    w = watch(app.base_url)
    w.page.goto(app.base_url + "/")
    expect(w.row("mallory").locator(".status-text")).to_have_text(markup)
    expect(w.row("mallory").locator("td").nth(2)).to_have_text(repo)
    expect(w.page.locator("#filter-repo option", has_text="<b>bold</b>")).to_have_count(1)
    # Escapes are dropped and bidirectional overrides made visible instead of reordering the line.
    expect(w.row("painter").locator(".status-text")).to_have_text("red and \ufffdevil\ufffd link")

    # One more poll, then: nothing the agents wrote became an element, ran, or fetched anything.
    with w.page.expect_response(lambda r: "/mesh/agents" in r.url, timeout=WITHIN):
        pass
    assert w.page.locator("#roster img, #roster b, #roster script, #filter-repo b").count() == 0
    assert w.dialogs == []
    assert not [url for url in w.requests if url.rstrip("/").endswith("/x")]
    w.screenshot(artifact_name(request) + "-inert")


def test_the_api_key_is_asked_for_and_kept_in_the_session(live: Any, watch: Any) -> None:
    app = live(api_keys=["sekret-key"])
    app.checkin("guarded", status="behind a key")
    w = watch(app.base_url)
    w.page.goto(app.base_url + "/")
    expect(w.page.locator("#key-form")).to_be_visible()
    expect(w.page.locator("#connection")).to_have_text("API key needed")

    w.page.fill("#key-input", "wrong-key")
    w.page.click("#key-form button")
    expect(w.page.locator("#key-reason")).to_have_text("That API key was refused.", timeout=WITHIN)
    w.page.fill("#key-input", "sekret-key")
    w.page.click("#key-form button")
    expect(w.row("guarded")).to_be_visible(timeout=WITHIN)
    assert w.page.evaluate("sessionStorage.getItem('muster.apiKey')") == "sekret-key"
    assert w.page.evaluate("localStorage.length") == 0

    w.page.reload()
    expect(w.row("guarded")).to_be_visible(timeout=WITHIN)
    expect(w.page.locator("#key-form")).to_be_hidden()


def test_remote_agents_show_their_status_tools_and_last_error(live: Any, watch: Any, tmp_path: Path) -> None:
    # The a2a-sdk peer is async: it runs on a portal's event loop beside Playwright's.
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(a2a_peer("Alpha")) as alpha:
        (tmp_path / "muster.toml").write_text(
            f'[agents.alpha]\ncard = "{alpha.base}"\n\n[agents.offline]\ncard = "http://127.0.0.1:{free_port()}"\n'
        )
        app = live()
        w = watch(app.base_url)
        w.page.goto(app.base_url + "/")
        rows = w.page.locator("#a2a tbody tr")
        expect(rows).to_have_count(2, timeout=WITHIN)
        ok, failing = rows.nth(0), rows.nth(1)
        expect(ok.locator("td").nth(0)).to_have_text("alpha")
        expect(ok.locator("td").nth(1)).to_have_text("ok")
        expect(ok.locator("td").nth(2)).not_to_be_empty()  # the dialect it was reached through
        expect(ok.locator("td.caps")).to_have_text("Alpha_echo")
        expect(failing.locator("td").nth(0)).to_have_text("offline")
        expect(failing.locator("td").nth(1)).to_have_text("error")
        expect(failing.locator("td.error")).not_to_be_empty()


def test_the_api_docs_render_from_local_assets(live: Any, watch: Any, request: pytest.FixtureRequest) -> None:
    app = live()
    w = watch(app.base_url)
    w.page.goto(app.base_url + "/docs")
    expect(w.page.locator(".swagger-ui .info .title")).to_contain_text("Muster", timeout=15_000)
    expect(w.page.locator(".opblock-summary-path", has_text="/mesh/backlog")).to_be_visible()
    w.screenshot(artifact_name(request) + "-docs")
    same_origin(w.requests, app.base_url)


RUN_AGENTS = """
[dispatch_agents.fast]
kind = "custom"
entrypoint = "tests.runs.agents:fast"

[dispatch_agents.hold]
kind = "custom"
entrypoint = "tests.runs.agents:hold"
"""


def test_a_run_page_streams_its_events_live_and_cancels(
    live: Any, watch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    workspaces = dispatch_env(monkeypatch, tmp_path)
    (tmp_path / "muster.toml").write_text(RUN_AGENTS)
    app = live()
    held = app.http.post("/dispatch/runs", json={"agent": "hold", "prompt": "gate", "workspace": "w1"})
    assert held.status_code == 202, held.text
    w = watch(app.base_url)
    w.page.goto(f"{app.base_url}/#/runs/{held.json()['id']}")
    events = w.page.locator("#events tbody td.detail")
    # Shown while the run is still going: streamed, not read after the end.
    expect(events.filter(has_text="started")).to_have_count(1, timeout=WITHIN)
    expect(w.page.locator("#run-status")).to_have_text("running", timeout=WITHIN)
    (workspaces / "w1" / "gate").touch()
    expect(events.filter(has_text="released").first).to_be_visible(timeout=WITHIN)
    expect(w.page.locator("#run-status")).to_have_text("completed", timeout=WITHIN)
    expect(w.page.locator("#stream-state")).to_have_text("· ended")
    w.screenshot(artifact_name(request) + "-run")

    fast = app.http.post("/dispatch/runs", json={"agent": "fast", "prompt": "hello", "workspace": "w2"}).json()
    w.page.goto(f"{app.base_url}/#")
    row = w.page.locator(f'#run-list tr[data-run-id="{fast["id"]}"]')
    expect(row.locator("td.run-status")).to_have_text("completed", timeout=WITHIN)
    expect(row.locator("td").nth(4)).to_have_text("3 in · 20 out")
    w.screenshot(artifact_name(request) + "-runs")

    stuck = app.http.post("/dispatch/runs", json={"agent": "hold", "prompt": "never", "workspace": "w3"}).json()
    w.page.goto(f"{app.base_url}/#/runs/{stuck['id']}")
    expect(events.filter(has_text="started")).to_have_count(1, timeout=WITHIN)
    w.page.click("#cancel-run")
    expect(w.page.locator("#run-status")).to_have_text("cancelled", timeout=WITHIN)
    assert w.errors == []
    same_origin(w.requests, app.base_url)


def test_a_run_page_behind_an_api_key_streams_once_the_key_is_given(
    live: Any, watch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    (tmp_path / "muster.toml").write_text(RUN_AGENTS)
    app = live(api_keys=["sekret-key"])
    run = app.http.post("/dispatch/runs", json={"agent": "fast", "prompt": "hi", "workspace": "w1"})
    assert run.status_code == 202, run.text
    w = watch(app.base_url)
    w.page.goto(f"{app.base_url}/#/runs/{run.json()['id']}")
    expect(w.page.locator("#key-form")).to_be_visible(timeout=WITHIN)
    w.page.fill("#key-input", "sekret-key")
    w.page.click("#key-form button")
    # The stream is read with fetch, so the key goes along (an EventSource could not send it).
    expect(w.page.locator("#events tbody td.detail").filter(has_text="done: hi").first).to_be_visible(timeout=WITHIN)
    expect(w.page.locator("#run-status")).to_have_text("completed", timeout=WITHIN)
