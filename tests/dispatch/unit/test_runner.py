"""dispatch with fake CLIs as real subprocesses: events, results, resume, fork, steering, live input, journal."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from muster_dispatch import (
    AgentInput,
    Continuation,
    DirectoryConversationStore,
    DispatchError,
    Journal,
    Usage,
    claude_harness,
    cli_agent,
    codex_harness,
    dispatch,
    local_provider,
)
from tests.dispatch.unit.support import REPLAY_CLI, SESSION_CLI, TRANSCRIPTS, make_cli

pytestmark = pytest.mark.anyio


def _replaying(tmp_path: Path, name: str, harness: str = "claude", **env: str):  # type: ignore[no-untyped-def]
    factory = claude_harness if harness == "claude" else codex_harness
    executable = make_cli(tmp_path, REPLAY_CLI, name=f"cli-{name}")
    return cli_agent(
        factory(executable=executable), variables={"FAKE_TRANSCRIPT": str(TRANSCRIPTS / f"{name}.jsonl"), **env}
    )


async def test_events_stream_then_result(tmp_path: Path) -> None:
    run = dispatch(_replaying(tmp_path, "claude-tool"), AgentInput("run it"), workspace=tmp_path)
    types = [event.type async for event in run]
    result = await run.result()
    assert types[0] == "conversation" and types[-1] == "finished"
    assert "tool" in types and "tool_result" in types
    assert result.status == "completed" and result.text == "The command printed it."
    assert result.usage.input == 240 and result.usage.output == 60 and result.usage.complete
    assert result.events == len(types)
    assert result.selected == "claude" and [a.agent for a in result.attempts] == ["claude"]


def test_claude_command_line() -> None:
    plain = claude_harness().request(AgentInput("hi"), executable="claude")
    assert plain.args == ("-p", "hi", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits")
    assert plain.stdin is None
    fork = claude_harness(permission_mode="default").request(
        AgentInput("x", Continuation("s1", fork=True)), model="opus", executable="claude"
    )
    assert fork.args[-5:] == ("--model", "opus", "--resume", "s1", "--fork-session")
    assert "--permission-mode" not in fork.args
    live = claude_harness().request(AgentInput("hi", live_input=True), executable="claude")
    assert "--input-format" in live.args and "hi" not in live.args and live.keep_stdin
    assert live.stdin is not None and json.loads(live.stdin)["message"]["content"][0]["text"] == "hi"
    with pytest.raises(DispatchError) as info:
        claude_harness(permission_mode="bypassPermissions")  # refused as root by the CLI itself
    assert info.value.code == "configuration"


async def test_result_without_iterating(tmp_path: Path) -> None:
    result = await dispatch(_replaying(tmp_path, "codex-plain", "codex"), AgentInput("hi"), workspace=tmp_path).result()
    assert result.status == "completed" and result.text == "Hello from the fake model."


async def test_exit_zero_without_final_event_is_a_process_failure(tmp_path: Path) -> None:
    lines = tmp_path / "partial.jsonl"
    lines.write_text('{"type":"thread.started","thread_id":"t"}\n', encoding="utf-8")
    agent = cli_agent(
        codex_harness(executable=make_cli(tmp_path, REPLAY_CLI)), variables={"FAKE_TRANSCRIPT": str(lines)}
    )
    result = await dispatch(agent, AgentInput("x"), workspace=tmp_path).result()
    assert result.status == "failed" and result.error is not None and result.error.code == "process"
    assert result.exit_code == 0


async def test_nonzero_exit_after_a_final_event_fails_and_stderr_is_kept(tmp_path: Path) -> None:
    agent = _replaying(tmp_path, "claude-plain", FAKE_EXIT="3", FAKE_STDERR="boom on stderr")
    run = dispatch(agent, AgentInput("x"), workspace=tmp_path)
    stderr = [event.text async for event in run if event.type == "stderr"]
    result = await run.result()
    assert stderr == ["boom on stderr"]
    assert result.status == "failed" and result.error is not None and result.error.code == "process"
    assert result.error.details["exit_code"] == 3 and result.stderr == ["boom on stderr"]


async def test_quota_on_stderr_of_a_failed_process(tmp_path: Path) -> None:
    agent = _replaying(tmp_path, "codex-plain", "codex", FAKE_EXIT="1", FAKE_STDERR="Quota exceeded. Check your plan")
    result = await dispatch(agent, AgentInput("x"), workspace=tmp_path).result()
    assert result.error is not None and result.error.code == "quota"


async def test_resume_and_fork_through_the_same_home(tmp_path: Path) -> None:
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, SESSION_CLI)))
    provider = local_provider(tmp_path / "homes")
    first = await dispatch(agent, AgentInput("one"), workspace=tmp_path, provider=provider).result()
    assert first.text == "one" and first.conversation
    second = await dispatch(
        agent, AgentInput("two", Continuation(first.conversation)), workspace=tmp_path, provider=provider
    ).result()
    assert second.text == "one | two" and second.conversation == first.conversation
    fork = await dispatch(
        agent, AgentInput("three", Continuation(first.conversation, fork=True)), workspace=tmp_path, provider=provider
    ).result()
    assert fork.text == "one | two | three" and fork.conversation not in (None, first.conversation)


async def test_cold_resume_restores_the_session_into_a_new_home(tmp_path: Path) -> None:
    store = DirectoryConversationStore(tmp_path / "store")
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, SESSION_CLI)), storage=store)
    assert agent.capture is True
    first = await dispatch(
        agent, AgentInput("one"), workspace=tmp_path, provider=local_provider(tmp_path / "h1")
    ).result()
    assert first.conversation
    captured = await store.restore("claude", first.conversation)
    assert captured and any(path.endswith(f"{first.conversation}.jsonl") for path in captured)
    # A different provider root: a NEW, empty private home.
    second = await dispatch(
        agent,
        AgentInput("two", Continuation(first.conversation)),
        workspace=tmp_path,
        provider=local_provider(tmp_path / "h2"),
    ).result()
    assert second.status == "completed" and second.text == "one | two"


async def test_cold_resume_without_storage_fails(tmp_path: Path) -> None:
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, SESSION_CLI)))
    first = await dispatch(
        agent, AgentInput("one"), workspace=tmp_path, provider=local_provider(tmp_path / "h1")
    ).result()
    assert first.conversation
    second = await dispatch(
        agent,
        AgentInput("two", Continuation(first.conversation)),
        workspace=tmp_path,
        provider=local_provider(tmp_path / "h2"),
    ).result()
    assert second.status == "failed" and second.error is not None and "No conversation found" in second.error.message


async def test_fork_is_refused_before_running_when_not_forkable(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    harness = replace(codex_harness(executable=make_cli(tmp_path, f"open({str(marker)!r}, 'w')")), forkable=False)
    result = await dispatch(
        cli_agent(harness), AgentInput("x", Continuation("t1", fork=True)), workspace=tmp_path
    ).result()
    assert result.error is not None and result.error.code == "session"
    assert not marker.exists()


async def test_codex_fork_copies_the_rollout_under_a_new_thread_id(tmp_path: Path) -> None:
    agent = cli_agent(codex_harness(executable=make_cli(tmp_path, CODEX_SESSION_CLI)))
    provider = local_provider(tmp_path / "homes")
    first = await dispatch(agent, AgentInput("a"), workspace=tmp_path, provider=provider).result()
    assert first.conversation == "0199-thread"
    fork = await dispatch(
        agent, AgentInput("b", Continuation("0199-thread", fork=True)), workspace=tmp_path, provider=provider
    ).result()
    assert fork.status == "completed", fork.error
    assert fork.conversation not in (None, "0199-thread")
    assert fork.text == "turn 2"  # the child holds the parent's history
    assert fork.usage == Usage(input=120, output=30)  # its own turn, not the copied total
    parent = await dispatch(
        agent, AgentInput("c", Continuation("0199-thread")), workspace=tmp_path, provider=provider
    ).result()
    assert parent.text == "turn 2"  # the parent did not see the child's turn


async def test_fork_of_an_unknown_conversation_is_a_session_error(tmp_path: Path) -> None:
    agent = cli_agent(codex_harness(executable=make_cli(tmp_path, CODEX_SESSION_CLI)))
    result = await dispatch(agent, AgentInput("b", Continuation("nope", fork=True)), workspace=tmp_path).result()
    assert result.error is not None and result.error.code == "session"


async def test_steering_without_live_input_stops_and_resumes(tmp_path: Path) -> None:
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, SESSION_CLI)))
    run = dispatch(agent, AgentInput("hang"), workspace=tmp_path, provider=local_provider(tmp_path / "homes"))
    with anyio.fail_after(30):
        first = await run.__anext__()
        assert first.type == "conversation"
        await run.steer("go on")
        types = [first.type] + [event.type async for event in run]
        result = await run.result()
    assert "stopped" in types
    assert result.status == "completed" and result.text == "hang | go on"
    assert result.conversation == first.id


async def test_live_input_steering_appends_to_the_running_turn(tmp_path: Path) -> None:
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, SESSION_CLI)))
    run = dispatch(agent, AgentInput("first", live_input=True), workspace=tmp_path)
    with anyio.fail_after(30):
        first = await run.__anext__()
        assert first.type == "conversation"
        await run.steer("second")
        texts = [event.text async for event in run if event.type == "result"]
        result = await run.result()
    assert texts == ["first", "first | second"]
    assert result.status == "completed" and result.text == "first | second"
    assert result.usage.input == 20 and result.usage.models["fake-1"].input == 20  # summed over both results


async def test_live_input_is_refused_without_a_protocol(tmp_path: Path) -> None:
    harness = replace(codex_harness(executable=make_cli(tmp_path, "pass")), live_input=False)
    result = await dispatch(cli_agent(harness), AgentInput("x", live_input=True), workspace=tmp_path).result()
    assert result.error is not None and result.error.code == "configuration"


# A Codex app-server speaking the JSON-RPC of the real one (as observed with codex 0.169.0): the turn answers once
# its "model" got every user text; a steering text that arrives meanwhile joins the same turn.
APP_SERVER_CLI = r"""
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

