"""The local provider: private home, environment layering, conflicts, process-group kill — with real subprocesses."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from muster_dispatch import AgentInput, DispatchError, cli_agent, codex_harness, dispatch, local_provider
from muster_dispatch.harness import Harness
from muster_dispatch.harnesses.claude import claude_harness
from muster_dispatch.provider import read_dotenv
from tests.dispatch.unit.support import make_cli

pytestmark = pytest.mark.anyio

# Prints its environment and cwd as a Claude result line, so the turn completes.
ENV_CLI = """
print(json.dumps({"type": "system", "subtype": "init", "session_id": "s-env"}))
payload = json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv[1:]})
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": payload, "usage": {}}))
"""


def _env_harness(tmp_path: Path) -> Harness:
    return claude_harness(executable=make_cli(tmp_path, ENV_CLI))


async def _seen(harness: Harness, workspace: Path, root: Path, **kwargs: object) -> dict[str, object]:
    agent = cli_agent(harness, variables=kwargs.pop("variables", None))  # type: ignore[arg-type]
    provider = local_provider(root, variables=kwargs.pop("provider_variables", None))  # type: ignore[arg-type]
    result = await dispatch(agent, AgentInput("env?"), workspace=workspace, provider=provider).result()
    assert result.status == "completed", result.error
    assert result.text is not None
    seen = json.loads(result.text)
    assert isinstance(seen, dict)
    return seen


async def test_private_home_and_layered_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_SECRET_OF_THE_HOST", "leak")
    workspace = tmp_path / "ws"
    (workspace / ".outpost").mkdir(parents=True)
    (workspace / ".outpost" / ".env").write_text(
        "# comment\nexport FROM_DOTENV='dot'\nSHARED=from-dotenv\nOVERRIDDEN=dotenv\n", encoding="utf-8"
    )
    seen = await _seen(
        _env_harness(tmp_path),
        workspace,
        tmp_path / "homes",
        variables={"AGENT_ONLY": "a", "OVERRIDDEN": "agent"},
        provider_variables={"PROVIDER_ONLY": "p", "SHARED": "provider"},
    )
    env = seen["env"]
    assert isinstance(env, dict)
    home = Path(env["HOME"])
    assert home.is_relative_to(tmp_path / "homes") and home != Path.home()
    assert env["TMPDIR"].startswith(str(home))
    assert "MUSTER_SECRET_OF_THE_HOST" not in env  # a minimal base, not the host environment
    assert env["PROVIDER_ONLY"] == "p" and env["AGENT_ONLY"] == "a" and env["FROM_DOTENV"] == "dot"
    assert env["SHARED"] == "from-dotenv"  # .outpost/.env is above the provider
    assert env["OVERRIDDEN"] == "agent"  # the agent is above .outpost/.env
    assert env["DISABLE_TELEMETRY"] == "1"  # harness default
    assert Path(str(seen["cwd"])) == workspace.resolve()
    assert json.loads((home / ".claude.json").read_text())["hasCompletedOnboarding"] is True


@pytest.mark.parametrize("folder", [".muster", ".outpost"])
async def test_the_workspace_variables_file(tmp_path: Path, folder: str) -> None:
    workspace = tmp_path / "ws"
    (workspace / folder).mkdir(parents=True)
    (workspace / folder / ".env").write_text(f"FROM_DOTENV={folder}\n", encoding="utf-8")
    seen = await _seen(_env_harness(tmp_path), workspace, tmp_path / "homes")
    env = seen["env"]
    assert isinstance(env, dict) and env["FROM_DOTENV"] == folder


async def test_muster_env_wins_over_outpost_env(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    for folder in (".muster", ".outpost"):
        (workspace / folder).mkdir(parents=True)
        (workspace / folder / ".env").write_text(f"FROM_DOTENV={folder}\n", encoding="utf-8")
    seen = await _seen(_env_harness(tmp_path), workspace, tmp_path / "homes")
    env = seen["env"]
    assert isinstance(env, dict) and env["FROM_DOTENV"] == ".muster"


async def test_same_workspace_same_home_other_workspace_other_home(tmp_path: Path) -> None:
    harness = _env_harness(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = await _seen(harness, tmp_path / "a", tmp_path / "homes")
    again = await _seen(harness, tmp_path / "a", tmp_path / "homes")
    other = await _seen(harness, tmp_path / "b", tmp_path / "homes")
    assert first["env"]["HOME"] == again["env"]["HOME"] != other["env"]["HOME"]  # type: ignore[index]


async def test_variable_defined_by_provider_and_agent_is_a_configuration_error(tmp_path: Path) -> None:
    agent = cli_agent(_env_harness(tmp_path), variables={"API_KEY": "sk-agent-value", "OTHER": "x"})
    provider = local_provider(tmp_path / "homes", variables={"API_KEY": "sk-provider-value"})
    result = await dispatch(agent, AgentInput("x"), workspace=tmp_path, provider=provider).result()
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "configuration"
    assert result.error.details["variables"] == ["API_KEY"]
    assert "sk-" not in result.error.message and "sk-" not in repr(result.error.details)  # names, never values


async def test_codex_configuration_writes_config_toml_and_codex_home(tmp_path: Path) -> None:
    harness = codex_harness(executable=make_cli(tmp_path, ENV_CLI.replace("system", "x")))
    variables = {
        "MUSTER_CODEX_BASE_URL": "http://127.0.0.1:9/v1",
        "MUSTER_CODEX_ENV_KEY": "FAKE_KEY",
        "FAKE_KEY": "sk-test",
        "MUSTER_CODEX_SANDBOX": "danger-full-access",
    }
    agent = cli_agent(harness, model="gpt-5.5", variables=variables)
    provider = local_provider(tmp_path / "homes")
    result = await dispatch(agent, AgentInput("hi"), workspace=tmp_path, provider=provider).result()
    # The fake prints Claude lines, so codex decoding sees raw lines and no turn.completed: a failed turn, but the
    # command and the configuration are what we check here.
    assert result.status == "failed"
    homes = list((tmp_path / "homes").glob("*/home"))
    assert len(homes) == 1
    config = (homes[0] / ".codex" / "config.toml").read_text()
    assert 'model_provider = "muster"' in config
    assert 'base_url = "http://127.0.0.1:9/v1"' in config
    assert 'env_key = "FAKE_KEY"' in config
    assert 'sandbox_mode = "danger-full-access"' in config
    assert "supports_websockets = false" in config
    command = harness.request(AgentInput("hi"), model="gpt-5.5", executable="codex")
    assert command.args == ("exec", "--json", "--skip-git-repo-check", "--model", "gpt-5.5", "hi")


async def test_codex_key_variable_named_but_undefined_is_a_configuration_error(tmp_path: Path) -> None:
    harness = codex_harness(executable=make_cli(tmp_path, "pass"))
    variables = {"MUSTER_CODEX_BASE_URL": "http://127.0.0.1:9/v1", "MUSTER_CODEX_ENV_KEY": "MY_KEY"}
    result = await dispatch(cli_agent(harness, variables=variables), AgentInput("x"), workspace=tmp_path).result()
    assert result.error is not None and result.error.code == "configuration"
    assert "MY_KEY" in result.error.message


async def test_codex_base_url_without_a_key_and_without_a_login_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSTER_HOST_HOME", str(tmp_path / "nobody"))
    harness = codex_harness(executable=make_cli(tmp_path, "pass"))
    agent = cli_agent(harness, variables={"MUSTER_CODEX_BASE_URL": "http://127.0.0.1:9/v1"})
    result = await dispatch(agent, AgentInput("x"), workspace=tmp_path).result()
    assert result.error is not None and result.error.code == "configuration"
    assert "codex login" in result.error.message and "~/.codex/auth.json" in result.error.message


# Starts a grandchild in the same process group that would outlive it, records both pids, then hangs.
HANGING_CLI = """
import subprocess
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["PID_FILE"], "w") as f:
    json.dump([os.getpid(), child.pid], f)
