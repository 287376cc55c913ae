"""A dispatch turn in bubblewrap against the same turn on the host, and with the egress proxy against bubblewrap
without it, alternating in one run.

The near-empty turn is a fake CLI, a shell script printing a Claude ``init`` and ``result`` line (only ``/usr`` is
needed inside the sandbox): bwrap without network against the host, then bwrap with egress ``model`` (the bridge
started in front of the CLI, the proxy on the host) against bwrap without network. The real turn is Codex against
the fake model server: bwrap sharing the host's network (``open``) against the host, then bwrap with egress
``model`` (every request through the bridge and the proxy) against ``open``. Prints the p50 of each, the overhead at
p50 and the ratios.

    .venv/bin/python bench/sandbox/run.py [turns]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from muster_dispatch import (
    AgentInput,
    BwrapProvider,
    LocalProvider,
    claude_harness,
    cli_agent,
    codex_harness,
    dispatch,
)
from muster_dispatch.sandbox import SandboxProvider

SCRIPT = """#!/bin/sh
echo '{"type":"system","subtype":"init","session_id":"s-bench"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"ok","usage":{}}'
"""


async def turn(provider: SandboxProvider, agent: object, workspace: Path) -> float:
    started = time.perf_counter()
    result = await dispatch(agent, AgentInput("go"), workspace=workspace, provider=provider).result()  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    assert result.status == "completed", result.error
    return elapsed


async def compare(
    agent: object,
    providers: dict[str, SandboxProvider],
    pairs: list[tuple[str, str, str]],
    turns: int,
    label: str,
    workspace: Path,
) -> None:
    """``pairs``: (candidate, baseline, goal) whose overhead and ratio to print."""
    times: dict[str, list[float]] = {name: [] for name in providers}
    for provider in providers.values():  # warm-up: homes, configuration, page cache
        await turn(provider, agent, workspace)
    for _ in range(turns):
        for name, provider in providers.items():
            times[name].append(await turn(provider, agent, workspace))
    p50 = {name: statistics.median(values) * 1000 for name, values in times.items()}
    print(f"{label}: {turns} turns each, alternating")
    print("  " + "   ".join(f"{name} p50: {ms:.1f} ms" for name, ms in p50.items()))
    for candidate, baseline, goal in pairs:
        extra, ratio = p50[candidate] - p50[baseline], p50[candidate] / p50[baseline]
        print(f"  {candidate} against {baseline}: +{extra:.1f} ms at p50, ratio {ratio:.2f}x ({goal})")


async def codex(turns: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the fakes live in the repository's tests
    from tests.dispatch.cli.support import codex_agent
    from tests.dispatch.fakes.openai import FakeOpenAI
    from tests.dispatch.fakes.plans import Reply

    from muster_dispatch import ensure_cli

    fake = FakeOpenAI()
    with fake.running(), tempfile.TemporaryDirectory(prefix="muster-bench-sandbox-") as scratch:
        root = Path(scratch)
        (root / "ws").mkdir()
        fake.script.default = Reply(text="ok")
        agent = codex_agent(Path(ensure_cli(codex_harness())), fake.url)
        providers: dict[str, SandboxProvider] = {
            "local": LocalProvider(root / "homes"),
            "bwrap-open": BwrapProvider(root / "homes", egress="open"),
            "bwrap-egress": BwrapProvider(root / "homes", egress="model"),
        }
        pairs = [("bwrap-open", "local", "goal <= 1.1x"), ("bwrap-egress", "bwrap-open", "the egress proxy's cost")]
        await compare(agent, providers, pairs, turns, "real Codex turn", root / "ws")


async def main(turns: int) -> None:
    with tempfile.TemporaryDirectory(prefix="muster-bench-sandbox-") as scratch:
        root = Path(scratch)
        cli = root / "bin" / "fake-claude"
        cli.parent.mkdir()
        cli.write_text(SCRIPT, encoding="utf-8")
        cli.chmod(0o755)
        (root / "ws").mkdir()
        providers: dict[str, SandboxProvider] = {
            "local": LocalProvider(root / "homes"),
            "bwrap": BwrapProvider(root / "homes", egress="none"),
            "bwrap-egress": BwrapProvider(root / "homes", egress="model"),
        }
        pairs = [("bwrap", "local", "goal <= 15 ms"), ("bwrap-egress", "bwrap", "the bridge's start")]
        await compare(
            cli_agent(claude_harness(executable=cli)), providers, pairs, turns, "near-empty fake CLI turn", root / "ws"
        )
    await codex(max(turns // 4, 5))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 40))