texts, thread, turn = [], "thread-live", "turn-1"
for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if method == "initialize":
        send({"id": ident, "result": {"userAgent": "fake"}})
    elif method in ("thread/start", "thread/resume"):
        thread = message["params"].get("threadId", thread)
        send({"id": ident, "result": {"thread": {"id": thread}, "model": message["params"].get("model")}})
        if method == "thread/start":
            send({"method": "thread/started", "params": {"thread": {"id": thread}}})
    elif method == "turn/start":
        texts += [i["text"] for i in message["params"]["input"]]
        send({"id": ident, "result": {"turn": {"id": turn, "status": "inProgress"}}})
        send({"method": "turn/started", "params": {"threadId": thread, "turn": {"id": turn}}})
        if "wait" not in texts:
            answer = " + ".join(texts)
            send({"method": "item/completed", "params": {"item": {"type": "agentMessage", "id": "m", "text": answer}}})
            total = {"inputTokens": 10, "cachedInputTokens": 0, "outputTokens": 2}
            send({"method": "thread/tokenUsage/updated", "params": {"tokenUsage": {"total": total}}})
            send({"method": "turn/completed", "params": {"turn": {"id": turn, "status": "completed"}}})
    elif method == "turn/steer":
        assert message["params"]["expectedTurnId"] == turn
        texts += [i["text"] for i in message["params"]["input"]]
        send({"id": ident, "result": {"turnId": turn}})
        answer = " + ".join(texts)
        send({"method": "item/completed", "params": {"item": {"type": "agentMessage", "id": "m2", "text": answer}}})
        total = {"inputTokens": 20, "cachedInputTokens": 5, "outputTokens": 4}
        send({"method": "thread/tokenUsage/updated", "params": {"tokenUsage": {"total": total}}})
        send({"method": "turn/completed", "params": {"turn": {"id": turn, "status": "completed"}}})