print(json.dumps({"type": "system", "subtype": "init", "session_id": "s-hang"}), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose; /proc tells.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped between the open and the read
        return False


def _wait_dead(pids: list[int]) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


async def test_deadline_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids.json"
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, HANGING_CLI)), variables={"PID_FILE": str(pid_file)})
    run = dispatch(agent, AgentInput("x"), workspace=tmp_path, deadline=1.0)
    types = [event.type async for event in run]
    result = await run.result()
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "timeout"
    assert result.conversation == "s-hang"
    assert types[-1] == "stopped"
    pids = json.loads(pid_file.read_text())
    assert _wait_dead(pids), "a process of the group survived the deadline"


async def test_cancel_kills_the_group_and_reports_aborted(tmp_path: Path) -> None:
    import anyio

    pid_file = tmp_path / "pids.json"
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, HANGING_CLI)), variables={"PID_FILE": str(pid_file)})
    run = dispatch(agent, AgentInput("x"), workspace=tmp_path)
    first = await run.__anext__()  # the CLI is running once it printed its init line
    assert first.type == "conversation"
    with anyio.fail_after(20):
        await run.cancel()
        result = await run.result()
    assert result.status == "canceled"
    assert result.error is not None and result.error.code == "aborted"
    assert _wait_dead(json.loads(pid_file.read_text()))


