"""The service side: config file, /a2a routes, stored call handles and their resumption after a restart."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from muster_a2a import InMemoryCallStore
from muster_api.db.engine import create_engine
from muster_api.errors import ConfigurationError
from muster_api.runtime import Runtime
from muster_api.settings import Settings
from tests.a2a.peers import Peer, a2a_peer, raw_peer
from tests.support.app import serve

# Slow: services restarted around remote calls in flight.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
async def peers() -> AsyncIterator[tuple[Peer, Peer]]:
    async with a2a_peer("Alpha") as alpha, a2a_peer("Beta", kind="v03") as beta:
        yield alpha, beta


def toml_value(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def write_config(path: Path, agents: dict[str, Any]) -> Path:
    lines = []
    for name, entry in agents.items():
        lines.append(f'[agents."{name}"]')
        lines.extend(f"{key} = {toml_value(value)}" for key, value in entry.items())
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def configuration_error(exc: BaseException) -> ConfigurationError | None:
    if isinstance(exc, ConfigurationError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = configuration_error(inner)
            if found is not None:
                return found
    return None


async def wait_for(client: httpx.AsyncClient, call_id: str, *, until: str, seconds: float = 20.0) -> dict[str, Any]:
    """Poll GET /a2a/calls/{id} until ``until`` ('handle' = task id stored, 'done' = result stored)."""
    with anyio.fail_after(seconds):
        while True:
            body: dict[str, Any] = (await client.get(f"/a2a/calls/{call_id}")).json()
            if until == "handle" and body["task_id"] and body["state"] == "working":
                return body
            if until == "done" and body["result"] is not None:
                return body
            await anyio.sleep(0.02)


async def test_agents_status_and_calls(db_url: str, tmp_path: Path, peers: tuple[Peer, Peer]) -> None:
    alpha, beta = peers
    async with raw_peer() as broken:
        broken.text("/.well-known/agent-card.json", "nope", status=500)
        config = write_config(
            tmp_path / "muster.toml",
            {
                "alpha": {"card": alpha.base, "pollEvery": 20, "headers": {"Authorization": "Bearer ${HOME}"}},
                "beta": {"card": beta.card_url, "poll-every": 20},
                "broken": {"card": broken.base},
                "off": {"card": alpha.base, "disabled": True},
                "nocard": {"url": "x"},
            },
        )
        async with serve(db_url, config=config) as client:
            listing = (await client.get("/a2a/agents")).json()
            by_name = {a["name"]: a for a in listing["agents"]}
            assert list(by_name) == ["alpha", "beta", "broken"]
            assert by_name["alpha"]["status"] == "ok" and by_name["alpha"]["dialect"] == "v1.0/JSONRPC"
            assert by_name["beta"]["dialect"] == "v0.3/JSONRPC"
            assert by_name["alpha"]["endpoint"] == f"{alpha.base}/rpc"
            [tool] = by_name["alpha"]["tools"]
            assert tool["name"] == "Alpha_echo"
            assert tool["input_schema"] == {
                "type": "object",
                "properties": {"task": {"type": "string"}},
                "required": ["task"],
            }
            assert by_name["broken"]["status"] == "error" and "HTTP 500" in by_name["broken"]["error"]
            assert by_name["broken"]["tools"] == []
            assert "nocard" in listing["skipped"]
            assert "Bearer" not in json.dumps(listing), "header values are never echoed"

            answer = await client.post("/a2a/tools/Beta_echo/call", json={"task": "complete from beta"})
            assert answer.status_code == 200, answer.text
            out = answer.json()
            assert (out["text"], out["is_error"]) == ("from beta\nsecond part", False)
            assert out["metadata"]["dialect"] == "v0.3/JSONRPC"

            stored = (await client.get(f"/a2a/calls/{out['call_id']}")).json()
            assert stored["agent"] == "beta" and stored["tool"] == "Beta_echo"
            assert stored["task_id"] == out["metadata"]["task_id"] and stored["context_id"]
            assert stored["state"] == "completed" and stored["dialect"] == "v0.3/JSONRPC"
            assert stored["result"]["text"] == "from beta\nsecond part"

            failed = (await client.post("/a2a/tools/Alpha_echo/call", json={"task": "fail sorry"})).json()
            assert failed["is_error"] and failed["text"].endswith("failed: sorry")

            missing = await client.post("/a2a/tools/Nope_echo/call", json={"task": "x"})
            assert missing.status_code == 404 and "Nope_echo" in missing.json()["detail"]
            assert missing.headers["content-type"].startswith("application/problem+json")
            unknown = await client.get("/a2a/calls/nothing")
            assert unknown.status_code == 404
            bad = await client.post("/a2a/tools/Alpha_echo/call", json={"task": ""})
            assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "task"

            # Reload: the file changed; a broken file is refused with the reason and the old agents stay.
            write_config(config, {"beta": {"card": beta.base}})
            reloaded = (await client.post("/a2a/reload")).json()
            assert [a["name"] for a in reloaded["agents"]] == ["beta"]
            config.write_text("[agents\n", encoding="utf-8")
            refused = await client.post("/a2a/reload")
            assert refused.status_code == 422 and "invalid TOML" in refused.json()["detail"]
            assert [a["name"] for a in (await client.get("/a2a/agents")).json()["agents"]] == ["beta"]


@pytest.mark.parametrize("tool", ["Alpha_echo", "Beta_echo"])
async def test_an_input_required_task_is_continued(
    db_url: str, tmp_path: Path, peers: tuple[Peer, Peer], tool: str
) -> None:
    """The answer to an input-required task goes to the same remote task (v1.0 and v0.3 peers), named by the ids
    the question came with; without them a call starts a new task."""
    alpha, beta = peers
    config = write_config(
        tmp_path / "muster.toml",
        {"alpha": {"card": alpha.base, "pollEvery": 20}, "beta": {"card": beta.card_url, "pollEvery": 20}},
    )
    path = f"/a2a/tools/{tool}/call"
    async with serve(db_url, config=config) as client:
        asking = (await client.post(path, json={"task": "input which branch?"})).json()
        assert asking["metadata"]["state"] == "input-required" and "which branch?" in asking["text"]
        task_id, context_id = asking["metadata"]["task_id"], asking["metadata"]["context_id"]
        assert task_id and context_id

        answer = await client.post(path, json={"task": "main", "task_id": task_id, "context_id": context_id})
        assert answer.status_code == 200, answer.text
        out = answer.json()
        assert (out["text"], out["is_error"], out["metadata"]["state"]) == ("got main", False, "completed")
        assert out["metadata"]["task_id"] == task_id, "the same remote task, not a new one"
        stored = (await client.get(f"/a2a/calls/{out['call_id']}")).json()
        assert (stored["task"], stored["task_id"], stored["state"]) == ("main", task_id, "completed")
        question = (await client.get(f"/a2a/calls/{asking['call_id']}")).json()
        assert question["state"] == "input-required", "the question's own call keeps its answer"

        again = (await client.post(path, json={"task": "main", "task_id": task_id, "context_id": context_id})).json()
        assert again["is_error"] and again["metadata"]["task_id"] in (None, task_id), "a finished task takes no answer"

        second = (await client.post(path, json={"task": "input which tag?"})).json()
        started = await client.post(
            path,
            json={
                "task": "v2",
                "wait": False,
                "task_id": second["metadata"]["task_id"],
                "context_id": second["metadata"]["context_id"],
            },
        )
        assert started.status_code == 202, started.text
        done = await wait_for(client, started.json()["id"], until="done")
        assert done["result"]["text"] == "got v2" and done["task_id"] == second["metadata"]["task_id"]

        fresh = (await client.post(path, json={"task": "complete new"})).json()
        assert fresh["metadata"]["task_id"] not in (task_id, second["metadata"]["task_id"])

        for field, value in (("task_id", ""), ("context_id", "a\u0000b"), ("task_id", "x" * 257), ("task_id", 7)):
            bad = await client.post(path, json={"task": "main", field: value})
            assert bad.status_code == 422, (field, value, bad.text)
            assert bad.json()["errors"][0]["field"] == field


async def test_json_config_and_missing_default(
    db_url: str, tmp_path: Path, peers: tuple[Peer, Peer], monkeypatch: pytest.MonkeyPatch
) -> None:
    alpha, _ = peers
    config = tmp_path / "agents.json"
    config.write_text(json.dumps({"agents": {"a": {"card": alpha.base}}}), encoding="utf-8")
    async with serve(db_url, config=config) as client:
        assert [a["name"] for a in (await client.get("/a2a/agents")).json()["agents"]] == ["a"]
    monkeypatch.chdir(tmp_path)
    async with serve(db_url) as client:
        assert (await client.get("/a2a/agents")).json()["agents"] == []


async def test_broken_or_missing_named_config_refuses_to_start(db_url: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"agents": ', encoding="utf-8")
    for path, reason in [(broken, "invalid JSON"), (tmp_path / "nowhere.toml", "does not exist")]:
        with pytest.raises(BaseException) as caught:  # noqa: PT011 - other components may wrap it in a group
            async with serve(db_url, config=path):
                pass
        error = configuration_error(caught.value)
        assert error is not None and reason in str(error) and str(path) in str(error)


async def test_call_in_flight_is_resumed_after_restart(db_url: str, tmp_path: Path) -> None:
    async with a2a_peer("Slowpoke") as peer:
        config = write_config(tmp_path / "muster.toml", {"slow": {"card": peer.base, "pollEvery": 20}})
        async with serve(db_url, config=config) as client:
            started = await client.post("/a2a/tools/Slowpoke_echo/call", json={"task": "slow 1.5", "wait": False})
            assert started.status_code == 202
            call_id = started.json()["id"]
            handle = await wait_for(client, call_id, until="handle")
        # The first service is gone; the remote task keeps working. The second one resumes it by GetTask.
        async with serve(db_url, config=config) as client:
            done = await wait_for(client, call_id, until="done")
        assert done["task_id"] == handle["task_id"]
        assert (done["state"], done["result"]["text"], done["result"]["is_error"]) == ("completed", "done", False)
        assert done["polls"] > handle["polls"]
        assert peer.executor.started.count(handle["task_id"]) == 1, "resumed, not sent again"


async def test_resumed_call_past_its_budget_is_cancelled(db_url: str, tmp_path: Path) -> None:
    async with a2a_peer("Sleeper") as peer:
        config = write_config(
            tmp_path / "muster.toml", {"sleepy": {"card": peer.base, "pollEvery": 20, "timeout": 5000}}
        )
        async with serve(db_url, config=config) as client:
            started = await client.post("/a2a/tools/Sleeper_echo/call", json={"task": "slow 30", "wait": False})
            call_id = started.json()["id"]
            handle = await wait_for(client, call_id, until="handle")
        # The next service starts after the 5 s budget ran out: its clock is ten seconds ahead of this one. (A short
        # budget on the real clock would also run out while the first service waits for the handle, on a busy machine.)
        settings = Settings(database_url=db_url, config=config)
        later = Runtime(
            settings=settings,
            engine=create_engine(settings.database_url),
            now=lambda: datetime.now(UTC) + timedelta(seconds=10),
        )
        async with serve(db_url, runtime=later) as client:
            done = await wait_for(client, call_id, until="done")
        assert done["result"]["is_error"]
        assert f"A2A task {handle['task_id']} timed out after 5000ms" in done["result"]["text"]
        assert handle["task_id"] in peer.executor.cancelled
        assert done["state"] == "canceled"


async def test_in_memory_tracker_records_before_following(peers: tuple[Peer, Peer]) -> None:

    from muster_a2a import CallTracker, remote_agent

    alpha, _ = peers
    store = InMemoryCallStore()
    tracker = CallTracker(store, lambda: datetime.now(UTC))
    [tool] = (await remote_agent(alpha.base, poll_every=20)).tools
    seen_in_flight: list[str | None] = []
    original = store.save

    async def spy(record: Any) -> None:
        if record.result is None:
            seen_in_flight.append(record.task_id)
        await original(record)

    store.save = spy  # type: ignore[method-assign]
    record = await tracker.call(tool, "slow 0.1")
    assert record.result is not None and record.result.text == "done"
    assert record.task_id in seen_in_flight, "the handle was stored while the call was still in flight"


async def test_call_waits_for_an_unavailable_agent_and_resumes_on_reload(db_url: str, tmp_path: Path) -> None:
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict

    async with a2a_peer("Flaky") as peer, raw_peer() as front:
        card = "/.well-known/agent-card.json"
        front.json(card, agent_card_to_dict(peer.card))
        config = write_config(tmp_path / "muster.toml", {"flaky": {"card": front.base, "pollEvery": 20}})
        async with serve(db_url, config=config) as client:
            started = await client.post("/a2a/tools/Flaky_echo/call", json={"task": "slow 0.5", "wait": False})
            call_id = started.json()["id"]
            handle = await wait_for(client, call_id, until="handle")
        front.text(card, "down for maintenance", status=503)
        async with serve(db_url, config=config) as client:
            status = (await client.get("/a2a/agents")).json()["agents"][0]
            assert status["status"] == "error" and "HTTP 503" in status["error"]
            state = client._transport.app.state.a2a  # type: ignore[attr-defined]
            with anyio.fail_after(20):
                while call_id not in state.parked:
                    await anyio.sleep(0.02)
            waiting = (await client.get(f"/a2a/calls/{call_id}")).json()
            assert waiting["result"] is None and waiting["task_id"] == handle["task_id"], "kept in flight, not lost"
            assert waiting["owner"] is not None, "held while it waits, so that scans do not claim it over and over"
            front.json(card, agent_card_to_dict(peer.card))
            assert (await client.post("/a2a/reload")).json()["agents"][0]["status"] == "ok"
            done = await wait_for(client, call_id, until="done")
        assert (done["state"], done["result"]["text"]) == ("completed", "done")
        assert peer.executor.started.count(handle["task_id"]) == 1
