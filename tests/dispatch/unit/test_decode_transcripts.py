"""Decoding the REAL output of the pinned CLIs, captured against the fake model servers."""

from __future__ import annotations

import pytest

from muster_dispatch import (
    AgentEvent,
    claude_harness,
    codex_harness,
    copilot_harness,
    decode_transcript,
    gemini_harness,
    opencode_harness,
    quota_fault,
    unavailable_fault,
)
from tests.dispatch.unit.support import TRANSCRIPTS, meta, transcript

# name: (status, error code, unavailable, text starts with, input, output)
EXPECTED: dict[str, tuple[str, str | None, bool, str, int, int]] = {
    "claude-plain": ("completed", None, False, "Hello from the fake model.", 120, 30),
    "claude-tool": ("completed", None, False, "The command printed it.", 240, 60),
    "claude-transient": ("completed", None, False, "Recovered after retries.", 120, 30),
    "claude-live-input": ("completed", None, False, "Answer two.", 240, 60),
    "claude-auth": ("failed", "process", False, "Invalid API key", 0, 0),
    "claude-ratelimit": ("failed", "quota", False, "API Error: Request rejected (429)", 0, 0),
    "claude-usage-limit": ("failed", "quota", False, "You've hit your 5-hour limit", 0, 0),
    "claude-overloaded": ("failed", "process", True, "API Error: Repeated 529", 0, 0),
    "claude-server-error": ("failed", "process", True, "API Error: 500", 0, 0),
    "claude-network-down": ("failed", "process", True, "API Error: Connection refused", 0, 0),
    "codex-plain": ("completed", None, False, "Hello from the fake model.", 120, 30),
    "codex-tool": ("completed", None, False, "The command printed it.", 240, 60),
    "codex-transient": ("completed", None, False, "Recovered after retries.", 120, 30),
    "codex-auth": ("failed", "process", False, "", 0, 0),
    "codex-ratelimit": ("failed", "quota", False, "", 0, 0),
    "codex-usage-limit": ("failed", "quota", False, "", 0, 0),
    "codex-insufficient-quota": ("failed", "quota", False, "", 0, 0),
    "codex-overloaded": ("failed", "process", True, "", 0, 0),
    "codex-server-error": ("failed", "process", True, "", 0, 0),
    "opencode-tool": ("completed", None, False, "The command printed it.", 240, 60),
    "opencode-quota": ("failed", "quota", False, "", 0, 0),
    "gemini-plain": ("completed", None, False, "Hello from the fake model.", 120, 30),
    "gemini-tool": ("completed", None, False, "The command printed it.", 240, 60),
    "gemini-file-change": ("completed", None, False, "Wrote hello.txt.", 240, 60),
    "gemini-transient": ("completed", None, False, "Recovered.", 120, 30),
    "gemini-resume-2": ("completed", None, False, "The word was apple.", 120, 30),
    "gemini-quota": ("failed", "quota", False, "", 0, 0),
    "gemini-quota-retry-after": ("failed", "quota", False, "", 0, 0),
    "gemini-capacity": ("failed", "process", True, "", 0, 0),
    "gemini-server-error": ("failed", "process", True, "", 0, 0),
    "gemini-cut-off": ("failed", "process", False, "I was say", 0, 0),
    # Copilot prints no token counts: from stdout alone the usage is unknown (the session record has it).
    "copilot-plain": ("completed", None, False, "Hello from the fake model.", 0, 0),
    "copilot-tool": ("completed", None, False, "The command printed it.", 0, 0),
    "copilot-transient": ("completed", None, False, "Recovered after a retry.", 0, 0),
    "copilot-resume-2": ("completed", None, False, "It was apple.", 0, 0),
    "copilot-ratelimit": ("failed", "quota", False, "", 0, 0),
    "copilot-overloaded": ("failed", "process", True, "", 0, 0),
    "copilot-network-down": ("failed", "process", True, "", 0, 0),
}


