"""Dispatch benchmarks (bounded to well under two minutes, no network).

1. Decode throughput: harness ``events(line)`` over the captured real Claude / Codex / OpenCode / Gemini CLI
   transcripts vs ``json.loads`` of the same lines, in lines/s of CPU time; goal: decode ≥ 0.8 × json.loads.
2. Per-turn overhead: ``dispatch(...).result()`` of a fake CLI printing a recorded transcript vs reading the same
   process with a bare asyncio subprocess; goal: ≤ 1.1×, and the added milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from muster_dispatch import (
    AgentInput,
    claude_harness,
    cli_agent,
    codex_harness,
    copilot_harness,
    dispatch,
    gemini_harness,
    local_provider,
    opencode_harness,
)
from muster_dispatch.harness import Harness

TRANSCRIPTS = Path(__file__).resolve().parents[2] / "tests" / "dispatch" / "transcripts"
DECODE_LINES = 60_000  # per harness (the transcripts repeated)
TURNS = 200  # per variant for the overhead benchmark
DECODE_GOAL = 0.8  # decode lines/s at least this fraction of json.loads
TURN_GOAL = 1.1  # a dispatched turn at most this multiple of a bare asyncio subprocess


def _lines(prefix: str) -> list[str]:
    lines: list[str] = []
    for path in sorted(TRANSCRIPTS.glob(f"{prefix}-*.jsonl")):
        if path.name.endswith(".session.jsonl"):
            continue  # a session record on disk, not what the CLI printed
        lines += [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        sys.exit(f"no {prefix} transcripts under {TRANSCRIPTS}")
    return (lines * (DECODE_LINES // len(lines) + 1))[:DECODE_LINES]


def _seconds(fn: Callable[[str], object], lines: list[str]) -> float:
    # CPU time of this thread: time the shared machine gives to other processes counts for neither side (on the wall
    # clock the longer loop is preempted more often, which biased best-of-N against the slower of the two).
    start = time.thread_time()
    for line in lines:
        fn(line)
    return time.thread_time() - start


def _rates(fn: Callable[[str], object], baseline: Callable[[str], object], lines: list[str]) -> tuple[float, float]:
    """Best of nine rounds each, alternating, so a noisy neighbour on the shared machine hits both alike."""
    ours, theirs = float("inf"), float("inf")
    for _ in range(9):
        theirs = min(theirs, _seconds(baseline, lines))
        ours = min(ours, _seconds(fn, lines))
    return len(lines) / ours, len(lines) / theirs


def bench_decode() -> bool:
    ok = True
    harness: Harness
    for harness in (claude_harness(), codex_harness(), opencode_harness(), gemini_harness(), copilot_harness()):
        lines = _lines(harness.name)
        decoded, baseline = _rates(harness.events, json.loads, lines)
        ratio = decoded / baseline
        ok = ok and ratio >= DECODE_GOAL
        print(
            f"decode {harness.name:8}  {decoded:12,.0f} lines/s   json.loads {baseline:12,.0f} lines/s   "
            f"ratio {ratio:.2f} (goal ≥ {DECODE_GOAL:.2f}) {'OK' if ratio >= DECODE_GOAL else 'BELOW GOAL'}"
        )
    return ok


async def _bare(program: str, workspace: Path) -> float:
    start = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        program,
        cwd=workspace,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    lines = 0
    while await process.stdout.readline():
        lines += 1
    await process.wait()
    assert lines > 0
    return time.perf_counter() - start


async def _dispatched(agent: object, workspace: Path, provider: object) -> float:
    start = time.perf_counter()
    result = await dispatch(agent, AgentInput("run it"), workspace=workspace, provider=provider).result()  # type: ignore[arg-type]
    elapsed = time.perf_counter() - start
    assert result.status == "completed", result.error
    return elapsed


async def bench_overhead() -> bool:
    with tempfile.TemporaryDirectory(prefix="muster-bench-") as tmp:
        root = Path(tmp)
        workspace = root / "work"
        workspace.mkdir()
        fake = root / "fake-claude"
        fake.write_text(f"#!/bin/sh\nexec cat {TRANSCRIPTS / 'claude-tool.jsonl'}\n", encoding="utf-8")
        fake.chmod(0o755)
        # A key for the fake CLI (it reads none): without one, the run would look for this machine's Claude login and
        # fail where there is none, or copy it into the run's home at every turn where there is.
        agent = cli_agent(claude_harness(executable=fake), variables={"ANTHROPIC_API_KEY": "bench-no-such-key"})
        provider = local_provider(root / "homes")
        await _bare(str(fake), workspace)  # warm both paths once
        await _dispatched(agent, workspace, provider)
        bare: list[float] = []
        ours: list[float] = []
        for _ in range(TURNS):  # interleaved, so a noisy neighbour hits both
            bare.append(await _bare(str(fake), workspace))
            ours.append(await _dispatched(agent, workspace, provider))
    b, d = statistics.median(bare), statistics.median(ours)
    ratio = d / b
    print(
        f"turn overhead   dispatch {d * 1000:7.2f} ms   bare asyncio subprocess {b * 1000:7.2f} ms   "
        f"ratio {ratio:.2f} (goal ≤ {TURN_GOAL:.2f}) {'OK' if ratio <= TURN_GOAL else 'ABOVE GOAL'}   "
        f"added {(d - b) * 1000:+.2f} ms/turn   (median of {TURNS} turns each)"
    )
    return ratio <= TURN_GOAL


def main() -> None:
    which = set(sys.argv[1:]) or {"decode", "overhead"}  # e.g. `run.py decode` runs only the first benchmark
    decode_ok = bench_decode() if "decode" in which else True
    overhead_ok = asyncio.run(bench_overhead()) if "overhead" in which else True
    print(f"dispatch benchmarks: {'all goals met' if decode_ok and overhead_ok else 'a goal was missed'}")


if __name__ == "__main__":
    main()
