"""Notifications through a real Apprise ``json://`` URL to a receiver on loopback, on both databases: each event
kind once, retries and timeouts in the delivery log, a person's burst as one notification, the causing call never
held up, the URL's secret never shown, and several instances sending each delivery once."""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from muster_mesh import FakeClock
from tests.notify.receiver import SECRET, receiving
from tests.notify.support import deliveries, ended, join, notify_app, notify_config, send, settled

pytestmark = pytest.mark.anyio

KINDS = {
    "a message for alice from bob": "message_to_human",
    "task failed: fix the build": "task_failed",
    "run of crash failed (process)": "run_failed",
    "quota hit its usage limit, no fallback left": "quota_without_fallback",
    "carol (reviewer) went stale: its lease lapsed without a check-out": "agent_stale",
}


async def test_each_event_kind_arrives_once(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(datetime.now(UTC))
    with receiving() as receiver:
        config = notify_config(tmp_path / "muster.json", [receiver.url])
        async with notify_app(db_url, config, monkeypatch, clock) as client:
            alice = await join(client, "alice", role="human", ttl_seconds=86400)
            bob = await join(client, "bob", role="builder", ttl_seconds=86400)
            # The poster is told of its task's claim and failure by message: an agent here, so alice hears none of it.
            erin = await join(client, "erin", role="lead", ttl_seconds=86400)
            await join(client, "carol", role="reviewer", ttl_seconds=60)
            dave = await join(client, "dave", role="reviewer", ttl_seconds=60)
            assert (await client.post("/mesh/checkout", json={"confirm": True}, headers=dave)).status_code == 200
            await send(client, bob, "alice", "the build is red\nthis second line stays out")
            await send(client, alice, "bob", "a message to an agent notifies nobody")
            posted = await client.post(
                "/mesh/tasks",
                json={"title": "fix the build", "body": "see CI", "to": "bob", "confirm": True},
                headers=erin,
            )
            assert posted.status_code == 200, posted.text
            task = (await client.post("/mesh/tasks/claim", json={"confirm": True}, headers=bob)).json()["task"]
            failed = await client.post(
                f"/mesh/tasks/{task['id']}/fail",
                json={"token": task["token"], "reason": "flaky runner\ntrace", "confirm": True},
                headers=bob,
            )
            assert failed.status_code == 200, failed.text
            for agent in ("crash", "quota"):
                run = await client.post("/dispatch/runs", json={"agent": agent, "prompt": "go", "workspace": agent})
                assert run.status_code == 202, run.text
                assert (await ended(client, run.json()["id"]))["status"] == "failed"
            clock.advance(61)  # carol's lease lapses without a check-out; dave checked out
            received = await receiver.wait_for(5)
            # A later event's arrival means the scans after the first five have run: none of them sent one again.
            await send(client, bob, "alice", "sentinel")
            received = await receiver.wait_for(6)
            kinds = Counter(KINDS.get(str(item["title"]), str(item["title"])) for item in received)
            assert kinds == {
                "message_to_human": 2,
                "task_failed": 1,
                "run_failed": 1,
                "quota_without_fallback": 1,
                "agent_stale": 1,
            }
            bodies = {KINDS.get(str(item["title"])): item["message"] for item in received[:5]}
            assert bodies["message_to_human"] == "bob: the build is red"  # first_line: the rest stays out
            assert bodies["task_failed"] == "flaky runner"
            log = await settled(client, 6)
            assert {d["service"] for d in log} == {"JSON"}
            assert all(d["state"] == "delivered" and d["attempts"] == 1 for d in log)


async def test_a_receiver_failing_twice_gets_one_delivery_and_no_secret_is_shown(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with receiving(fail_first=2) as receiver:
        config = notify_config(tmp_path / "muster.json", [receiver.url], on=["message_to_human"])
        async with notify_app(db_url, config, monkeypatch) as client:
            await join(client, "alice", role="human")
            bob = await join(client, "bob")
            await send(client, bob, "alice", "please review")
            [delivery] = await settled(client, 1)
            assert receiver.requests == 3
            assert len(receiver.received) == 1
            assert delivery["state"] == "delivered"
            assert delivery["attempts"] == 3
            answer = (await client.get("/notify/deliveries")).text
    # The password reached the receiver (so it was in use), and nowhere a person or a log reads.
    assert any(receiver.authorizations)
    assert SECRET not in answer
    assert SECRET not in caplog.text
    assert "attempt 1 failed (refused)" in caplog.text


async def test_a_receiver_that_never_answers_times_out_and_is_logged_failed(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving(never_answer=True) as receiver:
        config = notify_config(tmp_path / "muster.json", [receiver.url], on=["message_to_human"])
        async with notify_app(db_url, config, monkeypatch, timeout_seconds=0.5, max_attempts=2) as client:
            await join(client, "alice", role="human")
            bob = await join(client, "bob")
            await send(client, bob, "alice", "anyone there?")
            [delivery] = await settled(client, 1)
    assert delivery["state"] == "failed"
    assert delivery["attempts"] == 2
    assert delivery["last_error"] == "timeout"
    assert receiver.requests == 2
    assert receiver.received == []


async def test_a_burst_is_one_notification_and_sends_answer_while_one_is_held(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving(hold=True) as receiver:
        config = notify_config(tmp_path / "muster.json", [receiver.url], on=["message_to_human"])
        async with notify_app(db_url, config, monkeypatch) as client:
            await join(client, "alice", role="human")
            bob = await join(client, "bob")
            carol = await join(client, "carol")
            await send(client, bob, "alice", "first")
            await anyio.to_thread.run_sync(receiver.holding.wait)
            # The receiver holds the first notification: every send of the burst still answers (send asserts 200).
            for index in range(3):
                await send(client, bob, "alice", f"bob {index}")
                await send(client, carol, "alice", f"carol {index}")
            assert not receiver.release.is_set() and receiver.received == []
            receiver.release.set()
            log = await settled(client, 2)
    titles = receiver.titles()
    assert titles == ["a message for alice from bob", "6 messages for alice from bob, carol"]
    assert receiver.received[1]["message"].splitlines() == [
        "bob: bob 0",
        "carol: carol 0",
        "bob: bob 1",
        "carol: carol 1",
        "bob: bob 2",
        "carol: carol 2",
    ]
    assert sorted(d["events"] for d in log) == [1, 6]


async def test_several_instances_send_each_delivery_once(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    people = [f"person{i}" for i in range(8)]
    with receiving() as receiver:
        config = notify_config(tmp_path / "muster.json", [receiver.url], on=["message_to_human"])
        async with notify_app(db_url, config, monkeypatch) as first, notify_app(db_url, config, monkeypatch) as second:
            bob = await join(first, "bob")
            for person in people:
                await join(second, person, role="human")
                await send(first, bob, person, f"hello {person}")
            await settled(first, len(people))
            # One more event after the eight: the scans that ran since found nothing to send again.
            await send(second, bob, people[0], "sentinel")
            await receiver.wait_for(len(people) + 1)
            await settled(second, len(people) + 1)
    titles = Counter(receiver.titles())
    assert titles == {**{f"a message for {p} from bob": 1 for p in people}, "a message for person0 from bob": 2}


async def test_deliveries_refuse_unknown_parameters_and_bad_limits(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = notify_config(tmp_path / "muster.json", [])
    async with notify_app(db_url, config, monkeypatch) as client:
        page = (await client.get("/notify/deliveries")).json()
        assert page == {"enabled": False, "deliveries": [], "next_before": None}
        unknown = await client.get("/notify/deliveries", params={"limt": 5})
        assert unknown.status_code == 422
        assert unknown.json()["errors"][0]["field"] == "limt"
        too_many = await client.get("/notify/deliveries", params={"limit": 1000})
        assert too_many.status_code == 422
        # Past a delivery id's column (32 bits on PostgreSQL) a cursor is refused, not sent to the database.
        too_far = await client.get("/notify/deliveries", params={"before": 2**31})
        assert too_far.status_code == 422, too_far.text
        assert "before" in json.dumps(too_far.json()["errors"])
        assert (await client.get("/notify/deliveries", params={"before": 2**31 - 1})).status_code == 200
        assert await deliveries(client) == []
