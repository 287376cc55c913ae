"""Egress of a real Codex turn in bubblewrap (the default, ``egress = "model"``): the fake model scripts its shell tool
to reach a server on the host's loopback that is NOT the model, through the sandbox's proxy and directly, and the
model's own URL. In bubblewrap the other server is refused both ways (the proxy's refusal is a warning event naming
it) while the model answers and the turn completes; on the host (``local``) every connection succeeds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from muster_dispatch import AgentInput, BwrapProvider, LocalProvider, dispatch
from muster_dispatch.sandbox import SandboxProvider
from tests.dispatch.cli.support import codex_agent, run_turn
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, ToolCall
from tests.dispatch.sandbox.support import OTHER_BODY, fetch, other_port

__all__ = ["other_port"]  # a fixture, used by name

pytestmark = pytest.mark.anyio


def _probes(model_url: str, other: int) -> str:
    def probe(name: str, command: str) -> str:
        return f"({command}) >/dev/null 2>&1 && echo {name}:ok >> probe.txt || echo {name}:fail >> probe.txt"

    other_url = f"http://127.0.0.1:{other}/"
    expect = OTHER_BODY.decode()
    return "; ".join(
        [
            probe("proxied", f"{fetch(other_url, proxy=True)} {expect}"),
            probe("direct", f"{fetch(other_url, proxy=False)} {expect}"),
            probe("model", fetch(f"{model_url}/v1/models", proxy=False)),
        ]
    )


@pytest.mark.parametrize("kind", ["bwrap", "local"])
async def test_only_the_model_endpoint_is_reachable_from_bwrap(
    kind: str, installed_clis: InstalledClis, fake_openai: FakeOpenAI, tmp_path: Path, other_port: int
) -> None:
    if kind == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    fake_openai.script.plan(Reply(tool=ToolCall(_probes(fake_openai.url, other_port))), Reply(text="Probed."))
    provider: SandboxProvider = (
        BwrapProvider(tmp_path / "homes") if kind == "bwrap" else LocalProvider(tmp_path / "homes")
    )

    turn = await run_turn(codex_agent(installed_clis.codex, fake_openai.url), "Probe", workspace, provider)

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Probed."
    seen = dict(line.split(":") for line in (workspace / "probe.txt").read_text(encoding="utf-8").split())
    escaped = "fail" if kind == "bwrap" else "ok"
    assert seen == {"proxied": escaped, "direct": escaped, "model": "ok"}
    # Codex reaches for more hosts of its own (github.com, chatgpt.com): refused too, and said so.
    refused = {e.name: e for e in turn.of("warning") if e.code == "egress"}
    model = fake_openai.url.removeprefix("http://")
    assert model not in refused
    if kind == "bwrap":
        assert f"127.0.0.1:{other_port}" in refused
        assert f"127.0.0.1:{other_port}" in (refused[f"127.0.0.1:{other_port}"].text or "")
    else:
        assert refused == {}


async def test_egress_none_leaves_even_the_model_unreachable(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """Without egress the CLI cannot reach its model: the turn fails, and nothing was asked of the fake."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    fake_openai.script.plan(Reply(text="never"))
    agent = codex_agent(installed_clis.codex, fake_openai.url)
    running = dispatch(
        agent,
        AgentInput("Hi"),
        workspace=workspace,
        provider=BwrapProvider(tmp_path / "homes", egress="none"),
        deadline=60,
    )
    result = await running.result()
    assert result.status == "failed"
    assert fake_openai.script.requests == []