"""


async def test_codex_live_input_through_app_server(tmp_path: Path) -> None:
    agent = cli_agent(codex_harness(executable=make_cli(tmp_path, APP_SERVER_CLI)), model="gpt-5.5")
    with anyio.fail_after(30):
        plain = await dispatch(agent, AgentInput("hello", live_input=True), workspace=tmp_path).result()
    assert plain.status == "completed" and plain.text == "hello" and plain.conversation == "thread-live"
    assert plain.usage == Usage(input=10, output=2)

    run = dispatch(agent, AgentInput("wait", live_input=True), workspace=tmp_path)
    with anyio.fail_after(30):
        steered = False
        async for event in run:
            if event.type == "conversation" and not steered:
                steered = True
                await run.steer("go on")
        result = await run.result()
    assert result.status == "completed" and result.text == "wait + go on"
    assert result.usage == Usage(input=15, cached=5, output=4)  # the last running total, not a sum


# The turn ends just before codex reads the steering: it refuses turn/steer the way codex 0.169 does.
APP_SERVER_RACING_CLI = r"""
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

thread, turns = "thread-race", 0
for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if method == "initialize":
        send({"id": ident, "result": {"userAgent": "fake"}})
    elif method == "thread/start":
        send({"id": ident, "result": {"thread": {"id": thread}}})
    elif method == "turn/start":
        turns += 1
        turn = f"turn-{turns}"
        text = " + ".join(i["text"] for i in message["params"]["input"])
        send({"id": ident, "result": {"turn": {"id": turn, "status": "inProgress"}}})
        send({"method": "turn/started", "params": {"threadId": thread, "turn": {"id": turn}}})
        if turns > 1:
            send({"method": "item/completed", "params": {"item": {"type": "agentMessage", "id": turn, "text": text}}})
            send({"method": "turn/completed", "params": {"turn": {"id": turn, "status": "completed"}}})
    elif method == "turn/steer":
        send({"method": "item/completed", "params": {"item": {"type": "agentMessage", "id": "m1", "text": "first"}}})
        send({"method": "turn/completed", "params": {"turn": {"id": "turn-1", "status": "completed"}}})
        send({"id": ident, "error": {"code": -32600, "message": "no active turn to steer"}})
