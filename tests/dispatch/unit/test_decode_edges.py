"""Hand-written lines: the shapes the captures did not cover, and lines that must never break decoding."""

from __future__ import annotations

import json

import pytest

from muster_dispatch import AgentEvent, Usage, claude_harness, codex_harness, decode_transcript

CLAUDE = claude_harness()
CODEX = codex_harness()


@pytest.mark.parametrize("harness", [CLAUDE, CODEX], ids=["claude", "codex"])
@pytest.mark.parametrize(
    "line",
    [
        "Reading additional input from stdin...",
        "{not json",
        "[1, 2, 3]",
        '"a string"',
        "null",
        '{"type": "brand_new_event", "x": 1}',
        '{"no_type": true}',
        '{"type": "assistant", "message": "not an object"}',
        '{"type": "item.completed", "item": 42}',
        '{"type": "result", "usage": [1]}',
        "\udcff\x00",
    ],
)
def test_unknown_or_broken_lines_become_raw(harness, line: str) -> None:  # type: ignore[no-untyped-def]
    events = harness.events(line)
    assert all(isinstance(e, AgentEvent) for e in events)
    assert events == [] or all(e.type in ("raw", "result", "usage", "finished", "text") for e in events)


def test_blank_line_is_no_event() -> None:
    assert CLAUDE.events("") == []
    assert CODEX.events("   ") == []


def test_non_json_keeps_its_text_and_unknown_json_keeps_its_object() -> None:
    assert CLAUDE.events("hello there") == [AgentEvent("raw", text="hello there")]
    (event,) = CODEX.events('{"type": "future.thing", "n": 1}')
    assert event.type == "raw" and event.data == {"type": "future.thing", "n": 1}


def test_claude_result_is_error_with_subtype_success_is_a_failure() -> None:
    line = json.dumps(
        {
            "type": "result",
            "subtype": "success",
            "is_error": True,
            "result": "API Error: 500 boom",
            "session_id": "s1",
            "usage": {"input_tokens": 5, "output_tokens": 0},
        }
    )
    types = [e.type for e in CLAUDE.events(line)]
    assert types == ["usage", "result", "failure", "finished"]
    result = decode_transcript(CLAUDE, [line], exit_code=0)
    assert result.status == "failed" and result.error is not None and result.error.code == "process"
    assert result.error.details.get("unavailable") is True


def test_claude_without_result_line_fails_even_on_exit_zero() -> None:
    init = json.dumps({"type": "system", "subtype": "init", "session_id": "s1", "model": "m"})
    text = json.dumps({"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": "hi"}]}})
    result = decode_transcript(CLAUDE, [init, text], exit_code=0)
    assert result.status == "failed" and result.error is not None and result.error.code == "process"
    assert "final event" in result.error.message
    assert result.conversation == "s1" and result.text == "hi"
    assert result.usage.complete is False


