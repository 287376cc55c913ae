"""A run's life over REST with custom agents: live SSE and reconnection, JSONL, cancel, steer, failure, replay."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import anyio
import pytest

from tests.runs.agents import EVENTS
from tests.runs.support import dispatch_app, dispatch_env, finished, read_sse, start

# Slow: runs carried through to their end by workers.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_reconnecting_with_last_event_id_misses_nothing(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    async with dispatch_app(db_url, tmp_path) as client:
        run = await start(client, agent="fast", prompt="p", workspace="w")
        first = await read_sse(client, run["id"], stop_after=5)
        assert [e["id"] for e in first.events] == [1, 2, 3, 4, 5] and first.result is None
        rest = await read_sse(client, run["id"], last_event_id=5)
        whole = await read_sse(client, run["id"])
        assert [e["id"] for e in first.events + rest.events] == [e["id"] for e in whole.events]
        assert first.events + rest.events == whole.events
        assert rest.result is not None and rest.result["status"] == "completed"


async def test_resuming_after_every_sequence_number_there_can_be_sends_the_result_alone(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Last-Event-ID the header's rule accepts but no 32-bit sequence number reaches (it broke PostgreSQL's
    statement: a 500)."""
    dispatch_env(monkeypatch, tmp_path)
    async with dispatch_app(db_url, tmp_path) as client:
        run = await start(client, agent="fast", prompt="p", workspace="w")
        await finished(client, run["id"])
        for beyond in (2**31 - 1, 2**31, 999_999_999_999):
            stream = await read_sse(client, run["id"], last_event_id=beyond)
            assert stream.events == [] and stream.result is not None and stream.result["status"] == "completed"


