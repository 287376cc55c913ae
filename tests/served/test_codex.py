"""The real Codex CLI behind a served agent, against fake model servers: an A2A client gets the model's text; a
quota-limited first candidate falls back to the second, and the task's history says so."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest, TaskState

from tests.dispatch.cli.support import CODEX_KEY_VAR, RESET_EPOCH, new_marker, processes_with
from tests.dispatch.conftest import InstalledClis, installed_clis
from tests.dispatch.fakes import openai
from tests.dispatch.fakes.openai import MODEL, FakeOpenAI
from tests.dispatch.fakes.plans import Reply
from tests.served.support import live_muster, run_of, sdk_client, send_request, served_settings, until

pytestmark = [pytest.mark.anyio, pytest.mark.cli, pytest.mark.slow]

__all__ = ["installed_clis"]  # the session fixture of the dispatch tests: the pinned CLIs, installed once


@pytest.fixture
def fakes() -> Iterator[tuple[FakeOpenAI, FakeOpenAI]]:
    limited, working = FakeOpenAI(), FakeOpenAI()
    with limited.running(), working.running():
        yield limited, working


def _codex(url: str, **extra: str) -> str:
    variables = {
        "MUSTER_CODEX_BASE_URL": f"{url}/v1",
        "MUSTER_CODEX_ENV_KEY": CODEX_KEY_VAR,
        CODEX_KEY_VAR: "sk-test-key",
        "MUSTER_CODEX_MAX_RETRIES": "1",
        "MUSTER_CODEX_SANDBOX": "danger-full-access",
        "TZ": "UTC",  # codex prints the reset time in local time
        **extra,
    }
    table = ", ".join(f"{key} = {json.dumps(value)}" for key, value in variables.items())
    return f'kind = "cli"\nharness = "codex"\nmodel = "{MODEL}"\nvariables = {{ {table} }}\n'


async def test_a_served_fallback_of_two_codex_candidates(
    installed_clis: InstalledClis,
    fakes: tuple[FakeOpenAI, FakeOpenAI],
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limited, working = fakes
    limited.script.plan(openai.usage_limited(RESET_EPOCH, times=None))
    working.script.plan(Reply(text="Codex finished the job."))
    settings = served_settings(db_url, tmp_path, monkeypatch)
    settings.config.write_text(
        settings.config.read_text()
        + f"\n[dispatch_agents.codex-limited]\n{_codex(limited.url)}"
        + f"\n[dispatch_agents.codex-backup]\n{_codex(working.url)}"
        + '\n[dispatch_agents.coder]\nkind = "fallback"\nagents = ["codex-limited", "codex-backup"]\na2a = true\n'
    )
    with live_muster(settings) as base:
        async with sdk_client(base, "coder", "JSONRPC", "1.0") as client:
            [response] = [r async for r in client.send_message(send_request("Do the job"))]
        run = run_of(base, response.task.id)
    task = response.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task.status
    assert [p.text for a in task.artifacts for p in a.parts] == ["Codex finished the job."]
    said = [part.text for message in task.history[1:] for part in message.parts]
    assert any(s.startswith("quota:") and "2030-01-01" in s for s in said), said
    assert any(s.startswith("fallback to codex-backup") for s in said), said
    assert run["selected"] == "codex-backup"
    assert [a["agent"] for a in run["attempts"]] == ["codex-limited", "codex-backup"]  # type: ignore[union-attr,index]
    assert working.script.model_requests() and limited.script.model_requests()


async def test_cancel_task_stops_the_codex_cli(
    installed_clis: InstalledClis,
    fakes: tuple[FakeOpenAI, FakeOpenAI],
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, working = fakes
    gate = threading.Event()  # the model's answer is held: the CLI stays in its turn until cancelled
    working.script.plan(Reply(text="too late", gate=gate))
    marker = new_marker()
    settings = served_settings(db_url, tmp_path, monkeypatch)
    settings.config.write_text(f"[dispatch_agents.held]\n{_codex(working.url, **marker)}a2a = true\n")
    try:
        with live_muster(settings) as base:
            async with sdk_client(base, "held", "HTTP+JSON", "1.0") as client:
                [response] = [r async for r in client.send_message(send_request("Wait", immediately=True))]
                task_id = response.task.id

                async def cli_running() -> bool:
                    return bool(processes_with(marker)) and bool(working.script.model_requests())

                await until(cli_running, 60)
                canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
                assert canceled.status.state == TaskState.TASK_STATE_CANCELED

                async def no_cli_left() -> bool:
                    return not processes_with(marker)

                await until(no_cli_left)
                fetched = await client.get_task(GetTaskRequest(id=task_id))
                assert fetched.status.state == TaskState.TASK_STATE_CANCELED
                assert run_of(base, task_id)["status"] == "cancelled"
    finally:
        gate.set()
