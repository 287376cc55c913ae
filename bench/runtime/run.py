"""Wake by message against a live reader's long-poll, in one run of the service (SQLite, in this process).

Alternating, N times: a message to a sleeping ``wake = true`` Codex agent → the woken run's first model request at
the fake model server; a message to a checked-in agent long-polling its inbox → the long-poll's answer. Also the
real Codex CLI's bare start (spawn → its first model request, no service) and ``muster mcp``'s start (spawn → its
answer to ``initialize``: Codex starts its MCP servers beside itself and waits for them before its first model
request). Prints the p50 of each, the ratio of the wake to the long-poll, and what of the wake is left once the
settle of an arrival and the slower of the two starts are taken out.

    .venv/bin/python bench/runtime/run.py [rounds]
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the fakes live in the repository's tests

from tests.dispatch.fakes.openai import MODEL, FakeOpenAI
from tests.dispatch.fakes.plans import Reply
from tests.runs.test_cli_runs import codex
from tests.support.live import live_server
from tests.support.net import free_port

from muster_api.app import create_app
from muster_api.dispatch.sleepers import SETTLE_SECONDS
from muster_api.settings import DispatchSettings, Settings
from muster_client import MusterClient
from muster_dispatch import codex_harness, ensure_cli

INTERVAL = 1.0  # the sleeper's wake_interval: the smallest allowed, so that rounds follow each other quickly


def wait_for(condition: Callable[[], bool], timeout: float = 120) -> float:
    """Seconds (perf_counter) at which ``condition`` first held, polled every millisecond."""
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError("the condition never held")
        time.sleep(0.001)
    return time.perf_counter()


def runs_finished(url: str) -> bool:
    page = httpx.get(f"{url}/dispatch/runs", params={"agent": "sleepy"}).json()["runs"]
    return all(run["status"] not in ("queued", "running") for run in page)


def woken(url: str, fake: FakeOpenAI, person: MusterClient, number: int) -> float:
    """Message → the woken run's first model request."""
    wait_for(lambda: runs_finished(url))
    time.sleep(INTERVAL)  # the previous wake's interval (a rule of the feature, not a wait for a condition)
    seen = len(fake.script.model_requests())
    started = time.perf_counter()
    person.send(f"round {number}", to="sleepy", confirm=True)
    return wait_for(lambda: len(fake.script.model_requests()) > seen) - started


def long_poll(url: str, person: MusterClient, reader_token: str, number: int) -> float:
    """Message → the answer of a reader already waiting on its inbox."""
    answered: list[float] = []
    with MusterClient(url) as reader:
        reader.token = reader_token
        cursor = reader.inbox().next_cursor

        def read() -> None:
            page = reader.inbox(after=cursor, wait_seconds=30)
            assert page.messages
            answered.append(time.perf_counter())

        thread = threading.Thread(target=read)
        thread.start()
        time.sleep(0.2)  # the reader is parked on its long-poll
        started = time.perf_counter()
        person.send(f"poll {number}", to="reader", confirm=True)
        thread.join()
    return answered[0] - started


def bare_start(fake: FakeOpenAI, scratch: Path) -> float:
    """The real Codex CLI alone: spawn → its first model request."""
    home = scratch / "bare"
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(
        f'model_provider = "fake"\napproval_policy = "never"\n[model_providers.fake]\nname = "fake"\n'
        f'base_url = "{fake.url}/v1"\nwire_api = "responses"\nenv_key = "FAKE_KEY"\nsupports_websockets = false\n'
    )
    env = {"HOME": str(home), "CODEX_HOME": str(home / ".codex"), "PATH": os.environ["PATH"], "FAKE_KEY": "k"}
    argv = [ensure_cli(codex_harness()), "exec", "--json", "--skip-git-repo-check", "--model", MODEL, "hi"]
    seen = len(fake.script.model_requests())
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=scratch, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = wait_for(lambda: len(fake.script.model_requests()) > seen)
    process.wait(timeout=60)
    return first - started


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def mcp_start() -> tuple[float, float]:
    """``muster mcp`` alone: spawn → its answer to ``initialize`` (what Codex waits for before its first model
    request), wall seconds, and the CPU seconds the process spent to its exit."""
    muster = Path(sys.executable).with_name("muster")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen([str(muster), "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    process.stdin.flush()
    process.stdout.readline()
    answered = time.perf_counter() - started
    process.stdin.close()
    process.wait(timeout=30)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return answered, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(rounds: int) -> None:
    fake = FakeOpenAI()
    fake.script.default = Reply(text="ok")
    with fake.running(), tempfile.TemporaryDirectory(prefix="muster-bench-runtime-") as scratch_dir:
        scratch = Path(scratch_dir)
        port = free_port()
        os.environ["MUSTER_DISPATCH_SERVICE_URL"] = f"http://127.0.0.1:{port}"
        config = scratch / "muster.json"
        agent = {**codex(fake.url), "wake": True, "wake_interval": INTERVAL}
        config.write_text(json.dumps({"dispatch_agents": {"sleepy": agent}}))
        dispatch = DispatchSettings(homes=scratch / "homes", workspaces_root=scratch / "workspaces", workers=1)
        settings = Settings(
            database_url=f"sqlite:///{scratch / 'muster.db'}", config=config, port=port, dispatch=dispatch
        )
        with live_server(create_app(settings), port=port) as url, MusterClient(url) as person:
            person.checkin("person", confirm=True)
            with MusterClient(url) as reader:
                reader_token = reader.checkin("reader", confirm=True).token  # type: ignore[union-attr]
            assert reader_token is not None
            wait_for(lambda: _asleep(url))
            woken(url, fake, person, -1)  # warm-up: the first run, its home, the CLI's page cache
            wakes, polls, bare, mcp_wall, mcp_cpu = [], [], [], [], []
            for number in range(rounds):
                wakes.append(woken(url, fake, person, number))
                polls.append(long_poll(url, person, reader_token, number))
                bare.append(bare_start(fake, scratch))
                wall, cpu = mcp_start()
                mcp_wall.append(wall)
                mcp_cpu.append(cpu)
            wait_for(lambda: runs_finished(url))
    wake, poll, start, mcp, mcp_spent = (statistics.median(xs) * 1000 for xs in (wakes, polls, bare, mcp_wall, mcp_cpu))
    settle = SETTLE_SECONDS * 1000
    print(f"runtime: {rounds} rounds, alternating (SQLite, one instance, real Codex against the fake model)")
    print(f"  message -> woken run's first model request  p50: {wake:8.1f} ms")
    print(f"  message -> live reader's long-poll answer    p50: {poll:8.1f} ms")
    print(f"  Codex bare start -> first model request      p50: {start:8.1f} ms")
    print(f"  muster mcp start -> initialize answered      p50: {mcp:8.1f} ms ({mcp_spent:.1f} ms CPU)")
    print(f"  the settle of an arrival (a burst is one wake):    {settle:8.1f} ms")
    print(f"  wake / long-poll: {wake / poll:.1f}x; wake minus the CLI's bare start: {wake - start:.1f} ms")
    # Codex starts its MCP servers beside itself and sends its first request once both are up: the slower start counts.
    rest = wake - settle - max(start, mcp)
    print(f"  wake minus the settle and the slower of the two starts (scheduling, claim, sandbox): {rest:.1f} ms")


def _asleep(url: str) -> bool:
    with MusterClient(url) as rest:
        return any(a.agent_id == "sleepy" and a.status.startswith("asleep") for a in rest.agents().agents)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
