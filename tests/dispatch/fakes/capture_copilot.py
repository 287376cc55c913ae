"""Capture real GitHub Copilot CLI transcripts against the fake Anthropic server:
``python -m tests.dispatch.fakes.capture_copilot COPILOT [NAME…]``.

Each scenario runs the CLI in a fresh private HOME with its bring-your-own-provider variables and offline mode, and
writes ``copilot-<scenario>.jsonl`` / ``.meta.json`` as ``capture.py`` does; a turn that made model calls also gets
its session record, ``copilot-<scenario>.session.jsonl`` (stdout has no token counts; the record has).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.dispatch.fakes import anthropic
from tests.dispatch.fakes.capture import TRANSCRIPTS, run_cli, save
from tests.dispatch.fakes.plans import Plan, Reply, ToolCall
from tests.support.net import free_port

MODEL = "claude-sonnet-4-5"


@dataclass
class Scenario:
    name: str
    plans: list[Plan]
    prompt: str = "Say hello"
    network_down: bool = False
    followup: list[Plan] = field(default_factory=list)  # a second turn, resuming the first's session


def scenarios(work: Path) -> list[Scenario]:
    bash = ToolCall(name="bash", arguments={"command": "echo muster-tool-ok", "description": "echo"})
    create = ToolCall(name="create", call_id="call_2", arguments={"path": str(work / "hello.txt"), "file_text": "hi\n"})
    return [
        Scenario("plain", [Reply(text="Hello from the fake model.", thinking="The user wants a greeting.")]),
        Scenario("tool", [Reply(tool=bash), Reply(tool=create), Reply(text="The command printed it.")], "Run echo"),
        Scenario("ratelimit", [anthropic.rate_limited(None)]),
        Scenario("overloaded", [anthropic.overloaded(None)]),
        Scenario("transient", [anthropic.server_error(times=1), Reply(text="Recovered after a retry.")]),
        Scenario("network-down", [], network_down=True),
        Scenario("resume", [Reply(text="Noted: apple.")], "Remember apple", followup=[Reply(text="It was apple.")]),
    ]


def capture(executable: str, names: set[str]) -> None:
    version = subprocess.run([executable, "--version"], capture_output=True, text=True, check=True).stdout
    version = version.splitlines()[0].strip()
    fake = anthropic.FakeAnthropic()
    with fake.running(), tempfile.TemporaryDirectory(prefix="capture-copilot-") as tmp:
        unpacked = Path(tmp) / "unpacked"  # one unpacked package for every scenario
        for index, probe in enumerate(scenarios(Path(tmp))):
            if names and probe.name not in names:
                continue
            root = Path(tmp) / str(index)
            home, work = root / "home", root / "work"
            home.mkdir(parents=True)
            work.mkdir()
            scenario = next(s for s in scenarios(work) if s.name == probe.name)
            fake.script.reset(*scenario.plans)
            url = f"http://127.0.0.1:{free_port()}" if scenario.network_down else fake.url
            env = {
                "PATH": "/usr/bin:/bin",
                "HOME": str(home),
                "LANG": "C.UTF-8",
                "NO_COLOR": "1",
                "COPILOT_AUTO_UPDATE": "false",
                "COPILOT_OFFLINE": "true",
                "COPILOT_PKG_CACHE_HOME": str(unpacked),
                "COPILOT_PROVIDER_TYPE": "anthropic",
                "COPILOT_PROVIDER_BASE_URL": url,
                "COPILOT_PROVIDER_API_KEY": "sk-ant-test-key",
                "COPILOT_MODEL": MODEL,
            }
            base = [executable, "-p", scenario.prompt, "--output-format", "json", "--allow-all-tools"]
            session = _turn(f"copilot-{scenario.name}", base, env, work, home, version, fake)
            if scenario.followup:
                fake.script.reset(*scenario.followup)
                argv = [executable, "-p", "Which word?", "--output-format", "json", "--allow-all-tools"]
                _turn(f"copilot-{scenario.name}-2", [*argv, f"--resume={session}"], env, work, home, version, fake)


def _turn(
    name: str, argv: list[str], env: dict[str, str], work: Path, home: Path, version: str, fake: anthropic.FakeAnthropic
) -> str | None:
    started = time.monotonic()
    run = run_cli(argv, env, work, stdin=None, timeout=120)
    run.extra["seconds"] = round(time.monotonic() - started, 1)
    save(name, run, version, fake.script)
    records = sorted(home.glob(".copilot/session-state/*/events.jsonl"))
    if records:
        (TRANSCRIPTS / f"{name}.session.jsonl").write_text(records[0].read_text())
        return records[0].parent.name
    return None


def main(argv: list[str]) -> None:
    executable, *names = argv
    capture(executable, set(names))


if __name__ == "__main__":
    main(sys.argv[1:])