def test_claude_rate_limit_event_rejected_is_a_quota_event_with_reset() -> None:
    line = json.dumps(
        {"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "resetsAt": 1893456000000}}
    )
    (event,) = CLAUDE.events(line)
    assert event.type == "quota" and event.reset_at is not None
    assert event.reset_at.isoformat() == "2030-01-01T00:00:00+00:00"
    assert CLAUDE.events(json.dumps({"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}})) == []


def test_claude_rejected_rate_limit_then_failure_is_quota_even_with_unknown_text() -> None:
    lines = [
        json.dumps({"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "resetsAt": 1893456000}}),
        json.dumps({"type": "result", "subtype": "success", "is_error": True, "result": "something odd"}),
    ]
    result = decode_transcript(CLAUDE, lines, exit_code=1)
    assert result.error is not None and result.error.code == "quota"
    assert result.error.details["reset_at"] == "2030-01-01T00:00:00+00:00"


def test_claude_rejected_rate_limit_on_a_successful_turn_is_not_a_fault() -> None:
    lines = [
        json.dumps({"type": "rate_limit_event", "rate_limit_info": {"status": "rejected"}}),
        json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "done", "usage": {}}),
    ]
    assert decode_transcript(CLAUDE, lines, exit_code=0).status == "completed"


def test_claude_thinking_and_tool_use_blocks() -> None:
    line = json.dumps(
        {
            "type": "assistant",
            "message": {
                "id": "m1",
                "content": [
                    {"type": "thinking", "thinking": "hmm"},
                    {"type": "tool_use", "id": "t1", "name": "Write", "input": {"file_path": "/w/a.txt"}},
                ],
            },
        }
    )
    events = CLAUDE.events(line)
    assert [e.type for e in events] == ["reasoning", "tool"]  # no file_change before the write succeeded
    assert events[1].name == "Write" and events[1].input == {"file_path": "/w/a.txt"}


def _tool_result(is_error: bool, detail: object) -> str:
    block = {"type": "tool_result", "tool_use_id": "t1", "content": "x", "is_error": is_error}
    return json.dumps({"type": "user", "message": {"content": [block]}, "tool_use_result": detail})


def test_claude_file_change_comes_from_a_successful_write_result() -> None:
    done = CLAUDE.events(_tool_result(False, {"type": "create", "filePath": "/w/a.txt", "content": "hi"}))
    assert [e.type for e in done] == ["tool_result", "file_change"]
    assert done[1].id == "t1" and done[1].data == {"path": "/w/a.txt", "kind": "create"}
    denied = CLAUDE.events(_tool_result(True, "Error: Claude requested permissions to write to /w/a.txt"))
    assert [e.type for e in denied] == ["tool_result"] and denied[0].code == "error"
    bash = CLAUDE.events(_tool_result(False, {"stdout": "made", "stderr": ""}))
    assert [e.type for e in bash] == ["tool_result"]


def test_claude_permission_denied_is_a_warning() -> None:
    line = json.dumps(
        {"type": "system", "subtype": "permission_denied", "tool_name": "Write", "tool_use_id": "t1", "message": "no"}
    )
    assert CLAUDE.events(line) == [
        AgentEvent("warning", text="no", id="t1", name="Write", code="permission_denied", data=json.loads(line))
    ]


def test_claude_partial_messages_give_text_deltas() -> None:
    line = json.dumps(
        {
            "type": "stream_event",
            "event": {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "He"}},
        }
    )
    assert CLAUDE.events(line) == [AgentEvent("text_delta", text="He")]


def test_codex_error_item_is_a_warning_not_a_failure() -> None:
    lines = [
        '{"type":"thread.started","thread_id":"t1"}',
        '{"type":"item.completed","item":{"id":"i0","type":"error","message":"model fell back"}}',
        '{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"ok"}}',
        '{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":4,"output_tokens":2}}',
    ]
    result = decode_transcript(CODEX, lines, exit_code=0)
    assert result.status == "completed" and result.text == "ok"
    assert CODEX.events(lines[1])[0].type == "warning"
    assert result.usage == Usage(input=6, cached=4, output=2)


def test_codex_old_item_type_and_assistant_message_names() -> None:
    line = '{"type":"item.completed","item":{"id":"i1","item_type":"assistant_message","text":"old"}}'
    assert CODEX.events(line) == [AgentEvent("text", text="old", id="i1")]


def test_codex_cache_write_tokens_are_cache_created() -> None:
    line = json.dumps(
        {
            "type": "turn.completed",
            "usage": {
                "input_tokens": 100,
                "cached_input_tokens": 30,
                "cache_write_input_tokens": 20,
                "output_tokens": 5,
            },
        }
    )
    usage = CODEX.events(line)[0].usage
    assert usage == Usage(input=50, cached=30, cache_created=20, output=5)


def test_codex_quota_failure_also_gives_a_quota_event_with_reset() -> None:
    line = json.dumps(
        {
            "type": "turn.failed",
            "error": {"message": "You’ve hit your usage limit. try again at Jan 1st, 2030 12:00 AM."},
        }
    )
    types = [e.type for e in CODEX.events(line)]
    assert types == ["failure", "quota", "finished"]
    quota = CODEX.events(line)[1]
    assert quota.reset_at is not None and quota.reset_at.year == 2030


def test_codex_turn_failed_is_the_failure_and_reconnecting_is_a_retry() -> None:
    lines = [
        '{"type":"error","message":"Reconnecting... 1/5 (stream disconnected before completion)"}',
        '{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}',
    ]
    assert CODEX.events(lines[0])[0].type == "retry"
    result = decode_transcript(CODEX, lines, exit_code=1)
    assert result.error is not None and result.error.code == "process"
    # The retry notice mentioned a disconnect; only terminal texts decide an outage.
    assert "unavailable" not in result.error.details


def test_codex_file_change_and_mcp_items() -> None:
    change = '{"type":"item.completed","item":{"id":"f","type":"file_change","changes":[{"path":"a","kind":"add"}]}}'
    (event,) = CODEX.events(change)
    assert event.type == "file_change" and event.data == [{"path": "a", "kind": "add"}]
    start = '{"type":"item.started","item":{"id":"m","type":"mcp_tool_call","server":"s","tool":"t","arguments":{}}}'
    assert CODEX.events(start)[0].name == "s.t"


def test_codex_app_server_lines() -> None:
    def decode(message: dict[str, object]) -> list[AgentEvent]:
        return CODEX.events(json.dumps(message))

    assert decode({"id": 2, "result": {"thread": {"id": "t1"}}}) == [AgentEvent("conversation", id="t1")]
    assert decode({"id": 3, "result": {"turn": {"id": "u1"}}}) == []
    (failure,) = decode({"id": 2, "error": {"code": -32600, "message": "no rollout found"}})
    assert failure.type == "failure" and failure.text == "no rollout found"
    started = decode(
        {"method": "item/started", "params": {"item": {"type": "commandExecution", "id": "c", "command": "ls"}}}
    )
    assert started == [AgentEvent("tool", id="c", name="shell", input={"command": "ls"})]
    done = {"type": "commandExecution", "id": "c", "command": "ls", "aggregatedOutput": "a\n", "exitCode": 2}
    (result,) = decode({"method": "item/completed", "params": {"item": done}})
    assert result.type == "tool_result" and result.code == "error" and result.output == "a\n"
    assert decode({"method": "item/agentMessage/delta", "params": {"itemId": "m", "delta": "O"}})[0].text == "O"
    retry = decode({"method": "error", "params": {"error": {"message": "Reconnecting"}, "willRetry": True}})
    assert [e.type for e in retry] == ["retry"]
    failed_turn = {
        "id": "u1",
        "status": "failed",
        "error": {"message": "You’ve hit your usage limit. try again at Jan 1st, 2030 12:00 AM."},
    }
    assert [e.type for e in decode({"method": "turn/completed", "params": {"turn": failed_turn}})] == [
        "failure",
        "quota",
        "finished",
    ]
    assert decode({"method": "thread/status/changed", "params": {}}) == []
    assert decode({"method": "brand/new", "params": {}})[0].type == "raw"


def test_app_server_driver_sequence() -> None:
    from pathlib import Path

    from muster_dispatch import AgentInput, Continuation
    from muster_dispatch.harnesses.codex_live import AppServerDriver

    driver = AppServerDriver(AgentInput("p", Continuation("t1")), "gpt-5.5", Path("/w"))
    (init,) = driver.opening()
    assert json.loads(init)["method"] == "initialize"
    assert driver.steer("early") == []  # before the thread: joins the first input
    initialized, resume = driver.feed(json.dumps({"id": 1, "result": {}}))
    assert json.loads(initialized) == {"method": "initialized"}
    assert json.loads(resume)["method"] == "thread/resume" and json.loads(resume)["params"]["threadId"] == "t1"
    (start,) = driver.feed(json.dumps({"id": 2, "result": {"thread": {"id": "t1"}}}))
    assert [i["text"] for i in json.loads(start)["params"]["input"]] == ["p", "early"]
    assert driver.steer("between") == []  # the turn id is not known yet
    (steer,) = driver.feed(json.dumps({"method": "turn/started", "params": {"turn": {"id": "u1"}}}))
    assert json.loads(steer)["params"] == {
        "threadId": "t1",
        "expectedTurnId": "u1",
        "input": [{"type": "text", "text": "between"}],
    }
    (later,) = driver.steer("later")
    assert json.loads(later)["method"] == "turn/steer"
    driver.feed(json.dumps({"id": json.loads(steer)["id"], "result": {"turnId": "u1"}}))
    driver.feed(json.dumps({"method": "turn/completed", "params": {"turn": {"id": "u1", "status": "completed"}}}))
    assert not driver.done  # "later" is unanswered: codex may still refuse it
    assert driver.feed(json.dumps({"id": json.loads(later)["id"], "result": {"turnId": "u1"}})) == []
    assert driver.done
