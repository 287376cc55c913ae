"""`muster serve` started as a user starts it: in a checkout whose muster.toml has a [notify] block, no MUSTER_* path
variable (on SQLite the database is the default file under ./var/ of the checkout). A message to a person arrives at
the URL; the delivery log and the service's own log name the service, never the URL's secret."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import httpx
import pytest

from tests.notify.receiver import SECRET, receiving
from tests.runs.processes import api

pytestmark = pytest.mark.anyio


async def test_a_checkout_with_a_notify_block_notifies_a_person(db_url: str, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    if not db_url.startswith("sqlite"):
        env["MUSTER_DATABASE_URL"] = db_url
    log = tmp_path / "serve.log"
    with receiving() as receiver:
        (checkout / "muster.toml").write_text(
            f'[notify]\nurls = ["{receiver.url}"]\non = ["message_to_human"]\nbody = "full"\n', encoding="utf-8"
        )
        with api(env, log, cwd=checkout) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                tokens = {}
                for agent_id, role in (("alice", "human"), ("bob", "builder")):
                    r = await client.post("/mesh/checkin", json={"agent_id": agent_id, "role": role, "confirm": True})
                    assert r.status_code == 200, r.text
                    tokens[agent_id] = {"Authorization": f"Bearer {r.json()['token']}"}
                sent = await client.post(
                    "/mesh/messages",
                    json={"to": "alice", "body": "<b>ready</b> for review\nsecond line", "confirm": True},
                    headers=tokens["bob"],
                )
                assert sent.status_code == 200, sent.text
                [notification] = await receiver.wait_for(1)
                deadline = time.monotonic() + 60
                while True:
                    answer = await client.get("/notify/deliveries")
                    [delivery] = answer.json()["deliveries"]
                    if delivery["state"] == "delivered" or time.monotonic() > deadline:
                        break
                    await anyio.sleep(0.05)
    assert notification["title"] == "a message for alice from bob"
    assert notification["message"] == "bob: <b>ready</b> for review\nsecond line"  # full, as plain text
    assert (delivery["state"], delivery["service"], delivery["events"]) == ("delivered", "JSON", 1)
    assert (checkout / "var").is_dir() or not db_url.startswith("sqlite")
    assert SECRET not in answer.text
    served = log.read_text(errors="replace")
    assert "notify: 1 URL(s) (JSON)" in served
    assert SECRET not in served


def test_a_bad_notify_block_stops_serve_with_one_line(tmp_path: Path) -> None:
    import subprocess

    from tests.runs.processes import MUSTER

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "muster.toml").write_text('[notify]\nurls = ["json://u:hunter2@127.0.0.1:9/x"]\nloud = true\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    done = subprocess.run([str(MUSTER), "serve"], cwd=checkout, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "notify.loud: Extra inputs are not permitted" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
