"""The dashboard's claims and tasks panels in a real headless Chromium: the live claims per repo with holder,
pattern, reason and since; the tasks with state, owner and attempts; both following the mesh without a reload, and
what agents wrote shown as text, never as markup."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.dashboard.conftest import artifact_name
from tests.dashboard.test_browser import WITHIN, same_origin

pytestmark = pytest.mark.browser

# The service refuses control and bidirectional characters in a reason; markup is what is left to try.
HOSTILE = '<img src=x onerror="alert(1)">rewriting the store'


def claim(app: Any, token: str, *patterns: str, **fields: Any) -> None:
    body = {"paths": list(patterns), "confirm": True, **fields}
    r = app.http.post("/mesh/claims", json=body, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r.json()["granted"], r.text


def task_call(app: Any, bearer: str, path: str, **body: Any) -> dict[str, Any]:
    r = app.http.post(path, json={"confirm": True, **body}, headers={"Authorization": f"Bearer {bearer}"})
    assert r.status_code == 200, r.text
    task: dict[str, Any] = r.json()["task"]
    return task


def test_claims_and_tasks_panels_follow_the_mesh_and_stay_inert(
    live: Any, watch: Any, request: pytest.FixtureRequest
) -> None:
    app = live()
    keeper = app.checkin("keeper", repo="muster")
    reader = app.checkin("reader", repo="docs")
    boss = app.checkin("boss")
    worker = app.checkin("w1", role="builder")
    assert keeper and reader and boss and worker
    claim(app, keeper, "src/store/**", reason=HOSTILE)
    claim(app, reader, "guide/*.md", exclusive=False)
    task = task_call(app, boss, "/mesh/tasks", title="<b>ship</b> it", body="b", role="builder")
    task_call(app, boss, "/mesh/tasks", title="later", body="b", cap="deploy")
    held = task_call(app, worker, "/mesh/tasks/claim")
    assert held["id"] == task["id"]

    w = watch(app.base_url)
    w.page.goto(app.base_url + "/")
    rows = w.page.locator("#claim-list tbody tr")
    expect(rows).to_have_count(2)
    first = rows.nth(0)  # by repo: docs, then muster
    expect(first.locator(".holder")).to_have_text("reader")
    expect(first.locator(".kind")).to_have_text("shared")
    kept = rows.nth(1)
    expect(kept.locator(".repo")).to_have_text("muster")
    expect(kept.locator(".pattern")).to_have_text("src/store/**")
    expect(kept.locator(".kind")).to_have_text("exclusive")
    expect(kept.locator(".reason")).to_have_text(HOSTILE)
    expect(kept.locator(".since")).to_contain_text("UTC")
    assert w.page.locator("#claims img, #tasks b").count() == 0  # text, never markup

    ship = w.page.locator(f'#task-list tr[data-task-id="{task["id"]}"]')
    expect(ship.locator(".title")).to_have_text("<b>ship</b> it")
    expect(ship.locator(".state")).to_have_text("claimed")
    expect(ship.locator(".owner")).to_have_text("w1")
    expect(ship.locator(".attempts")).to_have_text("1")
    expect(ship.locator(".to")).to_have_text("role builder")
    expect(w.page.locator('#task-list tr[data-state="open"] .to')).to_have_text("cap deploy")
    w.screenshot(artifact_name(request) + "-claims-tasks")

    # Changes show up without a reload: a release, a finished task.
    r = app.http.post("/mesh/claims/release", json={"confirm": True}, headers={"Authorization": f"Bearer {keeper}"})
    assert r.status_code == 200, r.text
    expect(rows).to_have_count(1, timeout=WITHIN)
    task_call(app, worker, f"/mesh/tasks/{task['id']}/done", token=held["token"], result="shipped")
    expect(ship.locator(".state")).to_have_text("done", timeout=WITHIN)
    expect(ship.locator(".outcome")).to_have_text("shipped")
    app.checkin("reader", token=reader)  # still here
    app.http.post("/mesh/checkout", json={"confirm": True}, headers={"Authorization": f"Bearer {reader}"})
    expect(w.page.locator("#claims-empty")).to_be_visible(timeout=WITHIN)

    assert w.page.evaluate("performance.getEntriesByType('navigation').length") == 1
    assert w.errors == [] and w.dialogs == []
    same_origin(w.requests, app.base_url)
