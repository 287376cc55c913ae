"""Real runs in podman and docker containers: a real Codex turn whose escapes (writing outside the workspace, reading
a secret in the host's home, listing another workspace, reaching a host server that is not the model, through the
egress proxy or directly) all fail while it completes with the fake's text, the model reached through the proxy; with
egress "none" not even the model is reached; a stopped turn, and a run whose worker was killed, leave no process and no
container; a missing image is one ``configuration`` line naming the command that builds it."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from muster_dispatch import AgentInput, DispatchError, PodmanProvider, claude_harness, cli_agent, dispatch
from muster_dispatch.container_provider import ContainerProvider, container_problem
from tests.dispatch.cli.support import codex_agent, new_marker, processes_with, run_turn
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, ToolCall
from tests.dispatch.sandbox.conftest import ProviderMaker
from tests.dispatch.sandbox.support import OTHER_BODY, fetch, other_port

__all__ = ["other_port"]  # a fixture, used by name

pytestmark = [pytest.mark.anyio, pytest.mark.container]


@pytest.fixture
def planted() -> Iterator[Path]:
    """A secret in the host's home (the container must not see it), removed afterwards."""
    secret = Path.home() / f".muster-sandbox-secret-{uuid.uuid4().hex[:8]}"
    secret.write_text("host-secret-42\n", encoding="utf-8")
    yield secret
    secret.unlink(missing_ok=True)


def _probes(outside: Path, secret: Path, other: Path, model_url: str, other_port: int) -> str:
    def probe(name: str, command: str) -> str:
        return f"({command}) >/dev/null 2>&1 && echo {name}:ok >> probe.txt || echo {name}:fail >> probe.txt"

    other_url = f"http://127.0.0.1:{other_port}/"
    return "; ".join(
        [
            probe("inside", "echo in > inside.txt"),
            probe("outside", f"echo out > {outside}/escaped.txt"),
            probe("secret", f"grep -q host-secret-42 {secret}"),
            probe("other", f"ls {other} | grep -q neighbour.txt"),
            probe("proxied", f"{fetch(other_url, proxy=True)} {OTHER_BODY.decode()}"),
            probe("direct", f"{fetch(other_url, proxy=False)} {OTHER_BODY.decode()}"),
            probe("model", fetch(f"{model_url}/v1/models", proxy=False)),
        ]
    )


async def test_codex_escapes_fail_in_a_container(
    make_container: ProviderMaker,
    installed_clis: InstalledClis,
    fake_openai: FakeOpenAI,
    tmp_path: Path,
    planted: Path,
    other_port: int,
) -> None:
    """The fake model on the host's loopback is reached through the run's egress proxy only (the container has no
    network); another server there is refused through the proxy (a warning naming it) and directly."""
    workspace, outside, other = tmp_path / "ws", tmp_path / "outside", tmp_path / "other-ws"
    for path in (workspace, outside, other):
        path.mkdir()
    (other / "neighbour.txt").write_text("x", encoding="utf-8")
    probes = _probes(outside, planted, other, fake_openai.url, other_port)
    fake_openai.script.plan(Reply(tool=ToolCall(probes)), Reply(text="Probed."))
    provider = make_container(tmp_path / "homes")

    turn = await run_turn(codex_agent(installed_clis.codex, fake_openai.url), "Probe", workspace, provider)

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Probed."
    seen = dict(line.split(":") for line in (workspace / "probe.txt").read_text(encoding="utf-8").split())
    escapes = {"outside", "secret", "other", "proxied", "direct"}
    assert seen == {"inside": "ok", "model": "ok", **dict.fromkeys(escapes, "fail")}
    assert not (outside / "escaped.txt").exists()
    refused = {e.name for e in turn.of("warning") if e.code == "egress"}
    assert f"127.0.0.1:{other_port}" in refused and fake_openai.url.removeprefix("http://") not in refused


