"""A dispatched member whose worker is killed outright leaves the mesh by itself: nothing renews its presence, so at
its lease's end it is off the roster and its claims are gone with it (a REAL Claude Code run in a ``muster worker``
process, an API process without workers, both databases)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import anyio
import httpx
import pytest

from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.plans import Reply
from tests.mcp.proxy import recording_proxy
from tests.runs.processes import api, process_env, worker
from tests.runs.support import write_config
from tests.runs.test_cli_runs import claude
from tests.runs.test_membership import claims_of, mcp_call, roster_entry, until, when_listed

pytestmark = [pytest.mark.anyio, pytest.mark.cli, pytest.mark.slow]


def gone(url: str, agent_id: str) -> bool:
    entry = roster_entry(url, agent_id)
    return entry is None or not entry.alive


async def test_a_killed_workers_member_lapses_with_its_claims(
    db_url: str, tmp_path: Path, installed_clis: InstalledClis, fake_anthropic: FakeAnthropic
) -> None:
    agents = {"member": {**claude(fake_anthropic.url), "mesh": {"repo": "shop"}}}
    config = write_config(tmp_path / "muster.json", agents)
    listed, gate = threading.Event(), threading.Event()
    claim = {"paths": ["src/**"], "reason": "reworking the store", "confirm": True}
    fake_anthropic.script.plan(
        Reply(text="Claiming.", tool=mcp_call("claim_paths", "call_claim", claim, namespace=None), gate=listed),
        Reply(text="Never answered: the worker dies first.", gate=gate),
    )
    serve_env = process_env(db_url, config, tmp_path, "api", MUSTER_DISPATCH_WORKERS="0")
    try:
        with api(serve_env, tmp_path / "api.log") as url:
            async with recording_proxy(url) as proxy, anyio.create_task_group() as group:
                group.start_soon(when_listed, proxy, listed)
                env = process_env(db_url, config, tmp_path, "w", MUSTER_DISPATCH_SERVICE_URL=proxy.base)
                with worker(env, tmp_path / "worker.log") as proc:
                    body = {"agent": "member", "prompt": "Claim the store", "workspace": "shop"}
                    answer = httpx.post(f"{url}/dispatch/runs", json=body, timeout=30)
                    assert answer.status_code == 202, answer.text
                    [held] = await until(lambda: claims_of(url, "member"), "the run's claim", timeout=180)
                    assert held.holder == "member"
                    entry = roster_entry(url, "member")
                    assert entry is not None and entry.alive
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    # Nothing holds it now: its lease (a minute) runs out, and its claims end with it.
                    await until(lambda: gone(url, "member"), "the member's lapse", timeout=180)
                    assert claims_of(url, "member") == [], "its claims lapsed with its presence"
                group.cancel_scope.cancel()
    finally:
        gate.set()
        listed.set()
