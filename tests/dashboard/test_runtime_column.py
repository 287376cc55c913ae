"""The roster's runtime column in a real headless Chromium: what the service's dispatch runtime does with each agent
(``GET /dispatch/members`` joined by agent_id) — asleep until a message wakes it, running a run (linked to its
page), serving a role's tasks, or nothing for an agent the runtime does not keep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.dashboard.conftest import artifact_name
from tests.dashboard.test_browser import WITHIN, same_origin
from tests.runs.support import dispatch_env

pytestmark = pytest.mark.browser

AGENTS = """
[dispatch_agents.sleepy]
kind = "custom"
entrypoint = "tests.runs.agents:fast"
wake = true

[dispatch_agents.reviewer]
kind = "custom"
entrypoint = "tests.runs.agents:fast"
serve_tasks = { role = "reviewer" }

[dispatch_agents.triage]
kind = "custom"
entrypoint = "tests.runs.agents:fast"
wake = true
serve_tasks = { role = "triage" }

[dispatch_agents.worker]
kind = "custom"
entrypoint = "tests.runs.agents:hold"
mesh = { agent_id = "builder" }
"""


def test_the_roster_shows_asleep_running_and_serving_agents(
    live: Any, watch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    workspaces = dispatch_env(monkeypatch, tmp_path)
    (tmp_path / "muster.toml").write_text(AGENTS)
    app = live()
    app.checkin("person", role="human")
    held = app.http.post("/dispatch/runs", json={"agent": "worker", "prompt": "gate", "workspace": "site"})
    assert held.status_code == 202, held.text
    run_id = held.json()["id"]
    w = watch(app.base_url)
    w.page.goto(app.base_url + "/")

    def runtime(agent_id: str) -> Any:
        return w.row(agent_id).locator("td.runtime")

    expect(runtime("sleepy")).to_have_text("asleep — wakes on a message", timeout=WITHIN)
    expect(runtime("reviewer")).to_have_text("serving reviewer", timeout=WITHIN)
    expect(runtime("triage")).to_have_text("serving triage · wakes on a message", timeout=WITHIN)
    expect(runtime("builder")).to_have_text(f"running {run_id[:12]}", timeout=WITHIN)
    # The one worker is busy: the sleeper's run waits queued, and the column says so (a message waits for it too).
    queued = app.http.post("/dispatch/runs", json={"agent": "sleepy", "prompt": "go", "workspace": "nest"})
    assert queued.status_code == 202, queued.text
    expect(runtime("sleepy")).to_have_text(f"queued {queued.json()['id'][:12]}", timeout=WITHIN)
    expect(runtime("builder").locator("a")).to_have_attribute("href", f"#/runs/{run_id}")
    expect(runtime("person")).to_have_text("")
    w.screenshot(artifact_name(request))
    runtime("builder").locator("a").click()
    expect(w.page.locator("#run-id")).to_have_text(run_id, timeout=WITHIN)
    (workspaces / "site" / "gate").touch()
    expect(w.page.locator("#run-status")).to_have_text("completed", timeout=WITHIN)
    w.page.goto(app.base_url + "/")
    expect(runtime("sleepy")).to_have_text("asleep — wakes on a message", timeout=WITHIN)
    assert w.errors == []
    same_origin(w.requests, app.base_url)
