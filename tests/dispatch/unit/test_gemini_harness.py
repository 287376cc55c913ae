"""The Gemini CLI harness's pure parts: command, recognisers, credentials, settings, session paths."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from muster_dispatch import AgentInput, Continuation, DispatchError, gemini_harness
from muster_dispatch.harnesses import gemini

RETRY_NOTICES = [
    "Attempt 1 failed: No capacity available for model gemini-2.5-pro on the server. Retrying after 1069ms...",
    'Attempt 1 failed with status 429. Retrying with backoff... {"error":{"code":429,"message":"You exceeded your '
    'current quota","status":"RESOURCE_EXHAUSTED"}}',
    'Attempt 1 failed with status 500. Retrying with backoff... _ApiError: {"error":{"code":500,"status":"INTERNAL"}}',
]


def test_the_prompt_is_one_argument_and_a_resume_names_the_session() -> None:
    prompt = "-x first line\n  second  line"
    command = gemini_harness().request(AgentInput(prompt, Continuation("abc")), model="gemini-2.5-pro")
    assert command.program == "gemini"
    assert f"--prompt={prompt}" in command.args
    assert command.args[command.args.index("-m") + 1] == "gemini-2.5-pro"
    assert command.args[command.args.index("--resume") + 1] == "abc"
    assert command.args[command.args.index("--output-format") + 1] == "stream-json"
    assert command.stdin is None and not command.keep_stdin


def test_no_fork_and_no_live_input() -> None:
    harness = gemini_harness()
    assert harness.resumable and not harness.forkable and not harness.live_input
    assert harness.requires_finished_event


@pytest.mark.parametrize(
    "text",
    [
        "[API Error: You have exhausted your daily quota on this model.]\nPlease wait and try again later.",
        "You exceeded your current quota, please check your plan and billing details.",
        "[API Error: Resource has been exhausted (e.g. check quota).\nSuggested retry after 3600s.]",
        "TerminalQuotaError: You have exhausted your daily quota on this model.",
    ],
)
def test_quota_texts(text: str) -> None:
    assert gemini.quota(text) and not gemini.unavailable(text)


@pytest.mark.parametrize(
    "text",
    [
        "[API Error: No capacity available for model gemini-2.5-pro on the server]",
        "Error when talking to Gemini API RetryableQuotaError: No capacity available for model gemini-2.5-pro",
        "RESOURCE_EXHAUSTED: MODEL_CAPACITY_EXHAUSTED",
        '[API Error: {"error":{"code":500,"message":"An internal error has occurred.","status":"INTERNAL"}}]',
        "The model is overloaded. Please try again later.",
        "TypeError: fetch failed",
    ],
)
def test_capacity_and_outages_are_unavailable_never_quota(text: str) -> None:
    assert gemini.unavailable(text) and not gemini.quota(text)


@pytest.mark.parametrize("text", RETRY_NOTICES)
def test_a_retry_notice_is_neither(text: str) -> None:
    assert not gemini.quota(text) and not gemini.unavailable(text)


def test_suggested_retry_is_a_reset_time() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert gemini.reset_after("Suggested retry after 3600s.", now=now) == now + timedelta(hours=1)
    assert gemini.reset_after("Please retry in 41.5s", now=now) == now + timedelta(seconds=41.5)
    assert gemini.reset_after("Please retry in 500ms", now=now) == now + timedelta(seconds=0.5)
    assert gemini.reset_after("Please wait and try again later.", now=now) is None


def test_credentials_a_key_variable_or_the_host_login() -> None:
    harness = gemini_harness()
    plan = harness.credentials({"GEMINI_API_KEY": "k", "OTHER": "x"})
    assert dict(plan.variables) == {"GEMINI_API_KEY": "k"} and plan.host_login is None
    login = harness.credentials({}).host_login
    assert login is not None and [f.host for f in login.files if f.required] == [".gemini/oauth_creds.json"]


def test_settings_name_the_auth_type_and_bound_the_attempts() -> None:
    harness = gemini_harness()
    keyed = json.loads(harness.configuration({"GOOGLE_API_KEY": "secret-value-1"}).files[".gemini/settings.json"])
    assert keyed["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert keyed["general"]["maxAttempts"] == gemini.DEFAULT_MAX_ATTEMPTS
    assert "secret-value-1" not in json.dumps(keyed)  # the key stays in the environment, never in a file
    login = json.loads(harness.configuration({gemini.MAX_ATTEMPTS_VARIABLE: "5"}).files[".gemini/settings.json"])
    assert login["security"]["auth"]["selectedType"] == "oauth-personal" and login["general"]["maxAttempts"] == 5
    assert harness.environment["GEMINI_CLI_TRUST_WORKSPACE"] == "true"


@pytest.mark.parametrize("value", ["0", "11", "three", "-1", ""])
def test_attempts_out_of_bounds_are_refused(value: str) -> None:
    with pytest.raises(DispatchError) as info:
        gemini_harness().configuration({gemini.MAX_ATTEMPTS_VARIABLE: value})
    assert info.value.code == "configuration" and info.value.details["field"] == gemini.MAX_ATTEMPTS_VARIABLE


def test_unknown_approval_mode_is_refused() -> None:
    with pytest.raises(DispatchError) as info:
        gemini_harness(approval_mode="everything")
    assert info.value.details["field"] == "approval_mode"


def test_a_session_file_goes_back_under_the_workspace_project() -> None:
    conversation = "998ea161-7822-446c-ad0e-a7c43d5059b2"
    captured = ".gemini/tmp/old-name/chats/session-2026-12-02T00-59-998ea161.jsonl"
    harness = gemini_harness()
    assert harness.session_globs(conversation) == [".gemini/tmp/*/chats/session-*-998ea161.jsonl"]
    restored = harness.restore_path(conversation, captured, Path("/srv/My Project_2"))
    assert restored == ".gemini/tmp/my-project-2/chats/session-2026-12-02T00-59-998ea161.jsonl"
