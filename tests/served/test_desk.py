"""A served agent at a user's desk: `muster serve` started as `make run` starts it (a checkout's directory with its
muster.toml, no ``MUSTER_*`` path variable; on SQLite the default database under ./var/), an A2A client's blocking
send and a continued conversation answered, the run's workspace under the checkout's default root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from a2a.types import TaskState

from tests.runs.processes import api
from tests.served.support import CONFIG, ROOT, run_of, sdk_client, send_request

# Slow: a server process and an A2A client over HTTP.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_a_served_agent_answers_at_a_users_desk(db_url: str, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "muster.toml").write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    env["PYTHONPATH"] = str(ROOT)  # where the echo agent's module is, as a user's own agent is installed
    if not db_url.startswith("sqlite"):
        env["MUSTER_DATABASE_URL"] = db_url  # on SQLite: the default file under ./var/ of the checkout
    with api(env, tmp_path / "serve.log", cwd=checkout) as base:
        async with sdk_client(base, "echo", "JSONRPC", "1.0") as client:
            [first] = [r.task async for r in client.send_message(send_request("one"))]
            assert first.status.state == TaskState.TASK_STATE_COMPLETED
            assert [p.text for m in first.history[1:] for p in m.parts] == ["echo: one"]
            [second] = [r.task async for r in client.send_message(send_request("two", context_id=first.context_id))]
            said = [p.text for m in second.history[1:] for p in m.parts]
            assert said == [f"echo: two [resumed {run_of(base, first.id)['conversation']}]"]
        workspace = str(run_of(base, second.id)["workspace"])
        assert (checkout / "var" / "workspaces" / workspace).is_dir()
    if db_url.startswith("sqlite"):
        assert (checkout / "var" / "muster.db").exists()
