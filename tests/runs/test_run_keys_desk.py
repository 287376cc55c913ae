"""Behind ``MUSTER_API_KEYS`` at a user's desk: `muster serve` started as `make run` starts it (a checkout's directory
with its muster.toml, no ``MUSTER_*`` path variable, only the keys the README tells a user to set): a dispatched
member's MCP server reaches the service at its default address with the key minted for its run."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from muster_client import MusterClient
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.runs.processes import api
from tests.runs.test_defaults import desk  # noqa: F401  (the fixture: a checkout and a user's shell)
from tests.runs.test_membership import IDENTITY, plan_member_turn

pytestmark = [pytest.mark.cli]


DESK_KEY = "k-desk-team-key"


def test_behind_api_keys_a_member_run_at_a_users_desk_reaches_the_mesh_with_its_own_key(
    desk: tuple[Path, dict[str, str]],  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    fake_anthropic: FakeAnthropic,
) -> None:
    """`make run`'s `muster serve` with only ``MUSTER_API_KEYS`` set, as the README tells a user who guards the
    service: the run's MCP server finds the service at its default address (from inside the sandbox) and its mesh
    tools work with the key minted for the run, which is not the user's key."""
    checkout, env = desk
    (checkout / "muster.toml").write_text(
        "[dispatch_agents.writer]\n"
        'kind = "cli"\n'
        'harness = "claude"\n'
        f'variables = {{ ANTHROPIC_BASE_URL = "{fake_anthropic.url}", MCP_TIMEOUT = "120000" }}\n'
        'mesh = { repo = "shop" }\n'
    )
    env["MUSTER_API_KEYS"] = json.dumps([DESK_KEY])
    log = tmp_path / "serve.log"
    gate, listed = threading.Event(), threading.Event()
    plan_member_turn(fake_anthropic.script, "person", gate, namespace=None, listed=listed)
    # Claude asks the model while its MCP servers start: the first answer waits until ours has listed its tools (it
    # asks the service for the A2A tools, which the access log shows).
    watcher = threading.Thread(target=_open_when_logged, args=(log, "path=/a2a/agents", listed), daemon=True)
    try:
        with (
            api(env, log, cwd=checkout) as url,
            httpx.Client(base_url=url, timeout=60, headers={"X-API-Key": DESK_KEY}) as client,
            MusterClient(url, api_key=DESK_KEY) as person,
        ):
            watcher.start()
            person.checkin("person", confirm=True)
            created = client.post("/dispatch/runs", json={"agent": "writer", "prompt": "Greet", "workspace": "shop"})
            assert created.status_code == 202, created.text
            page = _polled(lambda: person.inbox(wait_seconds=1).messages, "the message from the agent")
            assert [(m.sender, m.body) for m in page] == [("writer", "hello from the dispatched agent")]
            [claim] = _polled(lambda: person.claims(agent="writer").claims, "the agent's claim")
            assert (claim.repo, claim.holder, claim.pattern) == ("shop", "writer", "src/**")
            [identity] = list((checkout / "var").glob(f"dispatch/homes/*/home/{IDENTITY}"))
            bound = json.loads(identity.read_text())
            assert bound["api_key"] and bound["api_key"] != DESK_KEY, "a key minted for the run, not the user's"
            gate.set()
            run = _polled(lambda: _ended(client, created.json()["id"]), "the run's end")
            assert (run["status"], run["text"]) == ("completed", "Done as a member."), run
    finally:
        gate.set()
        listed.set()
    assert DESK_KEY not in log.read_text(errors="replace")


def _open_when_logged(log: Path, text: str, event: threading.Event) -> None:
    deadline = time.monotonic() + 240
    while not event.is_set() and time.monotonic() < deadline:
        if log.is_file() and text in log.read_text(errors="replace"):
            break
        time.sleep(0.05)
    event.set()


def _polled(read: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + 240  # a bound for a failure; what comes is read at once
    while not (found := read()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return found


def _ended(client: httpx.Client, run_id: str) -> dict[str, Any] | None:
    run: dict[str, Any] = client.get(f"/dispatch/runs/{run_id}").json()
    return run if run["status"] not in ("queued", "running") else None