def _decode(name: str):  # type: ignore[no-untyped-def]
    info = meta(name)
    harnesses = {
        "claude": claude_harness,
        "codex": codex_harness,
        "opencode": opencode_harness,
        "gemini": gemini_harness,
        "copilot": copilot_harness,
    }
    harness = harnesses[name.split("-")[0]]()
    stderr = info.get("stderr") or []
    assert isinstance(stderr, list)
    exit_code = info.get("exit_code")
    assert exit_code is None or isinstance(exit_code, int)
    return decode_transcript(harness, transcript(name), stderr_lines=stderr, exit_code=exit_code)


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if (TRANSCRIPTS / f"{n}.jsonl").exists()))
def test_transcript_outcome(name: str) -> None:
    status, code, unavailable, text, tokens_in, tokens_out = EXPECTED[name]
    result = _decode(name)
    assert result.status == status
    assert (result.error.code if result.error else None) == code
    assert (unavailable_fault(result.error) is not None) == unavailable
    assert (result.text or "").startswith(text)
    assert (result.usage.input, result.usage.output) == (tokens_in, tokens_out)
    assert result.conversation  # every captured turn announced its session / thread


def test_claude_usage_limit_reset_time_and_message() -> None:
    fault = quota_fault(_decode("claude-usage-limit").error)
    assert fault is not None
    assert fault.message.startswith("You've hit your 5-hour limit")
    assert fault.reset_at is not None and fault.reset_at.isoformat() == "2030-01-01T00:00:00+00:00"


def test_codex_usage_limit_reset_time_from_curly_apostrophe_message() -> None:
    fault = quota_fault(_decode("codex-usage-limit").error)
    assert fault is not None
    assert fault.message.startswith("You’ve hit your usage limit")
    assert fault.reset_at is not None and fault.reset_at.isoformat() == "2030-01-01T00:00:00+00:00"


def test_claude_api_spend_limit_is_quota_with_its_reset() -> None:
    fault = quota_fault(_decode("claude-api-usage-limit").error)
    assert fault is not None and fault.reset_at is not None
    assert fault.reset_at.isoformat() == "2030-01-01T00:00:00+00:00"


def test_claude_denied_write_has_no_file_change_and_an_accepted_one_has() -> None:
    denied = [e for line in transcript("claude-file-change") for e in claude_harness().events(line)]
    assert not [e for e in denied if e.type == "file_change"]
    assert [e.code for e in denied if e.type == "warning"] == ["permission_denied"]
    accepted = [e for line in transcript("claude-file-change-accept-edits") for e in claude_harness().events(line)]
    changes = [e for e in accepted if e.type == "file_change"]
    assert len(changes) == 1 and str(changes[0].data["path"]).endswith("/hello.txt")


def test_claude_transient_retries_are_retry_events_not_failures() -> None:
    events = [e for line in transcript("claude-transient") for e in claude_harness().events(line)]
    assert any(e.type == "retry" for e in events)
    assert not any(e.type == "failure" for e in events)


def test_codex_transient_reconnecting_is_a_retry() -> None:
    events = [e for line in transcript("codex-transient") for e in codex_harness().events(line)]
    retries = [e for e in events if e.type == "retry"]
    assert retries and retries[0].text is not None and retries[0].text.startswith("Reconnecting...")
    assert not any(e.type == "failure" for e in events)


def test_codex_network_down_never_finishes() -> None:
    """The capture was killed at a timeout: without `turn.completed` the turn is a failure, never a success."""
    result = _decode("codex-network-down")
    assert result.status == "failed"
    events = [e for line in transcript("codex-network-down") for e in codex_harness().events(line)]
    assert events and all(e.type in ("conversation", "retry", "raw") for e in events)


def test_claude_tool_call_and_result_events() -> None:
    events = [e for line in transcript("claude-tool") for e in claude_harness().events(line)]
    tools = [e for e in events if e.type == "tool"]
    results = [e for e in events if e.type == "tool_result"]
    assert tools and tools[0].name == "Bash" and isinstance(tools[0].input, dict)
    assert results and results[0].id == tools[0].id and "muster-tool-ok" in str(results[0].output)


