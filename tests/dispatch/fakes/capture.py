"""Capture real CLI transcripts against the fakes: ``python -m tests.dispatch.fakes.capture CLAUDE CODEX [NAME…]``.

Each scenario runs the real CLI in a fresh private HOME (and CODEX_HOME) and writes its stdout lines verbatim to
``tests/dispatch/transcripts/<cli>-<scenario>.jsonl`` with ``<cli>-<scenario>.meta.json`` (CLI version, argv, env
NAMES only, exit code, stderr lines, the requests the fake received). The decoders are tested on these files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tests.dispatch.fakes import anthropic, openai
from tests.dispatch.fakes.plans import Plan, Reply, Script, ToolCall
from tests.support.net import free_port

TRANSCRIPTS = Path(__file__).resolve().parent.parent / "transcripts"
RESET_EPOCH = 1893456000  # 2030-01-01T00:00:00Z: far enough that the CLI prints a date, fixed so captures are stable

CLAUDE_ENV = {
    "ANTHROPIC_API_KEY": "sk-ant-test-key",
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_MAX_RETRIES": "2",
}
CODEX_KEY_VAR = "MUSTER_FAKE_OPENAI_KEY"


def codex_config(
    base_url: str, *, retries: int = 1, idle_ms: int = 10000, sandbox: str | None = "danger-full-access"
) -> str:
    """The config.toml that points codex at the fake Responses server."""
    mode = f'sandbox_mode = "{sandbox}"\n' if sandbox else ""
    return f"""model = "{openai.MODEL}"
model_provider = "fake"
approval_policy = "never"
{mode}
[model_providers.fake]
name = "fake"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "{CODEX_KEY_VAR}"
request_max_retries = {retries}
stream_max_retries = {retries}
stream_idle_timeout_ms = {idle_ms}
supports_websockets = false
"""


@dataclass
class Turn:
    argv: list[str]
    stdin: str | None = None
    timeout: float = 60


@dataclass
class Run:
    """A running CLI process's captured output."""

    argv: list[str]
    env_names: list[str]
    exit_code: int | None
    stdout: list[str]
    stderr: list[str]
    timed_out: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def run_cli(argv: Sequence[str], env: dict[str, str], cwd: Path, *, stdin: str | None, timeout: float) -> Run:
    """Run one CLI turn; on timeout the whole process group is killed (codex can wait for the network forever)."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
    return Run(
        list(argv), sorted(env), None if timed_out else proc.returncode, out.splitlines(), err.splitlines(), timed_out
    )


def save(name: str, run: Run, version: str, script: Script) -> None:
    TRANSCRIPTS.mkdir(exist_ok=True)
    (TRANSCRIPTS / f"{name}.jsonl").write_text("".join(line + "\n" for line in run.stdout))
    requests = [
        {"method": r.method, "path": r.path, "answered": r.answered, "summary": summarize(r.body)}
        for r in script.requests
    ]
    meta = {
        "cli_version": version,
        "argv": [a if not a.startswith("/") else Path(a).name for a in run.argv],
        "env_names": run.env_names,
        "exit_code": run.exit_code,
        "timed_out": run.timed_out,
        "stderr": run.stderr,
        "requests": requests,
        **run.extra,
    }
    (TRANSCRIPTS / f"{name}.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"== {name}: exit={run.exit_code} timed_out={run.timed_out} lines={len(run.stdout)}", flush=True)


def summarize(body: Any) -> Any:
    """A short, stable view of a model request: the last user/tool messages only (system prompts are huge)."""
    if not isinstance(body, dict):
        return body
    if "messages" in body:  # Anthropic
        tail = body["messages"][-2:]
        return {"model": body.get("model"), "n_messages": len(body["messages"]), "tail": _clip(tail)}
    if "input" in body:  # Responses
        items = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return {"model": body.get("model"), "n_input": len(items), "tail": _clip(items[-2:])}
    return _clip(body)


def _clip(value: Any) -> Any:
    text = json.dumps(value)
    return json.loads(text) if len(text) < 1500 else text[:1500]


# ------------------------------------------------------------------ scenarios


@dataclass
class Scenario:
    name: str
    plans: list[Plan]
    prompt: str = "Say hello"
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 60
    network_down: bool = False
    stdin: str | None = None
    followup: Callable[[str], list[str]] | None = None  # argv suffix of a second turn given the first's session id
    followup_plans: list[Plan] = field(default_factory=list)
    retries: int = 1  # codex request_max_retries / stream_max_retries
    sandbox: str | None = "danger-full-access"  # codex sandbox_mode (None: codex's default)


def with_workdir(plan: Plan, work: Path) -> Plan:
    """Plans may name paths under ``WORKDIR``: the capture's real workspace."""
    if isinstance(plan, Reply) and plan.tool is not None and plan.tool.arguments is not None:
        arguments = json.loads(json.dumps(plan.tool.arguments).replace("WORKDIR", str(work)))
        return replace(plan, tool=replace(plan.tool, arguments=arguments))
    return plan