async def test_missing_workspace_is_a_workspace_error(tmp_path: Path) -> None:
    agent = cli_agent(_env_harness(tmp_path))
    result = await dispatch(agent, AgentInput("x"), workspace=tmp_path / "nope").result()
    assert result.error is not None and result.error.code == "workspace"


async def test_missing_executable_is_a_configuration_error(tmp_path: Path) -> None:
    agent = cli_agent(claude_harness(executable=tmp_path / "no-such-cli"))
    result = await dispatch(agent, AgentInput("x"), workspace=tmp_path).result()
    assert result.error is not None and result.error.code == "configuration"


def test_dotenv_parsing(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text('A=1\nexport B="two words"\nC=x # trailing\n\n# c\nD=\n', encoding="utf-8")
    assert read_dotenv(path) == {"A": "1", "B": "two words", "C": "x", "D": ""}
    assert read_dotenv(tmp_path / "missing") == {}
    path.write_text("not a pair\n", encoding="utf-8")
    with pytest.raises(DispatchError) as info:
        read_dotenv(path)
    assert info.value.code == "workspace" and info.value.details == {"line": 1}


# Exits at once after its answer but leaves a child holding stdout open.
PIPE_HOLDER_CLI = """
import subprocess
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["PID_FILE"], "w") as f:
    json.dump([os.getpid(), child.pid], f)
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "done", "usage": {}}))
sys.stdout.flush()
os._exit(0)
"""


async def test_a_child_holding_the_pipes_is_swept_after_the_cli_exits(tmp_path: Path) -> None:
    import anyio

    pid_file = tmp_path / "pids.json"
    agent = cli_agent(
        claude_harness(executable=make_cli(tmp_path, PIPE_HOLDER_CLI)), variables={"PID_FILE": str(pid_file)}
    )
    with anyio.fail_after(20):
        result = await dispatch(agent, AgentInput("x"), workspace=tmp_path).result()
    assert result.status == "completed" and result.text == "done"
    assert _wait_dead(json.loads(pid_file.read_text()))


@pytest.mark.parametrize("stdin", [False, True], ids=["no-stdin", "stdin"])
async def test_without_pidfds_the_exit_is_awaited_by_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stdin: bool
) -> None:
    """Where the system has no pidfd (macOS, old kernels) a thread waits for the CLI: the exit code, the stderr and a
    child left holding the pipes behave the same."""
    import anyio

    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    pid_file = tmp_path / "pids.json"
    agent = cli_agent(
        claude_harness(executable=make_cli(tmp_path, PIPE_HOLDER_CLI)), variables={"PID_FILE": str(pid_file)}
    )
    with anyio.fail_after(20):
        result = await dispatch(agent, AgentInput("x", live_input=stdin), workspace=tmp_path).result()
    assert result.status == "completed" and result.text == "done" and result.exit_code == 0
    assert _wait_dead(json.loads(pid_file.read_text()))
    failing = cli_agent(claude_harness(executable=make_cli(tmp_path, 'print("no way", file=sys.stderr)\nsys.exit(3)')))
    with anyio.fail_after(20):
        result = await dispatch(failing, AgentInput("x"), workspace=tmp_path).result()
    assert result.status == "failed" and result.exit_code == 3 and result.stderr == ["no way"]


async def test_an_unwritable_provider_root_is_a_provider_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the homes should go")
    agent = cli_agent(_env_harness(tmp_path))
    result = await dispatch(agent, AgentInput("x"), workspace=tmp_path, provider=local_provider(blocker)).result()
    assert result.status == "failed" and result.error is not None and result.error.code == "provider"


