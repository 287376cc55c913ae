"""The Copilot harness's pure parts: its command line, configuration, credentials and the unpacked package's place."""

from __future__ import annotations

from pathlib import Path

from muster_dispatch import AgentInput, Continuation, copilot_harness
from muster_dispatch.bootstrap import unpack_environment


def test_a_new_session_is_named_by_the_harness_and_announced() -> None:
    # A prompt that starts with "-" stays the prompt (the real CLI takes it for options after a bare -p).
    command = copilot_harness().request(AgentInput("-x is not an option here"), model="m-1", executable="/x/copilot")
    args = list(command.args)
    assert args[0] == "--prompt=-x is not an option here"
    assert args[1:3] == ["--output-format", "json"] and "--allow-all-tools" in args
    assert args[args.index("--model") + 1] == "m-1"
    (session,) = [a.removeprefix("--session-id=") for a in args if a.startswith("--session-id=")]
    assert command.conversation == session and len(session) == 36
    again = copilot_harness().request(AgentInput("x"))
    assert again.conversation != session  # a fresh id per new session


def test_a_continued_session_is_resumed_not_renamed() -> None:
    command = copilot_harness().request(AgentInput("next", Continuation("0b7c1d1e-8a4e-4c52-9f0a-2f7d3a1e5b6c")))
    assert "--resume=0b7c1d1e-8a4e-4c52-9f0a-2f7d3a1e5b6c" in command.args
    assert command.conversation is None and not any(a.startswith("--session-id") for a in command.args)


def test_offline_only_with_a_provider_and_the_home_always_private() -> None:
    harness = copilot_harness()
    with_provider = harness.configuration({"COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:1/v1"}).env
    assert with_provider == {"COPILOT_HOME": "~/.copilot", "COPILOT_OFFLINE": "true"}
    assert harness.configuration({}).env == {"COPILOT_HOME": "~/.copilot"}  # a GitHub login needs the network


def test_credentials_are_the_key_variables_only() -> None:
    plan = copilot_harness().credentials(
        {"COPILOT_PROVIDER_API_KEY": "k", "GH_TOKEN": "g", "COPILOT_MODEL": "m", "HOME": "/h"}
    )
    assert dict(plan.variables) == {"COPILOT_PROVIDER_API_KEY": "k", "GH_TOKEN": "g"}
    assert plan.host_login is None and not plan.host_files  # the keychain is never read
    assert not copilot_harness().credentials({"COPILOT_MODEL": "m"}).variables


def test_the_package_unpacks_beside_the_pinned_install_not_for_an_override(tmp_path: Path) -> None:
    binary = tmp_path / "copilot-1.0.102" / "node_modules" / ".bin" / "copilot"
    assert unpack_environment(copilot_harness(), binary) == {
        "COPILOT_PKG_CACHE_HOME": str(tmp_path / "copilot-1.0.102" / "unpacked")
    }
    assert unpack_environment(copilot_harness(executable="/usr/bin/copilot"), "/usr/bin/copilot") == {}


def test_fork_is_not_offered() -> None:
    harness = copilot_harness()
    assert harness.resumable and not harness.forkable and not harness.live_input
