"""A person in the loop, in a real headless Chromium: signed in on the dashboard as a member of the mesh (role
``human``), reading a thread two agents wrote, replying in it, addressed by agents like anyone else, kept present
while the page is open and checked out on sign-out; and what agents wrote staying text in the thread view. Each
step waits on what the page shows (Playwright's ``expect`` polls the DOM), never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from muster_client import MusterClient
from tests.dashboard.conftest import LiveApp, artifact_name

pytestmark = pytest.mark.browser

# A bound for a failure, not a timing: on a loaded machine a poll can take seconds.
WITHIN = 30_000


@pytest.fixture(autouse=True)
def patient() -> Iterator[None]:
    expect.set_options(timeout=WITHIN)
    yield
    expect.set_options(timeout=5_000)  # Playwright's default, for the other modules


def say(app: LiveApp, token: str, body: str, **to: str) -> str:
    r = app.http.post(
        "/mesh/messages", json={"body": body, "confirm": True, **to}, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 200, r.text
    message_id: str = r.json()["message_id"]
    return message_id


def alive(app: LiveApp, agent_id: str) -> bool:
    r = app.http.get("/mesh/agents", params={"include_expired": "true"})
    assert r.status_code == 200, r.text
    return any(a["agent_id"] == agent_id and a["alive"] for a in r.json()["agents"])


def renewed_within(app: LiveApp, agent_id: str, seconds: float) -> None:
    """Wait until ``agent_id``'s last renewal is less than ``seconds`` old by the service's clock."""
    deadline = time.monotonic() + WITHIN / 1000
    while True:
        r = app.http.get("/mesh/agents", params={"include_expired": "true"})
        assert r.status_code == 200, r.text
        ages = [a["heartbeat_age_seconds"] for a in r.json()["agents"] if a["agent_id"] == agent_id]
        if ages and ages[0] < seconds:
            return
        assert time.monotonic() < deadline, f"{agent_id} not renewed: {ages}"
        time.sleep(0.1)


def test_a_person_signs_in_reads_a_thread_of_two_agents_and_replies(
    live: Any, watch: Any, request: pytest.FixtureRequest
) -> None:
    app = live()
    builder = app.checkin("builder-1", role="builder", ttl_seconds=86400)
    reviewer = app.checkin("reviewer-1", role="reviewer", ttl_seconds=86400)
    assert builder and reviewer
    say(app, builder, "PR #7 is ready: the store rewrite", to="reviewer-1", thread_id="pr-7")
    app.clock.advance(1)
    say(app, reviewer, "one question on the migration", to="builder-1", thread_id="pr-7")

    w = watch(app.base_url)
    w.page.goto(app.base_url + "/")
    w.page.fill("#person-name", "alice")
    w.page.click("#signin-form button")
    expect(w.page.locator("#person-state")).to_have_text("signed in as alice (role human)", timeout=WITHIN)
    token = w.page.evaluate("sessionStorage.getItem('muster.person.token')")
    assert isinstance(token, str) and len(token) > 20
    assert w.page.evaluate("localStorage.length") == 0

    # Agents address the person like anyone else: by name, or by the role every person has.
    app.clock.advance(1)
    say(app, reviewer, "a person should decide this", role="human")
    expect(w.page.locator("#person-inbox li.message")).to_have_count(1, timeout=WITHIN)
    expect(w.page.locator("#person-inbox .body")).to_have_text("a person should decide this")
    expect(w.page.locator("#person-inbox .from")).to_have_text("reviewer-1")

    # The overseer's thread list (a keyless service on loopback opens it) leads to the thread.
    row = w.page.locator('#thread-list tr[data-thread-id="pr-7"]')
    expect(row).to_contain_text("builder-1, reviewer-1", timeout=WITHIN)
    expect(row).to_contain_text("one question on the migration")
    # An agent's conversation: only the threads with its messages.
    expect(w.page.locator("#thread-list tbody tr")).to_have_count(2)
    w.page.select_option("#thread-agent", "builder-1")
    expect(w.page.locator("#thread-list tbody tr")).to_have_count(1, timeout=WITHIN)
    w.page.select_option("#thread-agent", "")
    expect(w.page.locator("#thread-list tbody tr")).to_have_count(2, timeout=WITHIN)
    row.locator("a").click()
    messages = w.page.locator("#thread-messages li.message")
    expect(messages).to_have_count(2, timeout=WITHIN)
    expect(messages.nth(0).locator(".body")).to_have_text("PR #7 is ready: the store rewrite")
    expect(messages.nth(1).locator(".from")).to_have_text("reviewer-1")
    expect(w.page.locator("#reply-to")).to_have_value("reviewer-1")

    w.page.select_option("#reply-to", "builder-1")
    w.page.fill("#reply-body", "approved, merge it\nafter the migration test")
    w.page.click("#reply-form button")
    expect(w.page.locator("#reply-answer")).to_have_text("sent to builder-1", timeout=WITHIN)
    expect(messages).to_have_count(3, timeout=WITHIN)
    expect(messages.nth(2).locator(".from")).to_have_text("alice")
    w.screenshot(artifact_name(request) + "-thread")

    # The agent reads the reply through muster_client: from the person's id, in the thread.
    with MusterClient(app.base_url, token=builder) as client:
        got = client.inbox()
    last = got.messages[-1]
    assert (last.sender, last.body, last.thread_id) == ("alice", "approved, merge it\nafter the migration test", "pr-7")
    assert not [url for url in w.requests if token in url], "the token never travels in a URL"
    assert w.errors == []

    # While the page is open its polls renew the person's lease; signing out checks out.
    for _ in range(2):
        app.clock.advance(200)  # the lease is 300 s: without a renewal in between it would end
        # Renewed by a poll the service took after the clock moved (an answer seen now may be of a poll it took
        # before: on a loaded machine one is often in flight), read on the roster, where the clock is the service's.
        renewed_within(app, "alice", 200)
        assert alive(app, "alice")
    w.page.goto(app.base_url + "/#")
    expect(w.page.locator("#sign-out")).to_be_visible(timeout=WITHIN)
    w.page.click("#sign-out")
    expect(w.page.locator("#person-state")).to_have_text("not signed in", timeout=WITHIN)
    assert w.page.evaluate("sessionStorage.getItem('muster.person.token')") is None
    assert not alive(app, "alice")


def test_a_person_sends_to_a_role_and_finds_a_message_by_search(live: Any, watch: Any) -> None:
    app = live()
    app.checkin("reviewer-1", role="reviewer")
    app.checkin("reviewer-2", role="reviewer")
    w = watch(app.base_url)
    w.page.goto(app.base_url + "/")
    w.page.fill("#person-name", "bob")
    w.page.click("#signin-form button")
    expect(w.page.locator("#compose-form")).to_be_visible(timeout=WITHIN)
    w.page.select_option("#compose-kind", "role")
    w.page.fill("#compose-target", "reviewer")
    w.page.fill("#compose-body", "please look at the canary rollout")
    w.page.click("#compose-form button")
    expect(w.page.locator("#compose-answer")).to_have_text("sent to reviewer-1, reviewer-2", timeout=WITHIN)
    expect(w.page.locator("#my-threads tbody tr")).to_have_count(1, timeout=WITHIN)

    w.page.fill("#search-q", "canary")
    w.page.click("#search-form button")
    hit = w.page.locator("#search-results li.hit")
    expect(hit).to_have_count(1, timeout=WITHIN)
    expect(hit.locator("mark")).to_have_text("canary")
    expect(hit.locator(".agent")).to_have_text("bob")

    # A name held by a live session is refused with the mesh's reason, and the page stays signed out.
    other = watch(app.base_url)
    other.page.goto(app.base_url + "/")
    other.page.fill("#person-name", "bob")
    other.page.click("#signin-form button")
    expect(other.page.locator("#signin-answer")).to_contain_text("held by a live session", timeout=WITHIN)
    expect(other.page.locator("#person-state")).to_have_text("not signed in")


def test_what_agents_write_stays_text_in_the_thread_view(live: Any, watch: Any, request: pytest.FixtureRequest) -> None:
    app = live()
    mallory = app.checkin("mallory")
    app.checkin("victim")
    assert mallory
    markup = '<script>alert(1)</script><img src=x onerror="alert(2)"><b>bold</b>'
    escapes = "\x1b[31mred\x1b[0m and \u202eevil\u202c"
    say(app, mallory, f"{markup}\n{escapes}", to="victim", thread_id="<i>t</i>")
    w = watch(app.base_url)
    w.page.goto(app.base_url + "/")
    row = w.page.locator("#thread-list tbody tr")
    expect(row).to_have_count(1, timeout=WITHIN)
    expect(row.locator("td").nth(0)).to_have_text("<i>t</i>")
    expect(row.locator("td.preview")).to_contain_text(markup)
    row.locator("a").click()
    body = w.page.locator("#thread-messages li.message .body")
    expect(body).to_have_text(f"{markup}\nred and \ufffdevil\ufffd", timeout=WITHIN)
    expect(w.page.locator("#thread-id")).to_have_text("<i>t</i>")

    w.page.goto(app.base_url + "/#")
    w.page.fill("#search-q", "bold")
    w.page.click("#search-form button")
    expect(w.page.locator("#search-results li.hit")).to_have_count(1, timeout=WITHIN)

    with w.page.expect_response(lambda r: "/mesh/threads" in r.url, timeout=WITHIN):
        pass
    shown = "#thread-view, #thread-list, #search-results, #person"
    assert w.page.locator(f":is({shown}) :is(script, img, b, i)").count() == 0
    assert w.dialogs == []
    assert not [url for url in w.requests if url.rstrip("/").endswith("/x")]
    assert w.errors == []
    w.screenshot(artifact_name(request) + "-inert-thread")


def test_under_api_keys_the_key_is_asked_before_the_person_signs_in(live: Any, watch: Any) -> None:
    app = live(api_keys=["sekret-key-for-people"])
    agent = app.checkin("builder-1", ttl_seconds=86400)
    assert agent
    w = watch(app.base_url)
    w.page.goto(app.base_url + "/")
    expect(w.page.locator("#key-form")).to_be_visible(timeout=WITHIN)
    w.page.fill("#key-input", "sekret-key-for-people")
    w.page.click("#key-form button")
    expect(w.page.locator("#key-form")).to_be_hidden(timeout=WITHIN)
    w.page.fill("#person-name", "carol")
    w.page.click("#signin-form button")
    expect(w.page.locator("#person-state")).to_have_text("signed in as carol (role human)", timeout=WITHIN)
    say(app, agent, "the key holder's view", to="carol", thread_id="keyed")
    expect(w.page.locator("#person-inbox .body")).to_have_text("the key holder's view", timeout=WITHIN)
    # The key opens the overseer's view too.
    expect(w.page.locator('#thread-list tr[data-thread-id="keyed"]')).to_be_visible(timeout=WITHIN)
    assert w.errors == []
