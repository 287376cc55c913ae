"""A wake deferred by ``wake_interval`` is a row, not a timer: killed outright, the instance that deferred it loses
nothing, and another instance started later on the same database makes it when it is due (REAL Codex runs, two
``muster serve`` processes, both databases)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from muster_api.dispatch.sleepers import wake_prompt
from muster_client import MusterClient
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, ToolCall
from tests.runs.processes import MUSTER, ROOT, process_env
from tests.runs.support import write_config
from tests.runs.test_cli_runs import codex
from tests.runs.test_membership import until
from tests.runs.test_wake import _runs_now, asleep
from tests.support.net import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

INTERVAL = 150  # seconds: longer than B takes to start and the held run to end on a loaded machine (then deferred)


@contextmanager
def killable_api(env: dict[str, str], log: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``muster serve`` that the test may kill outright (SIGKILL: no shutdown of any kind)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(MUSTER), "serve", "--port", str(port)], env=env, cwd=ROOT, stdout=out, stderr=out)
        try:
            yield url, proc
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def ready(url: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, "the instance died"
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


async def assert_woken_once(survivor: str, done: dict[str, Any]) -> None:
    runs = await until(
        lambda: len(found := _runs_now(survivor, "sleepy")) == 2 and found, "the wake", timeout=INTERVAL * 2
    )
    woken = await until(lambda: finished_run(survivor, runs[-1]["id"]), "the deferred wake's end")
    assert (woken["status"], woken["text"]) == ("completed", "Woken by the survivor."), woken
    assert woken["prompt"] == wake_prompt(2) and "note" not in woken["prompt"]
    assert woken["continuation"]["conversation"] == done["conversation"]
    assert len(_runs_now(survivor, "sleepy")) == 2, "one deferred wake"


def finished_run(url: str, run_id: str) -> dict[str, Any] | None:
    found: dict[str, Any] = httpx.get(f"{url}/dispatch/runs/{run_id}", timeout=30).json()
    return found if found["status"] in ("completed", "failed", "interrupted") else None


@pytest.mark.timeout(900)  # the interval is waited out once, beside two service starts on a loaded machine
async def test_a_deferred_wake_survives_the_death_of_the_instance_that_deferred_it(
    db_url: str, tmp_path: Path, installed_clis: InstalledClis, fake_openai: FakeOpenAI
) -> None:
    config = write_config(tmp_path / "muster.json", {"sleepy": {**codex(fake_openai.url), "wake": True}})
    text = config.read_text().replace('"wake": true', f'"wake": true, "wake_interval": {INTERVAL}')
    config.write_text(text)
    release = tmp_path / "release-the-first-wake"
    # The first wake's turn is held in Codex's shell until the test lets it go (as long as the second instance takes
    # to start on a loaded machine).
    hold = ToolCall(command=f"while [ ! -e {release} ]; do sleep 0.1; done", call_id="call_hold")
    fake_openai.script.plan(Reply(tool=hold), Reply(text="First wake."), Reply(text="Woken by the survivor."))
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    try:
        with killable_api(process_env(db_url, config, tmp_path, "a"), logs[0]) as (url_a, proc_a):
            await until(lambda: ready(url_a, proc_a), "instance A ready", timeout=180)
            await until(lambda: asleep(url_a, "sleepy"), "the agent asleep")
            with MusterClient(url_a) as person:
                person.checkin("person", confirm=True)
                person.send("the first note", to="sleepy", confirm=True)
                [first] = await until(lambda: _runs_now(url_a, "sleepy"), "the first wake")
                # B starts after the first note: it follows the inbox from now on, and has seen no wake to defer.
                with killable_api(process_env(db_url, config, tmp_path, "b"), logs[1]) as (url_b, proc_b):
                    await until(lambda: ready(url_b, proc_b), "instance B ready", timeout=180)
                    # During the run: owed to its end, which comes less than an interval after the first wake.
                    person.send("the second note", to="sleepy", confirm=True)
                    release.touch()
                    done = await until(lambda: finished_run(url_a, first["id"]), "the first wake's end")
                    assert done["status"] == "completed", done
                    # A's worker ended the run and deferred the wake: A dies outright, B must make the wake.
                    await until(lambda: "the next wake is due at" in logs[0].read_text(errors="replace"), "deferral")
                    proc_a.send_signal(signal.SIGKILL)
                    proc_a.wait()
                    await assert_woken_once(url_b, done)
    finally:
        release.touch()