async def test_egress_none_leaves_even_the_model_unreachable(
    make_container: ProviderMaker, installed_clis: InstalledClis, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    fake_openai.script.plan(Reply(text="never"))
    running = dispatch(
        codex_agent(installed_clis.codex, fake_openai.url),
        AgentInput("Hi"),
        workspace=tmp_path / "ws",
        provider=make_container(tmp_path / "homes", egress="none"),
        deadline=60,
    )
    result = await running.result()
    assert result.status == "failed"
    assert fake_openai.script.requests == []


# Starts a tool in its own session and a child, says so, then waits for ever.
SCRIPT = """#!/bin/sh
setsid sleep 300 &
sleep 301 &
echo '{"type":"system","subtype":"init","session_id":"s-stop"}'
wait
"""


def _containers(provider: ContainerProvider) -> list[str]:
    listed = subprocess.run(
        [provider.executable, "ps", "--all", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        env=provider.engine_env,
        check=True,
    )
    return [name for name in listed.stdout.split() if name.startswith("muster-sbx-")]


async def _gone(marker: dict[str, str]) -> list[int]:
    """The run's processes still alive once the kill had time to land (signal delivery is asynchronous)."""
    for _ in range(250):
        left = processes_with(marker)
        if not left:
            return left
        await asyncio.sleep(0.02)
    return processes_with(marker)


@pytest.mark.parametrize("stop", ["deadline", "cancel"])
async def test_a_stopped_turn_leaves_no_process_and_no_container(
    stop: str, make_container: ProviderMaker, tmp_path: Path
) -> None:
    marker = new_marker()
    cli = tmp_path / "bin" / "fake-claude"
    cli.parent.mkdir()
    cli.write_text(SCRIPT, encoding="utf-8")
    cli.chmod(0o755)
    (tmp_path / "ws").mkdir()
    provider = make_container(tmp_path / "homes", read_only=[cli.parent])
    assert isinstance(provider, ContainerProvider)
    before = set(_containers(provider))
    running = dispatch(
        cli_agent(claude_harness(executable=cli), variables=marker),
        AgentInput("wait"),
        workspace=tmp_path / "ws",
        provider=provider,
        deadline=5 if stop == "deadline" else 60,
    )
    async for event in running:
        if event.type == "conversation":
            assert len(processes_with(marker)) >= 3  # the shell and both sleeps are running
            assert set(_containers(provider)) - before, "the run's container must be running"
            if stop == "cancel":
                await running.cancel()
            break
    result = await running.result()
    assert result.status == ("failed" if stop == "deadline" else "canceled")
    assert result.error is not None and result.error.code == ("timeout" if stop == "deadline" else "aborted")
    assert await _gone(marker) == []
    assert set(_containers(provider)) - before == set(), "the run's container must be removed"


async def test_a_missing_image_is_a_one_line_configuration_error(tmp_path: Path) -> None:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (apt-get install podman)")
    provider = PodmanProvider(tmp_path / "homes", image="localhost/muster-no-such-image:0")
    (tmp_path / "ws").mkdir()
    with pytest.raises(DispatchError) as caught:
        provider.sandbox(tmp_path / "ws")
    assert caught.value.code == "configuration"
    assert "\n" not in caught.value.message and "muster sandbox image" in caught.value.message


# A worker that starts a run in a container, says so, and is killed outright.
WORKER = """
import asyncio, json, os, signal, sys
from pathlib import Path
from muster_dispatch import DockerProvider, PodmanProvider
from muster_dispatch.harness import Command

async def main():
    kind, root, workspace, marker, script, engine = sys.argv[1:]
    make = PodmanProvider if kind == "podman" else DockerProvider
    provider = make(Path(root), engine_variables=json.loads(engine))
    sandbox = provider.sandbox(Path(workspace))
    env = provider.environment(sandbox, agent={"MUSTER_TEST_MARKER": marker})
    process = await provider.start(Command("/bin/sh", ("-c", script)), sandbox, env)
    up = asyncio.get_running_loop().create_future()
    process.stdout.consume(lambda line: up.done() or up.set_result(line))
    process.stderr.consume(lambda line: None)
    await up
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


async def _until(condition: Callable[[], bool], patience: float = 60.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while loop.time() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.1)
    return False


@pytest.mark.parametrize("obeys", [True, False], ids=["stops-on-sigterm", "ignores-sigterm"])
async def test_a_killed_worker_leaves_no_container(obeys: bool, make_container: ProviderMaker, tmp_path: Path) -> None:
    """The engine CLI gets SIGTERM when its worker dies and passes it on; a run that ignores it is removed by the
    next provider on the machine (its worker is gone)."""
    provider = make_container(tmp_path / "homes")
    assert isinstance(provider, ContainerProvider)
    (tmp_path / "ws").mkdir()
    marker = new_marker()
    script = "echo up; exec sleep 300" if obeys else "trap '' TERM; echo up; sleep 300 & wait; wait"
    before = set(_containers(provider))
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WORKER,
        provider.kind,
        str(tmp_path / "homes"),
        str(tmp_path / "ws"),
        marker["MUSTER_TEST_MARKER"],
        script,
        json.dumps(provider.engine_env),
    )
    assert await worker.wait() == -signal.SIGKILL, "the worker must have started the run and been killed"
    if not obeys:
        assert processes_with(marker), "a run that ignores SIGTERM outlives its worker until a provider removes it"
        provider.sandbox(tmp_path / "ws")  # the next provider's first sandbox removes the containers of dead workers
    assert await _until(lambda: not processes_with(marker)), f"processes left: {processes_with(marker)}"
    assert await _until(lambda: not set(_containers(provider)) - before), "the run's container must be removed"


async def test_an_unreachable_docker_engine_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("docker") is None:
        pytest.skip("the docker CLI is not installed (apt-get install docker.io)")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'nobody.sock'}")
    problem = container_problem("docker")
    assert problem is not None and "\n" not in problem
    assert "cannot reach its engine" in problem and "DOCKER_HOST" in problem


async def test_both_engines_can_start_when_the_image_is_built(
    docker_host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    assert container_problem("podman") is None
    assert container_problem("docker") is None
