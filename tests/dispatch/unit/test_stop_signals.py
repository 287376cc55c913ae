"""A cancel and a deadline send the CLI SIGTERM first (a CLI gets to stop itself: flush its session, end its tools),
not only the group kill that follows; and a deadline the runner does not enforce fails here, in this suite's own
bound, not at the test runner's timeout."""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest

from muster_dispatch import AgentInput, claude_harness, cli_agent, dispatch
from muster_dispatch.agents import CliAgent
from tests.dispatch.unit.support import make_cli

pytestmark = pytest.mark.anyio

# A Claude-like CLI that starts its session, then waits; the signal that stops it is written to $SIGNAL_FILE. The
# stop signals are unblocked once the handler is set: one that came while they were blocked is handled then.
WAITING_CLI = r"""
import signal
def stopped(signum, frame):
    with open(os.environ["SIGNAL_FILE"], "w") as f:
        f.write(signal.Signals(signum).name)
    sys.exit(143)
signal.signal(signal.SIGTERM, stopped)
signal.signal(signal.SIGINT, stopped)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
print(json.dumps({"type": "system", "subtype": "init", "session_id": "s-wait", "model": "fake-1"}), flush=True)
while True:
    time.sleep(3600)
"""
# Far beyond the deadlines below, far below the test runner's timeout: an unenforced deadline fails here.
BOUND_SECONDS = 60


def _waiting(tmp_path: Path) -> tuple[CliAgent, Path]:
    signal_file = tmp_path / "signal"
    agent = cli_agent(
        claude_harness(executable=make_cli(tmp_path, WAITING_CLI, name="waiting-cli")),
        variables={"SIGNAL_FILE": str(signal_file)},
    )
    return agent, signal_file


async def test_a_cancel_sends_the_cli_sigterm(tmp_path: Path) -> None:
    agent, signal_file = _waiting(tmp_path)
    running = dispatch(agent, AgentInput("wait"), workspace=tmp_path)
    with anyio.fail_after(BOUND_SECONDS):
        async for event in running:
            if event.type == "conversation":
                await running.cancel()
        result = await running.result()
    assert result.status == "canceled" and result.error is not None and result.error.code == "aborted"
    assert signal_file.exists() and signal_file.read_text() == "SIGTERM", "the CLI was killed, never asked to stop"


async def test_a_deadline_is_enforced_and_sends_the_cli_sigterm(tmp_path: Path) -> None:
    agent, signal_file = _waiting(tmp_path)
    # The deadline may come before the CLI's Python has set its handler (its start takes longer than that on a
    # loaded machine), and the SIGTERM would then end it by default, unseen. It starts with SIGTERM blocked (a
    # child inherits its parent thread's signal mask), so the SIGTERM the runner sends is held until it can be
    # handled, whenever it came.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        running = dispatch(agent, AgentInput("wait"), workspace=tmp_path, deadline=0.5)
        with anyio.fail_after(BOUND_SECONDS):
            result = await running.result()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    assert result.status == "failed" and result.error is not None and result.error.code == "timeout", result.error
    assert signal_file.exists() and signal_file.read_text() == "SIGTERM", "the CLI was killed, never asked to stop"
