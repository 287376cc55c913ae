"""``muster run`` and ``muster runs`` against a live service whose dispatch agents are custom test agents."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.console.support import ESC, Terminal, in_terminal, piped
from tests.runs.support import dispatch_env

# Slow: a `muster` process per command.
pytestmark = pytest.mark.slow

AGENTS = """
[dispatch_agents.fast]
kind = "custom"
entrypoint = "tests.runs.agents:fast"

[dispatch_agents.hold]
kind = "custom"
entrypoint = "tests.runs.agents:hold"

[dispatch_agents.broken]
kind = "custom"
entrypoint = "tests.runs.agents:broken"
"""


@pytest.fixture
def dispatching(service: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any, dict[str, str]]:
    workspaces = dispatch_env(monkeypatch, tmp_path)
    config = tmp_path / "muster.toml"
    config.write_text(AGENTS)
    _url, http, env = service(config=config)
    return workspaces, http, env


def test_run_follow_in_a_terminal_shows_events_live_and_usage_at_the_end(
    dispatching: tuple[Path, Any, dict[str, str]],
) -> None:
    workspaces, _http, env = dispatching
    terminal = Terminal(env, "run", "hold", "gate", "--workspace", "w1", "--follow")
    terminal.expect(lambda text: "started" in text)  # shown while the run still waits
    assert terminal.process.poll() is None
    (workspaces / "w1" / "gate").touch()
    terminal.expect(lambda text: "released" in text and "completed" in text)
    assert terminal.wait() == 0
    assert re.search(r"\x1b\[[0-9;]*m", terminal.text)  # colours on a terminal

    code, shown = in_terminal(env, "run", "fast", "hello", "--follow")
    assert code == 0 and "✓ run" in shown and "3 in · 20 out" in shown


def test_runs_and_run_piped_plain_and_json(dispatching: tuple[Path, Any, dict[str, str]]) -> None:
    _workspaces, _http, env = dispatching
    followed = piped(env, "run", "fast", "hello", "--follow")
    assert followed.code == 0, followed.err
    assert ESC not in followed.out
    assert re.search(r"^\d+ text_delta 0$", followed.out, re.M)
    assert re.search(r"^✓ run \S+ completed · \S+ · 3 in · 20 out$", followed.out, re.M), followed.out

    as_json = piped(env, "run", "fast", "again", "--follow", "--json")
    records = [json.loads(line) for line in as_json.out.splitlines()]
    assert records[0]["event"]["type"] == "turn.input" and records[-1]["status"] == "completed"
    assert records[-1]["text"] == "done: again"

    queued = piped(env, "run", "fast", "later", "--json")
    assert queued.code == 0 and json.loads(queued.out)["status"] in ("queued", "running", "completed")

    listed = piped(env, "runs")
    assert listed.code == 0 and ESC not in listed.out
    assert listed.out.splitlines()[0].split() == ["run", "status", "agent", "duration", "usage", "error", "prompt"]
    assert re.search(r"\scompleted\s+fast\s+\S+\s+3 in · 20 out\s+hello$", listed.out, re.M), listed.out
    page = json.loads(piped(env, "runs", "--json", "--agent", "fast").out)
    assert {r["prompt"] for r in page["runs"]} == {"hello", "again", "later"}


def test_a_failed_run_is_one_line_and_a_non_zero_status(dispatching: tuple[Path, Any, dict[str, str]]) -> None:
    _workspaces, _http, env = dispatching
    failed = piped(env, "run", "broken", "anything", "--follow")
    assert failed.code == 1
    assert failed.err.startswith("muster: run ") and "ended failed (quota" in failed.err
    assert failed.err.count("\n") == 1
    unknown = piped(env, "run", "nobody", "x")
    assert unknown.code == 1 and unknown.err.startswith("muster: ") and "Traceback" not in unknown.err


def test_a_run_into_a_new_workspace_says_where_it_is(dispatching: tuple[Path, Any, dict[str, str]]) -> None:
    workspaces, _http, env = dispatching
    assert not (workspaces / "brand-new").exists()
    queued = piped(env, "run", "fast", "hello", "--workspace", "brand-new")
    assert queued.code == 0, queued.err
    where = workspaces.resolve() / "brand-new"
    assert f"workspace brand-new: {where}\n" in queued.out and where.is_dir()
    followed = piped(env, "run", "fast", "again", "--workspace", "other-new", "--follow")
    assert followed.code == 0 and f"workspace other-new: {workspaces.resolve() / 'other-new'}" in followed.out