def claude_session(stdout: list[str]) -> str:
    for line in stdout:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("session_id"):
            return str(data["session_id"])
    raise RuntimeError("no session id in the claude output")


def codex_thread(stdout: list[str]) -> str:
    for line in stdout:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("type") == "thread.started":
            return str(data["thread_id"])
    raise RuntimeError("no thread id in the codex output")


def live_input_stdin(*texts: str) -> str:
    return "".join(
        json.dumps({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": t}]}}) + "\n"
        for t in texts
    )


def claude_scenarios() -> list[Scenario]:
    return [
        Scenario("plain", [Reply(text="Hello from the fake model.", thinking="The user wants a greeting.")]),
        Scenario(
            "tool",
            [Reply(text="I will run it.", tool=ToolCall("echo muster-tool-ok")), Reply(text="The command printed it.")],
            prompt="Run echo",
            extra_args=["--allowedTools", "Bash"],
        ),
        Scenario(
            "partial-messages",
            [
                Reply(text="I will run it.", thinking="Plan: run echo.", tool=ToolCall("echo muster-tool-ok")),
                Reply(text="Done."),
            ],
            prompt="Run echo",
            extra_args=["--include-partial-messages"],
        ),
        Scenario(
            "file-change",
            [
                Reply(tool=ToolCall(name="Write", arguments={"file_path": "WORKDIR/hello.txt", "content": "hello\n"})),
                Reply(text="Wrote hello.txt."),
            ],
            prompt="Create hello.txt",
        ),
        Scenario(
            "file-change-accept-edits",
            [
                Reply(tool=ToolCall(name="Write", arguments={"file_path": "WORKDIR/hello.txt", "content": "hello\n"})),
                Reply(text="Wrote hello.txt."),
            ],
            prompt="Create hello.txt",
            extra_args=["--permission-mode", "acceptEdits"],
        ),
        Scenario(
            "file-change-bypass",
            [
                Reply(tool=ToolCall(name="Write", arguments={"file_path": "WORKDIR/hello.txt", "content": "hello\n"})),
                Reply(text="Wrote hello.txt."),
            ],
            prompt="Create hello.txt",
            extra_args=["--permission-mode", "bypassPermissions"],
        ),
        Scenario(
            "bash-write-default",
            [Reply(tool=ToolCall("touch made-by-bash.txt && echo made")), Reply(text="Done.")],
            prompt="Make a file with bash",
        ),
        Scenario(
            "bash-write-accept-edits",
            [Reply(tool=ToolCall("touch made-by-bash.txt && echo made")), Reply(text="Done.")],
            prompt="Make a file with bash",
            extra_args=["--permission-mode", "acceptEdits"],
        ),
        Scenario(
            "tool-default-permissions",
            [Reply(tool=ToolCall("echo muster-tool-ok")), Reply(text="The command was denied.")],
            prompt="Run echo",
        ),
        *_claude_failures(),
        *_claude_sessions(),
    ]


def _claude_failures() -> list[Scenario]:
    a = anthropic
    return [
        Scenario("transient", [a.rate_limited(1), a.overloaded(1), Reply(text="Recovered after retries.")]),
        Scenario("ratelimit", [a.rate_limited(None)]),
        Scenario("overloaded", [a.overloaded(None)]),
        Scenario("server-error", [a.server_error(None)]),
        Scenario("auth", [a.auth_failed()]),
        Scenario("usage-limit-apikey", [a.usage_limited(RESET_EPOCH)]),
        Scenario(
            "usage-limit",
            [a.usage_limited(RESET_EPOCH)],
            env={"CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-test", "ANTHROPIC_API_KEY": ""},
        ),
        Scenario("credit-too-low", [a.credit_too_low()]),
        Scenario("api-usage-limit", [a.api_usage_limit()]),
        Scenario("network-down", [], network_down=True, timeout=60),
    ]


def _claude_sessions() -> list[Scenario]:
    return [
        Scenario(
            "resume",
            [Reply(text="First answer.")],
            prompt="Remember the word apple",
            followup=lambda sid: ["--resume", sid],
            followup_plans=[Reply(text="The word was apple.")],
        ),
        Scenario(
            "fork",
            [Reply(text="First answer.")],
            prompt="Remember the word pear",
            followup=lambda sid: ["--resume", sid, "--fork-session"],
            followup_plans=[Reply(text="Forked: the word was pear.")],
        ),
        Scenario(
            "live-input",
            [Reply(text="Answer one."), Reply(text="Answer two.")],
            prompt="",
            extra_args=["--input-format", "stream-json"],
            stdin=live_input_stdin("First message", "Second message"),
        ),
    ]


def codex_scenarios() -> list[Scenario]:
    o = openai
    return [
        Scenario("plain", [Reply(text="Hello from the fake model.", thinking="The user wants a greeting.")]),
        Scenario(
            "tool",
            [Reply(tool=ToolCall("echo muster-tool-ok")), Reply(text="The command printed it.")],
            prompt="Run echo",
        ),
        Scenario(
            "file-change",
            [
                Reply(tool=ToolCall(patch="*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n")),
                Reply(text="Wrote hello.txt."),
            ],
            prompt="Create hello.txt",
        ),
        Scenario(
            "tool-default-sandbox",
            [Reply(tool=ToolCall("echo muster-tool-ok")), Reply(text="The command printed it.")],
            prompt="Run echo",
            sandbox=None,
        ),
        Scenario("transient", [o.server_error(2), Reply(text="Recovered after retries.")]),
        Scenario("transient-429", [o.rate_limited(2), Reply(text="Recovered after retries.")], retries=3),
        Scenario("ratelimit", [o.rate_limited(None)]),
        Scenario("overloaded", [o.overloaded(None)]),
        Scenario("server-error", [o.server_error(None)]),
        Scenario("auth", [o.auth_failed()]),
        Scenario("usage-limit", [o.usage_limited(RESET_EPOCH)]),
        Scenario("insufficient-quota", [o.insufficient_quota()]),
        Scenario("unknown-model", [Reply(text="Hi.")], extra_args=["--model", "muster-unknown-model"]),
        Scenario("network-down", [], network_down=True, timeout=25),
        Scenario(
            "resume",
            [Reply(text="First answer.")],
            prompt="Remember the word apple",
            followup=lambda tid: ["resume", tid],
            followup_plans=[Reply(text="The word was apple.")],
        ),
    ]


def capture(cli: str, executable: str, names: set[str]) -> None:
    version = subprocess.run([executable, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    fake: Any = anthropic.FakeAnthropic() if cli == "claude" else openai.FakeOpenAI()
    scenarios = claude_scenarios() if cli == "claude" else codex_scenarios()
    with fake.running():
        for scenario in scenarios:
            if names and scenario.name not in names:
                continue
            with tempfile.TemporaryDirectory(prefix=f"capture-{cli}-") as tmp:
                root = Path(tmp)
                home, work = root / "home", root / "work"
                home.mkdir()
                work.mkdir()
                fake.script.reset(*(with_workdir(plan, work) for plan in scenario.plans))
                url = f"http://127.0.0.1:{free_port()}" if scenario.network_down else fake.url
                env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
                if cli == "claude":
                    env |= CLAUDE_ENV | {"ANTHROPIC_BASE_URL": url}
                    base = [executable, "-p", scenario.prompt, "--output-format", "stream-json", "--verbose"]
                    if scenario.stdin is not None:
                        base = [executable, "-p", "--output-format", "stream-json", "--verbose"]
                else:
                    codex_home = home / ".codex"
                    codex_home.mkdir()
                    (codex_home / "config.toml").write_text(
                        codex_config(url, retries=scenario.retries, sandbox=scenario.sandbox)
                    )
                    env |= {"CODEX_HOME": str(codex_home), CODEX_KEY_VAR: "sk-test-key"}
                    base = [executable, "exec", "--json", "--skip-git-repo-check", scenario.prompt]
                env |= scenario.env
                env = {k: v for k, v in env.items() if v != ""}
                started = time.monotonic()
                run = run_cli(base + scenario.extra_args, env, work, stdin=scenario.stdin, timeout=scenario.timeout)
                run.extra["seconds"] = round(time.monotonic() - started, 1)
                run.extra["session_files"] = sorted(str(p.relative_to(home)) for p in home.rglob("*.jsonl"))
                save(f"{cli}-{scenario.name}", run, version, fake.script)
                if scenario.followup is not None:
                    session = claude_session(run.stdout) if cli == "claude" else codex_thread(run.stdout)
                    fake.script.reset(*scenario.followup_plans)
                    if cli == "claude":
                        argv = [executable, "-p", "Which word?", "--output-format", "stream-json", "--verbose"]
                        argv += scenario.followup(session)
                    else:
                        argv = [executable, "exec", "--json", "--skip-git-repo-check", *scenario.followup(session)]
                        argv.append("Which word?")
                    started = time.monotonic()
                    run2 = run_cli(argv, env, work, stdin=None, timeout=scenario.timeout)
                    run2.extra["seconds"] = round(time.monotonic() - started, 1)
                    run2.extra["first_session"] = session
                    run2.extra["session_files"] = sorted(str(p.relative_to(home)) for p in home.rglob("*.jsonl"))
                    save(f"{cli}-{scenario.name}-2", run2, version, fake.script)


def main(argv: list[str]) -> None:
    claude, codex, *names = argv
    if claude != "-":
        capture("claude", claude, set(names))
    if codex != "-":
        capture("codex", codex, set(names))


if __name__ == "__main__":
    main(sys.argv[1:])
