"""Capture real Gemini CLI transcripts against the fake Gemini API: ``python -m tests.dispatch.fakes.capture_gemini
GEMINI [NAME…]``, written like ``capture``'s (``tests/dispatch/transcripts/gemini-<scenario>.jsonl`` + meta)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.dispatch.fakes import gemini
from tests.dispatch.fakes.capture import Run, Scenario, run_cli, save, with_workdir
from tests.dispatch.fakes.plans import Fail, Reply, ToolCall

SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "general": {"maxAttempts": 2},
    "privacy": {"usageStatisticsEnabled": False},
}
ENV = {"GEMINI_API_KEY": "test-gemini-key", "GEMINI_CLI_TRUST_WORKSPACE": "true", "GEMINI_CLI_NO_RELAUNCH": "true"}


def scenarios() -> list[Scenario]:
    g = gemini
    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3600s"}
    exhausted = g.error_body(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).", retry_info)
    write = ToolCall(name="write_file", arguments={"file_path": "WORKDIR/hello.txt", "content": "hello\n"})
    return [
        Scenario("plain", [Reply(text="Hello from the fake model.", thinking="The user wants a greeting.")]),
        Scenario(
            "tool",
            [Reply(tool=ToolCall("echo muster-tool-ok")), Reply(text="The command printed it.")],
            prompt="Run echo",
        ),
        Scenario("file-change", [Reply(tool=write), Reply(text="Wrote hello.txt.")], prompt="Create hello.txt"),
        Scenario("transient", [g.server_error(1), Reply(text="Recovered.")]),
        Scenario("quota", [g.quota_exhausted()]),
        Scenario("quota-retry-after", [Fail(429, exhausted, times=None)]),
        Scenario("capacity", [g.capacity_exhausted()]),
        Scenario("server-error", [g.server_error(None)]),
        Scenario("cut-off", [gemini.CutOff()]),
        Scenario(
            "resume",
            [Reply(text="Noted: apple.")],
            prompt="Remember the word apple",
            followup=lambda session: ["--resume", session],
            followup_plans=[Reply(text="The word was apple.")],
        ),
    ]


def capture(executable: str, names: set[str]) -> None:
    version = subprocess.run([executable, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    fake = gemini.FakeGemini()
    with fake.running():
        for scenario in scenarios():
            if names and scenario.name not in names:
                continue
            with tempfile.TemporaryDirectory(prefix="capture-gemini-") as tmp:
                home, work = Path(tmp) / "home", Path(tmp) / "work"
                (home / ".gemini").mkdir(parents=True)
                work.mkdir()
                (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
                env = {
                    "PATH": "/usr/bin:/bin",
                    "HOME": str(home),
                    "LANG": "C.UTF-8",
                    "GOOGLE_GEMINI_BASE_URL": fake.url,
                }
                env |= ENV
                fake.script.reset(*(with_workdir(plan, work) for plan in scenario.plans))
                base = [executable, f"--prompt={scenario.prompt}", "--output-format", "stream-json"]
                base += ["--approval-mode", "yolo", "-m", gemini.MODEL]
                run = _run(base, env, work, scenario.timeout, home)
                save(f"gemini-{scenario.name}", run, version, fake.script)
                if scenario.followup is not None:
                    session = json.loads(run.stdout[0])["session_id"]
                    fake.script.reset(*scenario.followup_plans)
                    argv = [executable, "--prompt=Which word?", "--output-format", "stream-json", "-m", gemini.MODEL]
                    run2 = _run(argv + scenario.followup(session), env, work, scenario.timeout, home)
                    run2.extra["first_session"] = session
                    save(f"gemini-{scenario.name}-2", run2, version, fake.script)


def _run(argv: list[str], env: dict[str, str], work: Path, timeout: float, home: Path) -> Run:
    started = time.monotonic()
    run = run_cli(argv, env, work, stdin=None, timeout=timeout)
    run.extra["seconds"] = round(time.monotonic() - started, 1)
    run.extra["session_files"] = sorted(str(p.relative_to(home)) for p in home.rglob("*.jsonl"))
    # Stack traces name the capturing machine's paths; the first line of each is what a reader needs.
    run.stderr = [line for line in run.stderr if not line.startswith("    at ")]
    return run


if __name__ == "__main__":
    executable, *names = sys.argv[1:]
    capture(executable, set(names))