def test_codex_tool_call_and_result_events() -> None:
    events = [e for line in transcript("codex-tool") for e in codex_harness().events(line)]
    tools = [e for e in events if e.type == "tool"]
    results = [e for e in events if e.type == "tool_result"]
    assert tools and tools[0].name == "shell"
    assert results and results[0].id == tools[0].id and "muster-tool-ok" in str(results[0].output)
    assert results[0].code is None  # exit code 0


def test_claude_fork_has_a_new_session_id() -> None:
    parent = _decode("claude-fork")
    child = _decode("claude-fork-2")
    assert parent.conversation and child.conversation and parent.conversation != child.conversation


def test_codex_resume_keeps_the_thread_id() -> None:
    assert _decode("codex-resume").conversation == _decode("codex-resume-2").conversation


def test_opencode_tool_step_is_not_the_end_of_the_turn() -> None:
    events = [e for line in transcript("opencode-tool") for e in opencode_harness().events(line)]
    tools = [e for e in events if e.type == "tool"]
    results = [e for e in events if e.type == "tool_result"]
    assert tools and tools[0].name == "bash" and results[0].id == tools[0].id
    assert "muster-tool-ok" in str(results[0].output)
    assert [e.code for e in events if e.type == "finished"] == ["stop"]  # only the step ending in "stop"


def test_opencode_garbled_lines_are_raw() -> None:
    decode = opencode_harness().events
    assert [e.type for e in decode("not json at all")] == ["raw"]
    assert [e.type for e in decode('{"type":"text","part":7}')] == ["raw"]
    assert [e.type for e in decode('{"type":"novel","sessionID":"ses_1"}')] == ["raw"]
    assert decode("") == []


def test_gemini_deltas_make_the_final_text_and_the_session_is_the_conversation() -> None:
    events = [e for line in transcript("gemini-tool") for e in gemini_harness().events(line)]
    assert [e.type for e in events] == [
        "conversation",
        "tool",
        "tool_result",
        "text_delta",
        "text_delta",
        "usage",
        "finished",
    ]
    (conversation, tool, result) = events[:3]
    assert conversation.id and len(conversation.id) == 36 and conversation.name == "gemini-2.5-pro"
    assert tool.name == "run_shell_command" and tool.input["command"] == "echo muster-tool-ok"
    assert result.id == tool.id and result.output == "muster-tool-ok" and result.code is None


def test_gemini_resume_keeps_the_session() -> None:
    assert _decode("gemini-resume").conversation == _decode("gemini-resume-2").conversation
    assert meta("gemini-resume-2")["first_session"] == _decode("gemini-resume").conversation


def test_gemini_daily_quota_message_and_no_reset() -> None:
    fault = quota_fault(_decode("gemini-quota").error)
    assert fault is not None
    assert "exhausted your daily quota" in fault.message
    assert fault.reset_at is None  # the CLI prints no time for a daily quota


def test_gemini_suggested_retry_is_the_reset_time() -> None:
    fault = quota_fault(_decode("gemini-quota-retry-after").error)
    assert fault is not None and fault.reset_at is not None
    assert "Suggested retry after 3600s" in fault.message


def test_gemini_capacity_is_an_outage_though_stderr_calls_it_a_quota_error() -> None:
    info = meta("gemini-capacity")
    assert any("RetryableQuotaError" in line for line in info["stderr"])
    error = _decode("gemini-capacity").error
    assert quota_fault(error) is None and unavailable_fault(error) is not None


def test_gemini_cut_off_stream_exits_zero_and_fails() -> None:
    assert meta("gemini-cut-off")["exit_code"] == 0
    error = _decode("gemini-cut-off").error
    assert error is not None and "without a finish reason" in error.message


def test_gemini_garbled_lines_are_raw() -> None:
    decode = gemini_harness().events
    assert [e.type for e in decode("not json at all")] == ["raw"]
    assert [e.type for e in decode('{"type":"message","role":"assistant","content":7,"delta":true}')] == ["text_delta"]
    assert [e.type for e in decode('{"type":"result","status":"error","error":"boom"}')] == [
        "usage",
        "failure",
        "finished",
    ]
    assert [e.type for e in decode('{"type":"novel","session_id":"x"}')] == ["raw"]
    assert [e.type for e in decode("[1, 2]")] == ["raw"]
    assert decode("") == []
    broken = ['{"type":"init","session_id":5}', '{"type":"tool_use","parameters":"x"}', '{"type":"result","stats":[1]}']
    broken += ['{"type":"tool_result","status":"error","error":"x"}', '{"type":"error"}', "\udcff\x00", "null"]
    for line in broken:
        assert all(isinstance(e, AgentEvent) for e in decode(line))


