"""Helpers of the real-CLI scenario tests: agents pointed at the fakes, one turn run to its result, process scans."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muster_dispatch import (
    AgentEvent,
    AgentInput,
    Continuation,
    Journal,
    TurnResult,
    claude_harness,
    cli_agent,
    codex_harness,
    dispatch,
    gemini_harness,
)
from muster_dispatch.agents import CliAgent
from tests.dispatch.fakes.gemini import MODEL as GEMINI_MODEL
from tests.dispatch.fakes.openai import MODEL as CODEX_MODEL
from tests.dispatch.fakes.plans import Recorded

CODEX_KEY_VAR = "MUSTER_FAKE_OPENAI_KEY"
RESET_EPOCH = 1893456000  # 2030-01-01T00:00:00Z


def claude_agent(
    executable: Path,
    base_url: str,
    *,
    subscription: bool = False,
    storage: Any = None,
    extra: Mapping[str, str] | None = None,
    name: str | None = None,
    permission_mode: str | None = None,
) -> CliAgent:
    """Claude Code pointed at ``base_url``; ``subscription`` logs in with an OAuth token (usage-limit headers)."""
    variables = {"ANTHROPIC_BASE_URL": base_url, "CLAUDE_CODE_MAX_RETRIES": "2"}
    if subscription:
        variables["CLAUDE_CODE_OAUTH_TOKEN"] = "sk-ant-oat01-test-token"
    else:
        variables["ANTHROPIC_API_KEY"] = "sk-ant-test-key"
    variables.update(extra or {})
    harness = (
        claude_harness(executable=executable)
        if permission_mode is None
        else claude_harness(executable=executable, permission_mode=permission_mode)
    )
    return cli_agent(harness, variables=variables, storage=storage, name=name)


def codex_agent(
    executable: Path,
    base_url: str,
    *,
    storage: Any = None,
    extra: Mapping[str, str] | None = None,
    name: str | None = None,
) -> CliAgent:
    """Codex with a config.toml (written by the harness) whose model provider is the fake at ``base_url``."""
    variables = {
        "MUSTER_CODEX_BASE_URL": f"{base_url}/v1",
        "MUSTER_CODEX_ENV_KEY": CODEX_KEY_VAR,
        CODEX_KEY_VAR: "sk-test-key",
        "MUSTER_CODEX_MAX_RETRIES": "1",
        "MUSTER_CODEX_SANDBOX": "danger-full-access",
    }
    variables.update(extra or {})
    return cli_agent(
        codex_harness(executable=executable), model=CODEX_MODEL, variables=variables, storage=storage, name=name
    )


def gemini_agent(
    executable: Path | str, base_url: str, *, extra: dict[str, str] | None = None, storage: Any = None
) -> CliAgent:
    """Gemini CLI pointed at the fake at ``base_url`` with a key, two attempts per request."""
    variables = {
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_API_KEY": "test-gemini-key",
        "MUSTER_GEMINI_MAX_ATTEMPTS": "2",
    }
    variables.update(extra or {})
    return cli_agent(gemini_harness(executable=executable), model=GEMINI_MODEL, variables=variables, storage=storage)


@dataclass
class Turn:
    events: list[AgentEvent]
    result: TurnResult

    def of(self, kind: str) -> list[AgentEvent]:
        return [e for e in self.events if e.type == kind]

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]


async def run_turn(
    agent: Any,
    prompt: str,
    workspace: Path,
    provider: Any,
    *,
    continuation: Continuation | None = None,
    live_input: bool = False,
    deadline: float | None = 90,
    journal: Journal | None = None,
    on_event: Callable[[AgentEvent, Any], Awaitable[None]] | None = None,
) -> Turn:
    """Dispatch one turn, collect every event, then the result. ``on_event(event, dispatch)`` may steer."""
    running = dispatch(
        agent,
        AgentInput(prompt, continuation=continuation, live_input=live_input),
        workspace=workspace,
        provider=provider,
        deadline=deadline,
        journal=journal,
    )
    events: list[AgentEvent] = []
    async for event in running:
        events.append(event)
        if on_event is not None:
            await on_event(event, running)
    return Turn(events, await running.result())


def user_texts(request: Recorded) -> list[str]:
    """Every text the user side sent in an Anthropic or Responses request (prompts, tool results, steering)."""
    body = request.body
    out: list[str] = []
    if not isinstance(body, dict):
        return out
    items = body.get("messages") or body.get("input") or []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("role") not in ("user", None) and item.get("type") not in ("function_call_output",):
            continue
        content = item.get("content", item.get("output"))
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict):
                    text = part.get("text")
                    if isinstance(text, str):
                        out.append(text)
                    inner = part.get("content")
                    if isinstance(inner, str):
                        out.append(inner)
                    elif isinstance(inner, list):
                        out.extend(str(p.get("text")) for p in inner if isinstance(p, dict) and p.get("text"))
    return out


def assistant_texts(request: Recorded) -> list[str]:
    """The assistant turns a request carries as history (what a resume must have restored)."""
    body = request.body
    out: list[str] = []
    if not isinstance(body, dict):
        return out
    items = body.get("messages") or body.get("input") or []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("role") == "assistant":
            content = item.get("content")
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out.extend(str(p.get("text")) for p in content if isinstance(p, dict) and p.get("text"))
    return out


def new_marker() -> dict[str, str]:
    """An agent variable that lets a test find every process of its CLI in /proc (orphan checks)."""
    return {"MUSTER_TEST_MARKER": uuid.uuid4().hex}


def processes_with(marker: Mapping[str, str]) -> list[int]:
    """PIDs of live processes whose environment carries ``marker`` (zombies excluded)."""
    (name, value), *_ = marker.items()
    needle = f"{name}={value}".encode()
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        if needle in environ.split(b"\0") and "State:\tZ" not in status:
            found.append(int(entry))
    return found


@contextmanager
def processes_seen(marker: Mapping[str, str]) -> Iterator[set[int]]:
    """The PIDs of every process carrying ``marker`` seen while the block runs, sampled from its start.

    A CLI's processes exist from its spawn, long before it prints its first line (on a loaded machine a Node.js CLI
    may print nothing for many seconds): sampling from the start keeps an orphan check from being blind then.
    """
    seen: set[int] = set()
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.update(processes_with(marker))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield seen
    finally:
        done.set()
        sampler.join()


def last_json(path: Path) -> Any:
    return json.loads(path.read_text().splitlines()[-1])