"""


async def test_codex_steering_that_races_the_end_of_the_turn_becomes_the_next_turn(tmp_path: Path) -> None:
    agent = cli_agent(codex_harness(executable=make_cli(tmp_path, APP_SERVER_RACING_CLI)), model="gpt-5.5")
    run = dispatch(agent, AgentInput("hello", live_input=True), workspace=tmp_path)
    with anyio.fail_after(30):
        events = []
        async for event in run:
            events.append(event)
            if event.type == "conversation" and len([e for e in events if e.type == "conversation"]) == 1:
                await run.steer("say goodbye")
        result = await run.result()
    assert result.status == "completed", result.error
    assert result.text == "say goodbye"
    warnings = [e for e in events if e.type == "warning"]
    assert [w.code for w in warnings] == ["steering"]
    assert not [e for e in events if e.type == "failure"]
    assert [e.type for e in events].count("finished") == 2


async def test_journal_records_every_event_between_input_and_result(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    run = dispatch(_replaying(tmp_path, "claude-plain"), AgentInput("hi"), workspace=tmp_path, journal=journal)
    events = [event.to_dict() async for event in run]
    await run.result()
    lines = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert {line["source"] for line in lines} == {"harness"}
    assert len({line["scope"]["dispatch"] for line in lines}) == 1
    assert lines[0]["event"]["type"] == "turn.input" and lines[0]["event"]["prompt"] == "hi"
    assert lines[-1]["event"]["type"] == "turn.result" and lines[-1]["event"]["result"]["status"] == "completed"
    assert [line["event"] for line in lines[1:-1]] == events
    assert all(set(line) == {"seq", "at", "source", "scope", "event"} for line in lines)


CODEX_SESSION_CLI = r"""
# Codex-like: a rollout file with token_count running totals; turn.completed carries the thread total.
args = sys.argv[1:]
thread = args[args.index("resume") + 1] if "resume" in args else "0199-thread"
folder = os.path.join(os.environ["CODEX_HOME"], "sessions", "2026", "11", "30")
os.makedirs(folder, exist_ok=True)
path = os.path.join(folder, "rollout-2026-11-30T00-00-00-" + thread + ".jsonl")
turns = sum(1 for _ in open(path)) if os.path.exists(path) else 0
total = {"input_tokens": 120 * (turns + 1), "cached_input_tokens": 0, "output_tokens": 30 * (turns + 1)}
with open(path, "a") as f:
    info = {"total_token_usage": total}
    f.write(json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": info}}) + "\n")
print(json.dumps({"type": "thread.started", "thread_id": thread}))
item = {"id": "i", "type": "agent_message", "text": "turn %d" % (turns + 1)}
print(json.dumps({"type": "item.completed", "item": item}))
streamed = {"input_tokens": 1, "output_tokens": 1} if os.environ.get("FAKE_LOSE_USAGE") else total
print(json.dumps({"type": "turn.completed", "usage": streamed}))
"""


async def test_codex_usage_comes_from_the_rollout_when_the_stream_lost_some(tmp_path: Path) -> None:
    agent = cli_agent(
        codex_harness(executable=make_cli(tmp_path, CODEX_SESSION_CLI)), variables={"FAKE_LOSE_USAGE": "1"}
    )
    provider = local_provider(tmp_path / "homes")
    first = await dispatch(agent, AgentInput("a"), workspace=tmp_path, provider=provider).result()
    assert first.usage == Usage(input=120, output=30)  # the rollout's token_count, not the streamed 1/1
    second = await dispatch(
        agent, AgentInput("b", Continuation("0199-thread")), workspace=tmp_path, provider=provider
    ).result()
    assert second.usage == Usage(input=120, output=30)


async def test_codex_resumed_turn_reports_its_own_usage_not_the_thread_total(tmp_path: Path) -> None:
    store = DirectoryConversationStore(tmp_path / "store")
    agent = cli_agent(codex_harness(executable=make_cli(tmp_path, CODEX_SESSION_CLI)), storage=store)
    first = await dispatch(
        agent, AgentInput("a"), workspace=tmp_path, provider=local_provider(tmp_path / "h1")
    ).result()
    assert first.usage == Usage(input=120, output=30)
    assert first.conversation == "0199-thread"
    second = await dispatch(
        agent,
        AgentInput("b", Continuation("0199-thread")),
        workspace=tmp_path,
        provider=local_provider(tmp_path / "h2"),
    ).result()
    assert second.text == "turn 2"  # the rollout was restored into the new home
    assert second.usage == Usage(input=120, output=30)


LATE_ROLLOUT_CLI = r"""
# Codex-like: the user prompt reaches the rollout only once the "model request" is under way; prompt "wait" never
# gets there. FAKE_EARLY_META=1 writes the rollout (metadata only) at start, as codex sometimes does.
args = sys.argv[1:]
prompt = args[-1]
resumed = "resume" in args
thread = args[args.index("resume") + 1] if resumed else "late-thread"
folder = os.path.join(os.environ["CODEX_HOME"], "sessions", "2026", "11", "30")
path = os.path.join(folder, "rollout-2026-11-30T00-00-00-" + thread + ".jsonl")
os.makedirs(folder, exist_ok=True)
if os.environ.get("FAKE_EARLY_META") and not resumed:
    with open(path, "a") as f:
        f.write(json.dumps({"session_meta": thread}) + "\n")
print(json.dumps({"type": "thread.started", "thread_id": thread}), flush=True)
if prompt == "wait":
    time.sleep(600)
with open(path, "a") as f:
    f.write(json.dumps({"prompt": prompt}) + "\n")
text = ("resumed: " if resumed else "") + prompt
print(json.dumps({"type": "item.completed", "item": {"id": "i", "type": "agent_message", "text": text}}))
print(json.dumps({"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}}))
"""


@pytest.mark.parametrize(("early_meta", "expected"), [("", "wait\n\ngo on"), ("1", "resumed: wait\n\ngo on")])
async def test_steering_before_the_prompt_reached_the_session(tmp_path: Path, early_meta: str, expected: str) -> None:
    """No session yet: rerun the stopped prompt with the steering; a session without the prompt: resume with both."""
    agent = cli_agent(
        codex_harness(executable=make_cli(tmp_path, LATE_ROLLOUT_CLI)), variables={"FAKE_EARLY_META": early_meta}
    )
    run = dispatch(agent, AgentInput("wait"), workspace=tmp_path)
    with anyio.fail_after(30):
        first = await run.__anext__()
        assert first.type == "conversation"
        await run.steer("go on")
        result = await run.result()
    assert result.status == "completed" and result.text == expected
    assert result.conversation == "late-thread"


async def test_cancel_before_anything_ran(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, f"open({str(marker)!r}, 'w')")))
    run = dispatch(agent, AgentInput("x"), workspace=tmp_path)
    await run.cancel()
    result = await run.result()
    assert result.status == "canceled" and result.error is not None and result.error.code == "aborted"
    assert not marker.exists()  # the CLI never started


def test_bad_arguments_fail_at_once(tmp_path: Path) -> None:
    agent = cli_agent(claude_harness(executable="claude"))
    with pytest.raises(DispatchError) as deadline:
        dispatch(agent, AgentInput("x"), workspace=tmp_path, deadline=0)
    assert deadline.value.code == "configuration"
    with pytest.raises(DispatchError) as prompt:
        dispatch(agent, "x", workspace=tmp_path)  # type: ignore[arg-type]
    assert prompt.value.code == "prompt"
    with pytest.raises(DispatchError) as kind:
        dispatch(object(), AgentInput("x"), workspace=tmp_path)  # type: ignore[arg-type]
    assert kind.value.code == "configuration"
    with pytest.raises(ValueError, match="conversation"):
        Continuation("")
