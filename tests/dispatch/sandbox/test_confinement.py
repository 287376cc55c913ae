"""A real Codex turn in bubblewrap, scripted by the fake model to try escapes with its shell tool: every escape fails
in the sandbox and succeeds on the host (Codex's own sandbox is ``danger-full-access`` in both, so it is ours that
stops them), and the turn completes with the fake's text either way."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from muster_dispatch import BwrapProvider, LocalProvider
from muster_dispatch.sandbox import SandboxProvider
from tests.dispatch.cli.support import codex_agent, run_turn
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, ToolCall

pytestmark = pytest.mark.anyio


@pytest.fixture
def planted() -> Iterator[Path]:
    """A secret in the host's home (the sandbox must not see it), removed afterwards."""
    secret = Path.home() / f".muster-sandbox-secret-{uuid.uuid4().hex[:8]}"
    secret.write_text("host-secret-42\n", encoding="utf-8")
    yield secret
    secret.unlink(missing_ok=True)


def _probes(outside: Path, secret: Path, other: Path) -> str:
    def probe(name: str, command: str) -> str:
        return f"({command}) >/dev/null 2>&1 && echo {name}:ok >> probe.txt || echo {name}:fail >> probe.txt"

    return "; ".join(
        [
            probe("inside", "echo in > inside.txt"),
            probe("outside", f"echo out > {outside}/escaped.txt"),
            probe("secret", f"grep -q host-secret-42 {secret}"),
            probe("other", f"ls {other} | grep -q neighbour.txt"),
        ]
    )


@pytest.mark.parametrize("kind", ["bwrap", "local"])
async def test_codex_escapes_fail_in_bwrap_and_succeed_on_the_host(
    kind: str, installed_clis: InstalledClis, fake_openai: FakeOpenAI, tmp_path: Path, planted: Path
) -> None:
    if kind == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    workspace, outside, other = tmp_path / "ws", tmp_path / "outside", tmp_path / "other-ws"
    for path in (workspace, outside, other):
        path.mkdir()
    (other / "neighbour.txt").write_text("x", encoding="utf-8")
    fake_openai.script.plan(Reply(tool=ToolCall(_probes(outside, planted, other))), Reply(text="Probed."))
    provider: SandboxProvider = (
        # The fake model listens on the host's loopback: this sandbox shares the host's network.
        BwrapProvider(tmp_path / "homes", egress="open") if kind == "bwrap" else LocalProvider(tmp_path / "homes")
    )

    turn = await run_turn(codex_agent(installed_clis.codex, fake_openai.url), "Probe", workspace, provider)

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Probed."
    seen = dict(line.split(":") for line in (workspace / "probe.txt").read_text(encoding="utf-8").split())
    escaped = "fail" if kind == "bwrap" else "ok"
    assert seen == {"inside": "ok", "outside": escaped, "secret": escaped, "other": escaped}
    assert (outside / "escaped.txt").exists() == (kind == "local")