async def test_live_events_arrive_while_the_run_is_running(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = dispatch_env(monkeypatch, tmp_path)
    async with dispatch_app(db_url, tmp_path) as client:
        run = await start(client, agent="hold", prompt="gate", workspace="w")
        live = await read_sse(client, run["id"], stop_after=2)  # turn.input, then "started": the run still waits
        assert live.events[-1]["data"]["event"] == {"type": "text", "text": "started"}
        assert (await client.get(f"/dispatch/runs/{run['id']}")).json()["status"] == "running"
        (root / "w" / "gate").touch()
        done = await finished(client, run["id"])
        assert done["status"] == "completed" and done["text"] == "released"


async def test_jsonl_download_is_the_package_journal(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    async with dispatch_app(db_url, tmp_path) as client:
        run = await finished(client, (await start(client, agent="fast", prompt="p", workspace="w"))["id"])
        response = await client.get(f"/dispatch/runs/{run['id']}/events?format=jsonl")
        assert response.status_code == 200 and response.headers["content-type"].startswith("application/jsonl")
        lines = [json.loads(line) for line in response.text.splitlines()]
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert all(set(line) == {"seq", "at", "source", "scope", "event"} for line in lines)
    assert lines[0]["event"]["type"] == "turn.input" and lines[-1]["event"]["type"] == "turn.result"
    assert sum(1 for line in lines if line["event"]["type"] == "text_delta") == EVENTS - 1
    journal = tmp_path / "journal.jsonl"
    journal.write_text(response.text)
    from muster_dispatch import Journal, replay_agent

    assert replay_agent(Journal.load(journal)).remaining_turns == 1


async def test_cancel_a_running_and_a_queued_run_then_409(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path, workers=1)
    async with dispatch_app(db_url, tmp_path) as client:
        running = await start(client, agent="hold", prompt="never", workspace="a")
        await read_sse(client, running["id"], stop_after=2)
        queued = await start(client, agent="hold", prompt="never", workspace="b")  # the one worker is busy
        response = await client.post(f"/dispatch/runs/{queued['id']}/cancel")
        assert response.status_code == 202 and response.json()["status"] == "cancelled"
        assert (await client.post(f"/dispatch/runs/{running['id']}/cancel")).status_code == 202
        done = await finished(client, running["id"])
        assert done["status"] == "cancelled" and done["error"]["code"] == "aborted"
        for run_id in (running["id"], queued["id"]):
            response = await client.post(f"/dispatch/runs/{run_id}/cancel")
            assert response.status_code == 409, response.text
            assert (await client.post(f"/dispatch/runs/{run_id}/steer", json={"text": "x"})).status_code == 409
        stream = await read_sse(client, queued["id"])
        assert stream.events == [] and stream.result is not None and stream.result["status"] == "cancelled"


async def test_a_deadline_ends_the_run_as_failed_timeout(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    async with dispatch_app(db_url, tmp_path) as client:
        run = await start(client, agent="hold", prompt="never", workspace="w", deadline_s=0.5)
        done = await finished(client, run["id"])
        assert done["status"] == "failed" and done["error"]["code"] == "timeout"


async def test_steering_a_custom_agent_is_refused_in_the_journal(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = dispatch_env(monkeypatch, tmp_path)
    async with dispatch_app(db_url, tmp_path) as client:
        run = await start(client, agent="hold", prompt="gate", workspace="w")
        await read_sse(client, run["id"], stop_after=2)
        assert (await client.post(f"/dispatch/runs/{run['id']}/steer", json={"text": "faster"})).status_code == 202
        stream = await read_sse(client, run["id"], last_event_id=2, stop_after=1)
        assert stream.events[0]["data"]["event"]["code"] == "steering"
        (root / "w" / "gate").touch()
        assert (await finished(client, run["id"]))["status"] == "completed"


async def test_a_steer_posted_while_a_short_run_was_queued_reaches_its_turn(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn over within a few loop turns is concluded without the follower of its controls, unless controls were
    posted while it was queued: those are read before its turn runs."""
    root = dispatch_env(monkeypatch, tmp_path, workers=1)
    async with dispatch_app(db_url, tmp_path) as client:
        busy = await start(client, agent="hold", prompt="gate", workspace="a")
        await read_sse(client, busy["id"], stop_after=2)
        short = await start(client, agent="fast", prompt="go", workspace="b")  # the one worker is busy
        assert (await client.post(f"/dispatch/runs/{short['id']}/steer", json={"text": "x"})).status_code == 202
        (root / "a" / "gate").touch()
        assert (await finished(client, short["id"]))["status"] == "completed"
        stream = await read_sse(client, short["id"])
        assert [e["data"]["event"].get("code") for e in stream.events if e["data"]["event"]["type"] == "warning"] == [
            "steering"
        ]


async def test_a_failing_turn_is_a_failed_run_never_a_5xx(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    async with dispatch_app(db_url, tmp_path) as client:
        run = await finished(client, (await start(client, agent="broken", prompt="p", workspace="w"))["id"])
        assert run["status"] == "failed" and run["error"]["code"] == "quota"
        assert (await client.get("/dispatch/runs?status=failed")).json()["runs"][0]["id"] == run["id"]


async def test_replay_runs_nothing_and_checks_divergence(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = dispatch_env(monkeypatch, tmp_path)
    async with dispatch_app(db_url, tmp_path) as client:
        source = await finished(client, (await start(client, agent="mark", prompt="p", workspace="w"))["id"])
        replay = await finished(client, (await start(client, replay_of=source["id"]))["id"])
        assert replay["status"] == "completed" and replay["text"] == source["text"]
        assert replay["replay_of"] == source["id"] and replay["agent"] == "mark"
        assert (root / "w" / "executions").read_text().count("\n") == 1, "a replay executes nothing"
        wrong = await finished(client, (await start(client, replay_of=source["id"], prompt="other"))["id"])
        assert wrong["status"] == "failed" and wrong["error"]["code"] == "replay"
        warned = await start(client, replay_of=source["id"], prompt="other", divergence="warn")
        warned = await finished(client, warned["id"])
        assert warned["status"] == "completed"
        events = (await read_sse(client, warned["id"])).events
        assert any(e["data"]["event"].get("code") == "prompt" for e in events)
        response = await client.post("/dispatch/runs", json={"replay_of": "f" * 32})
        assert response.status_code == 404 and response.json()["errors"][0]["field"] == "replay_of"


async def test_a_run_outliving_its_lease_keeps_it_while_its_worker_renews_it(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's lease is renewed while it runs (by the task that also follows its controls): the run stays its
    worker's past several leases, and is not interrupted."""
    lease = 1.0
    root = dispatch_env(monkeypatch, tmp_path, workers=1, lease=lease)
    async with dispatch_app(db_url, tmp_path) as client:
        run = await start(client, agent="hold", prompt="gate", workspace="held")
        await read_sse(client, run["id"], stop_after=2)  # turn.input, then "started"
        first = datetime.fromisoformat((await client.get(f"/dispatch/runs/{run['id']}")).json()["lease_expires_at"])
        with anyio.fail_after(30):
            while True:  # renewed until three leases after the first one's end
                now = (await client.get(f"/dispatch/runs/{run['id']}")).json()
                assert now["status"] == "running", now
                if datetime.fromisoformat(now["lease_expires_at"]) > first + timedelta(seconds=3 * lease):
                    break
                await anyio.sleep(0.05)
        (root / "held" / "gate").touch()
        done = await finished(client, run["id"])
        assert done["status"] == "completed" and done["text"] == "released"
