"""Where a real CLI's environment comes from: provider variables, the workspace's .outpost/.env, agent variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster_dispatch import AgentInput, DispatchError, claude_harness, cli_agent, dispatch, local_provider
from tests.dispatch.cli.support import run_turn, user_texts
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.plans import Reply

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


async def test_the_workspace_env_file_and_provider_variables_reach_the_cli(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(Reply(text="Configured from .env."))
    (workspace / ".outpost").mkdir()
    (workspace / ".outpost" / ".env").write_text(
        "# where the model lives\n"
        f"ANTHROPIC_BASE_URL={fake_anthropic.url}\n"
        "export ANTHROPIC_API_KEY='sk-ant-from-env'\n"
    )
    agent = cli_agent(claude_harness(executable=installed_clis.claude), variables={"CLAUDE_CODE_MAX_RETRIES": "2"})
    provider = local_provider(tmp_path / "sandboxes", variables={"MUSTER_PROVIDER_TAG": "local"})

    turn = await run_turn(agent, "Say hello", workspace, provider)

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Configured from .env."
    (request,) = fake_anthropic.script.model_requests()
    assert "Say hello" in user_texts(request)
    # The key itself is never recorded by the fake nor echoed in the result.
    assert "sk-ant-from-env" not in repr(turn.result)


async def test_a_variable_defined_by_provider_and_agent_is_a_configuration_error(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    agent = cli_agent(
        claude_harness(executable=installed_clis.claude),
        variables={"ANTHROPIC_BASE_URL": fake_anthropic.url, "ANTHROPIC_API_KEY": "sk-ant-agent-secret"},
    )
    provider = local_provider(tmp_path / "sandboxes", variables={"ANTHROPIC_API_KEY": "sk-ant-provider-secret"})

    running = dispatch(agent, AgentInput("Say hello"), workspace=workspace, provider=provider, deadline=30)
    try:
        events = [event async for event in running]
        result = await running.result()
    except DispatchError as raised:  # refusing before the start is as good as a failed result
        error = raised
    else:
        assert result.status == "failed"
        assert result.error is not None
        error = result.error
        assert "sk-ant" not in repr(events)
    assert error.code == "configuration"
    assert "ANTHROPIC_API_KEY" in error.message
    assert "secret" not in error.message and "secret" not in repr(error.details)
    assert fake_anthropic.script.requests == [], "the CLI ran despite the conflict"
