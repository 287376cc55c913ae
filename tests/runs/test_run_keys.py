"""Behind ``MUSTER_API_KEYS`` a dispatched member's MCP server holds a key minted for its run, never one of the
service's (the model can read its private home): with it a REAL Claude Code run talks and claims as its own agent,
and nothing else — no other agent's session, no check-in under another name, no overseer's view, no dispatch, A2A
or config route — and the key dies with the run."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import anyio
import httpx
import pytest

from muster_client import MusterClient
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.runs.support import finished, start
from tests.runs.test_cli_runs import claude
from tests.runs.test_membership import IDENTITY, member_service, plan_member_turn, until, when_listed

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

SERVICE_KEY = "the-service-key-of-this-test"


def refused(url: str, key: str, method: str, path: str, token: str | None = None, **kwargs: object) -> bool:
    headers = {"X-API-Key": key, **({"Authorization": f"Bearer {token}"} if token else {})}
    response = httpx.request(method, f"{url}{path}", headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]
    return response.status_code == 403


def assert_scoped(url: str, key: str, token: str, person_token: str) -> None:
    """What the run's key opens, and what it does not."""
    own = {"X-API-Key": key, "Authorization": f"Bearer {token}"}
    assert httpx.get(f"{url}/mesh/agents", headers={"X-API-Key": key}, timeout=30).status_code == 200, "the roster"
    assert httpx.get(f"{url}/mesh/claims", headers=own, timeout=30).status_code == 200, "its claims"
    checkin = {"agent_id": "impostor", "confirm": True}
    assert refused(url, key, "POST", "/mesh/checkin", json=checkin), "a new session under another name"
    assert refused(url, key, "GET", "/mesh/inbox", person_token), "another agent's session"
    assert refused(url, key, "GET", "/mesh/search", token, params={"q": "hello", "view": "all"}), "the overseer"
    assert refused(url, key, "POST", "/mesh/checkout", token, json={"confirm": True}), "checking itself out"
    for path in ("/dispatch/runs", "/dispatch/agents", "/a2a/agents", "/docs"):
        assert refused(url, key, "GET", path), path
    assert refused(url, key, "POST", "/dispatch/runs", json={"agent": "writer", "prompt": "x", "workspace": "w"})
    assert refused(url, key, "POST", "/config/reload")


async def test_behind_api_keys_a_run_holds_a_key_for_its_own_agent_only(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
) -> None:
    agents = {"writer": {**claude(fake_anthropic.url), "mesh": {"repo": "shop"}}}
    gate, listed = threading.Event(), threading.Event()
    plan_member_turn(fake_anthropic.script, "person", gate, namespace=None, listed=listed)
    try:
        async with (
            member_service(db_url, tmp_path, monkeypatch, agents, key=SERVICE_KEY) as (client, url, proxy),
            anyio.create_task_group() as group,
        ):
            group.start_soon(when_listed, proxy, listed)
            with MusterClient(url, api_key=SERVICE_KEY) as person:
                answer = person.checkin("person", confirm=True)
                assert answer.token is not None
                run = await start(client, agent="writer", prompt="Greet the person and claim", workspace="shop")
                page = await until(lambda: person.inbox(wait_seconds=1).messages, "the message from the agent")
                assert [(m.sender, m.body) for m in page] == [("writer", "hello from the dispatched agent")]
                with MusterClient(url, api_key=SERVICE_KEY) as rest:
                    await until(lambda: rest.claims(agent="writer").claims, "the agent's own claim")
                [identity] = list((tmp_path / "homes").glob(f"*/home/{IDENTITY}"))
                text = identity.read_text()
                assert SERVICE_KEY not in text, "the model can read this file: no service key in it"
                bound = json.loads(text)
                key, token = bound["api_key"], bound["token"]
                assert key and key != SERVICE_KEY
                assert_scoped(url, key, token, answer.token)
                gate.set()
                done = await finished(client, run["id"])
                assert done["status"] == "completed" and done["text"] == "Done as a member.", done
                assert key not in json.dumps(done)
                journal = (await client.get(f"/dispatch/runs/{run['id']}/events?format=jsonl")).text
                assert key not in journal and SERVICE_KEY not in journal
                assert refused(url, key, "GET", "/mesh/agents"), "the key died with the run"
                assert refused(url, key, "GET", "/mesh/inbox", token)
            group.cancel_scope.cancel()
    finally:
        gate.set()
        listed.set()
