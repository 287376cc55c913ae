"""A dispatch turn of a fake CLI in bubblewrap against the same turn on the host, alternating in one run; then the
same near-empty turn in a podman container beside both (a container per run: its start is the whole difference).

The fake CLI is a shell script printing a Claude ``init`` and ``result`` line (only ``/usr`` is needed inside the
sandbox). Prints the p50 of each, the sandbox's overhead at p50 and the turn-level ratio.

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
    DispatchError,
    LocalProvider,
    PodmanProvider,
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


async def compare(agent: object, root: Path, turns: int, label: str, network: str = "none") -> None:
    providers: dict[str, SandboxProvider] = {
        "local": LocalProvider(root / "homes"),
        "bwrap": BwrapProvider(root / "homes", egress="open" if network == "open" else "none"),
    }
    times: dict[str, list[float]] = {name: [] for name in providers}
    for provider in providers.values():  # warm-up: homes, configuration, page cache
        await turn(provider, agent, root / "ws")
    for _ in range(turns):
        for name, provider in providers.items():
            times[name].append(await turn(provider, agent, root / "ws"))
    local, bwrap = (statistics.median(times[name]) * 1000 for name in ("local", "bwrap"))
    print(f"{label}: {turns} turns each, alternating")
    print(f"  local p50: {local:.1f} ms   bwrap p50: {bwrap:.1f} ms")
    print(f"  bwrap overhead at p50: {bwrap - local:.1f} ms (goal <= 15 ms); turn ratio: {bwrap / local:.2f}x")


async def podman(agent: object, root: Path, turns: int) -> None:
    providers: dict[str, SandboxProvider] = {
        "local": LocalProvider(root / "homes"),
        "bwrap": BwrapProvider(root / "homes", egress="none"),
        "podman": PodmanProvider(root / "homes", egress="none", read_only=[root / "bin"]),
    }
    try:
        providers["podman"].sandbox(root / "ws")
    except DispatchError as exc:
        print(f"podman: not measured: {exc.message}")
        return
    times: dict[str, list[float]] = {name: [] for name in providers}
    for provider in providers.values():
        await turn(provider, agent, root / "ws")
    for _ in range(turns):
        for name, provider in providers.items():
            times[name].append(await turn(provider, agent, root / "ws"))
    local, bwrap, container = (statistics.median(times[name]) * 1000 for name in ("local", "bwrap", "podman"))
    print(f"near-empty turn, a podman container per run: {turns} turns each, alternating")
    print(f"  local p50: {local:.1f} ms   bwrap p50: {bwrap:.1f} ms   podman p50: {container:.1f} ms")
    print(
        f"  podman per-run start (over local): {container - local:.1f} ms; podman/bwrap: {container / bwrap:.1f}x;"
        f" podman/local: {container / local:.1f}x"
    )


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
        await compare(agent, root, turns, "real Codex turn (goal <= 1.1x)", network="open")


async def main(turns: int) -> None:
    with tempfile.TemporaryDirectory(prefix="muster-bench-sandbox-") as scratch:
        root = Path(scratch)
        cli = root / "bin" / "fake-claude"
        cli.parent.mkdir()
        cli.write_text(SCRIPT, encoding="utf-8")
        cli.chmod(0o755)
        (root / "ws").mkdir()
        # A key, so that the harness does not look for the user's login (the fake CLI reads none).
        agent = cli_agent(claude_harness(executable=cli), variables={"ANTHROPIC_API_KEY": "sk-bench"})
        await compare(agent, root, turns, "near-empty fake CLI turn")
        await podman(agent, root, max(turns // 4, 5))
    await codex(max(turns // 4, 5))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 40))