# Like the CLIs' shell tools: the child runs in its OWN session, out of reach of a process-group kill.
SETSID_CLI = HANGING_CLI.replace(
    'child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])',
    'child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)',
)


async def test_deadline_kills_a_tool_in_its_own_session(tmp_path: Path) -> None:
    assert "start_new_session=True" in SETSID_CLI
    pid_file = tmp_path / "pids.json"
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, SETSID_CLI)), variables={"PID_FILE": str(pid_file)})
    result = await dispatch(agent, AgentInput("x"), workspace=tmp_path, deadline=1.0).result()
    assert result.error is not None and result.error.code == "timeout"
    pids = json.loads(pid_file.read_text())
    assert _wait_dead(pids), "the tool in its own session survived the deadline"


def test_descendants_follow_parent_links_and_the_marker() -> None:
    import subprocess
    import sys

    from muster_dispatch.processes import RUN_VARIABLE, descendants

    env = {**os.environ, RUN_VARIABLE: "m-123"}
    script = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], env=env)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(descendants(parent.pid)) < 1:
            time.sleep(0.05)
        below = descendants(parent.pid)
        assert len(below) == 1 and stranger.pid not in below
        assert stranger.pid in descendants(parent.pid, "m-123")  # not a child, but it carries the run's marker
        assert os.getpid() not in descendants(parent.pid, "m-123")
    finally:
        for proc in (parent, stranger):
            proc.kill()
            proc.wait()
        for pid in descendants(parent.pid, "m-123"):
            os.kill(pid, signal.SIGKILL)


async def test_cancelling_the_dispatch_task_from_outside_leaves_no_process(tmp_path: Path) -> None:
    import asyncio

    pid_file = tmp_path / "pids.json"
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, HANGING_CLI)), variables={"PID_FILE": str(pid_file)})
    run = dispatch(agent, AgentInput("x"), workspace=tmp_path)
    assert (await run.__anext__()).type == "conversation"
    task = run._task  # what an event loop shutdown cancels
    assert task is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _wait_dead(json.loads(pid_file.read_text()))


# Reports whether it leads its own process group and session, and whether it can open a controlling terminal.
PLACE_CLI = """
def _terminal():
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK))
    except OSError:
        return False
    return True
payload = json.dumps({"group": os.getpgid(0) == os.getpid(), "session": os.getsid(0) == os.getpid(),
                      "terminal": _terminal()})
print(json.dumps({"type": "system", "subtype": "init", "session_id": "s-place"}))
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": payload, "usage": {}}))
"""

# Dispatches argv[1] in argv[2] and writes the turn's text to argv[3]; with argv[4] == "terminal" it first takes the
# terminal on its stdin as its controlling terminal (it leads its own session: opening a terminal is enough).
DISPATCHER = """
import asyncio, os, sys
from muster_dispatch import AgentInput, claude_harness, cli_agent, dispatch
from muster_dispatch.provider import has_terminal
if sys.argv[4] == "terminal":
    os.close(os.open(os.ttyname(0), os.O_RDWR))
assert has_terminal() == (sys.argv[4] == "terminal")
agent = cli_agent(claude_harness(executable=sys.argv[1]))
result = asyncio.run(dispatch(agent, AgentInput("x"), workspace=sys.argv[2]).result())
assert result.status == "completed", result.error
with open(sys.argv[3], "w") as f:
    f.write(result.text)
"""


@pytest.mark.parametrize("terminal", [False, True], ids=["no-terminal", "terminal"])
def test_the_cli_leads_its_group_and_never_reaches_our_terminal(tmp_path: Path, terminal: bool) -> None:
    import pty
    import subprocess
    import sys

    cli = make_cli(tmp_path, PLACE_CLI)
    out = tmp_path / "place.json"
    master, slave = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", DISPATCHER, str(cli), str(tmp_path), str(out), "terminal" if terminal else "none"],
            stdin=slave if terminal else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            start_new_session=True,  # no controlling terminal but the one it takes
            timeout=60,
            check=False,
        )
    finally:
        os.close(master)
        os.close(slave)
    assert done.returncode == 0, done.stderr
    place = json.loads(out.read_text())
    assert place["group"], "the CLI must lead its own process group: a deadline or a cancel kills that group"
    assert not place["terminal"], "the CLI could open the dispatcher's controlling terminal"
    # With a terminal the CLI gets a session of its own (away from the terminal); without one a group is enough.
    assert place["session"] == terminal