def _copilot_events(name: str) -> list[AgentEvent]:
    return [e for line in transcript(name) for e in copilot_harness().events(line)]


def test_copilot_text_reasoning_and_no_usage_on_stdout() -> None:
    events = _copilot_events("copilot-plain")
    assert [e.text for e in events if e.type == "reasoning"] == ["The user wants a greeting."]
    assert "".join(e.text or "" for e in events if e.type == "text_delta") == "Hello from the fake model."
    assert not [e for e in events if e.type in ("usage", "failure", "retry")]
    assert not _decode("copilot-plain").usage.complete  # unknown, not a count of zero


def test_copilot_tools_results_and_file_changes() -> None:
    events = _copilot_events("copilot-tool")
    bash, create = [e for e in events if e.type == "tool"]
    echoed, created = [e for e in events if e.type == "tool_result"]
    assert bash.name == "bash" and echoed.id == bash.id and "muster-tool-ok" in str(echoed.output)
    assert create.name == "create" and created.id == create.id and created.code is None
    (change,) = [e for e in events if e.type == "file_change"]
    assert change.id == create.id and str(change.data["path"]).endswith("/hello.txt")
    assert [e.type for e in events].count("finished") == 1


def test_copilot_session_record_holds_the_usage() -> None:
    read = copilot_harness().transcript_usage
    assert read is not None
    plain = read("\n".join(transcript("copilot-plain.session")))
    assert (plain.input, plain.output, plain.complete) == (120, 30, True)
    tool = read("\n".join(transcript("copilot-tool.session")))
    assert (tool.input, tool.output) == (360, 90)
    both = read("\n".join(transcript("copilot-resume-2.session")))
    assert (both.input, both.output) == (240, 60)  # the session's total: the runner subtracts the earlier turns
    assert not read("\n".join(transcript("copilot-plain"))).complete  # stdout has no record


def test_copilot_retries_are_notices_and_the_last_error_decides() -> None:
    harness = copilot_harness()
    events = _copilot_events("copilot-transient")
    assert [e.type for e in events if e.type in ("retry", "failure")] == ["retry", "retry"]
    (notice,) = [e.text for e in events if e.type == "retry" and e.code == "model_retry"]
    assert not harness.quota(notice) and not harness.unavailable(notice)
    (ratelimit,) = [e for e in _copilot_events("copilot-ratelimit") if e.type == "failure"]
    assert ratelimit.text and harness.quota(ratelimit.text) and not harness.unavailable(ratelimit.text)
    (overloaded,) = [e for e in _copilot_events("copilot-overloaded") if e.type == "failure"]
    assert overloaded.text and harness.unavailable(overloaded.text) and not harness.quota(overloaded.text)
    (down,) = [e for e in _copilot_events("copilot-network-down") if e.type == "failure"]
    assert down.text and harness.unavailable(down.text)


def test_copilot_resume_keeps_the_session() -> None:
    assert _decode("copilot-resume").conversation == _decode("copilot-resume-2").conversation


def test_copilot_garbled_lines_are_raw() -> None:
    decode = copilot_harness().events
    assert [e.type for e in decode("not json at all")] == ["raw"]
    assert [e.type for e in decode('{"type":"assistant.message","data":7}')] == ["raw"]
    assert [e.type for e in decode('{"type":"tool.execution_complete"}')] == ["raw"]
    assert [e.type for e in decode('{"type":"session.novel","data":{}}')] == ["raw"]
    assert [e.type for e in decode("[1, 2]")] == ["raw"]
    assert decode("") == []
    # A result line that failed names its session but does not end the turn.
    assert [e.type for e in decode('{"type":"result","sessionId":"s-1","exitCode":1}')] == ["conversation"]
