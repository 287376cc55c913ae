"""GitHub Copilot CLI: ``copilot --prompt=PROMPT --output-format json`` and its JSON event lines (``{type, data, id}``).

The session id is printed only by the last line (``{"type": "result", "sessionId", "exitCode"}``), which is also the
end of a turn; a new session therefore gets its id from the harness (``--session-id``), so that a turn stopped before
its end (steering) can be resumed. Retries are their own events
(``assistant.turn_retry``, ``session.info`` of type ``model_retry``), never a failure; a turn that gives up prints
``session.error``. Stdout carries no token counts: the usage of a turn is read from the session's own record
(``session.usage_record`` lines of ``~/.copilot/session-state/<id>/events.jsonl``) once the CLI is gone.

A custom model server is the CLI's own bring-your-own-provider variables, given as agent variables and passed
through unchanged: ``COPILOT_PROVIDER_BASE_URL``, ``COPILOT_PROVIDER_TYPE`` (``openai`` chat completions, ``azure``
or ``anthropic`` messages), ``COPILOT_PROVIDER_WIRE_API`` (``completions`` or ``responses``),
``COPILOT_PROVIDER_API_KEY`` and ``COPILOT_MODEL``. With a provider URL the harness turns on ``COPILOT_OFFLINE``
(no GitHub login, no telemetry, no update check) unless the agent sets it.

Copilot keeps a GitHub login in the system keychain (a plaintext copy only where the user accepted one): no host
login file is copied. Without a provider, a GitHub token variable (``COPILOT_GITHUB_TOKEN``, ``GH_TOKEN``,
``GITHUB_TOKEN``) is the login.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from muster_dispatch.egress import Endpoint, endpoints_of
from muster_dispatch.events import AgentEvent, event, line_decoder
from muster_dispatch.faults import reset_in, says_any
from muster_dispatch.harness import AgentConfiguration, Bootstrap, Command, CredentialPlan, Harness
from muster_dispatch.inputs import AgentInput
from muster_dispatch.jsonline import parse
from muster_dispatch.jsonline import text_or_none as _s
from muster_dispatch.usage import Usage, counter, usage

PACKAGE = "@github/copilot"
VERSION = "1.0.102"
# Where the native binary unpacks its 235 MB package (read from the binary; its default is ~/.cache/copilot).
UNPACK_VARIABLE = "COPILOT_PKG_CACHE_HOME"

PROVIDER_KEY_VARIABLES = ("COPILOT_PROVIDER_API_KEY", "COPILOT_PROVIDER_BEARER_TOKEN")
GITHUB_TOKEN_VARIABLES = ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN")
CREDENTIAL_VARIABLES = (*PROVIDER_KEY_VARIABLES, *GITHUB_TOKEN_VARIABLES)

ENVIRONMENT = {"NO_COLOR": "1", "COPILOT_AUTO_UPDATE": "false"}

# Substring tests on the lower-cased text of a terminal error (``session.error``): its message ends with the
# provider's last answer ("...; retried 5 times (...) Last error: 429 This request would exceed your rate limit").
QUOTA_WORDS = (
    "exceeded your current quota",
    "insufficient_quota",
    "quota exceeded",
    "usage limit",
    "rate limit",
    "too many requests",
    "credit balance is too low",
    "last error: 429",
)
UNAVAILABLE_WORDS = (
    "overloaded",
    "at capacity",
    "service unavailable",
    "internal server error",
    "server_error",
    "bad gateway",
    "gateway timeout",
    "could not connect",
    "connection refused",
    "econnrefused",
    "econnreset",
    "fetch failed",
    "last error: 5",
)
QUOTA_ERROR_TYPES = frozenset({"rate_limit", "quota"})
_RETRY_NOTICE = re.compile(r"\bretrying\b|^\s*retry\b")


def request(input: AgentInput, model: str | None, program: str) -> Command:
    # `--prompt=TEXT`: after a bare `-p`, a prompt that starts with "-" is taken for options. --allow-all-tools: a
    # prompt-mode session cannot ask for each tool. No folder trust: the workspace's own hooks, plugins and MCP
    # servers are not loaded.
    args = [f"--prompt={input.prompt}", "--output-format", "json", "--allow-all-tools", "--no-auto-update"]
    if model:
        args += ["--model", model]
    if input.continuation is not None:
        args.append(f"--resume={input.continuation.conversation}")
        return Command(program, tuple(args))
    # A new session gets its id from us: Copilot prints it only in its last line, which a stopped CLI never reaches.
    session = str(uuid.uuid4())
    args.append(f"--session-id={session}")
    return Command(program, tuple(args), conversation=session)


def _other(obj: dict[str, Any]) -> list[AgentEvent]:
    return [event("raw", data=obj)]


def _text_delta(obj: dict[str, Any]) -> list[AgentEvent]:
    data = obj["data"]
    return [event("text_delta", text=_s(data.get("deltaContent")) or "", id=_s(data.get("messageId")))]


def _message(obj: dict[str, Any]) -> list[AgentEvent]:
    data = obj["data"]
    out: list[AgentEvent] = []
    text = _s(data.get("content"))
    if text:
        out.append(event("text", text=text, id=_s(data.get("messageId"))))
    for call in data.get("toolRequests") or ():
        out.append(event("tool", id=_s(call.get("toolCallId")), name=_s(call.get("name")), input=call.get("arguments")))
    return out


def _reasoning(obj: dict[str, Any]) -> list[AgentEvent]:
    data = obj["data"]
    return [event("reasoning", text=_s(data.get("content")) or "", id=_s(data.get("reasoningId")))]


def _tool_done(obj: dict[str, Any]) -> list[AgentEvent]:
    data = obj["data"]
    call_id = _s(data.get("toolCallId"))
    failed = data.get("success") is not True
    detail = data.get("error") if failed else data.get("result")
    output = detail.get("message" if failed else "content") if isinstance(detail, dict) else detail
    out = [event("tool_result", id=call_id, output=output, code="error" if failed else None)]
    for edit in data.get("fileEdits") or ():
        if isinstance(edit, dict) and isinstance(edit.get("path"), str):
            kind = _s(edit.get("kind"))
            out.append(event("file_change", id=call_id, name=kind, data={"path": edit["path"], "kind": kind}))
    return out


def _retry(obj: dict[str, Any]) -> list[AgentEvent]:
    reason = _s(obj["data"].get("reason"))
    return [event("retry", text=f"retrying the model call ({reason or 'error'})", code=reason)]


def _info(obj: dict[str, Any]) -> list[AgentEvent]:
    data = obj["data"]
    if data.get("infoType") == "model_retry":
        return [event("retry", text=_s(data.get("message")) or "retrying", code="model_retry")]
    return [event("raw", data=obj)]


def _warning(obj: dict[str, Any]) -> list[AgentEvent]:
    data = obj["data"]
    return [event("warning", text=_s(data.get("message")) or "", code=_s(data.get("warningType")))]


def _error(obj: dict[str, Any]) -> list[AgentEvent]:
    data = obj["data"]
    message = _s(data.get("message")) or "Copilot reported an error"
    code = _s(data.get("errorType")) or "error"
    out = [event("failure", text=message, code=code, data=obj)]
    lowered = message.lower()
    if code in QUOTA_ERROR_TYPES or says_any(lowered, QUOTA_WORDS):
        out.append(event("quota", text=message, reset_at=reset_in(message, lowered), code=code))
    return out


def _usage_event(obj: dict[str, Any]) -> list[AgentEvent]:
    # Not printed by 1.0.102 in prompt mode; decoded for the day it is.
    return [event("usage", usage=_usage(obj["data"]))]


def _result(obj: dict[str, Any]) -> list[AgentEvent]:
    session = _s(obj.get("sessionId"))
    out = [event("conversation", id=session)]
    if obj.get("exitCode") == 0:
        out.append(event("finished", id=session, code="stop"))
    return out


def _usage(data: Any) -> Usage:
    if data.__class__ is not dict:
        return Usage.missing()
    tokens_in = counter(data.get("inputTokens"))
    tokens_out = counter(data.get("outputTokens"))
    return usage(
        tokens_in or 0,
        counter(data.get("cacheReadTokens")) or 0,
        counter(data.get("cacheWriteTokens")) or 0,
        tokens_out or 0,
        {},
        tokens_in is not None and tokens_out is not None,
    )


_HANDLERS: dict[Any, Callable[[dict[str, Any]], list[AgentEvent]]] = {
    "assistant.message_delta": _text_delta,
    "assistant.message": _message,
    "assistant.reasoning": _reasoning,
    "tool.execution_complete": _tool_done,
    "assistant.turn_retry": _retry,
    "session.info": _info,
    "session.warning": _warning,
    "session.error": _error,
    "assistant.usage": _usage_event,
    "result": _result,
}

# Decode one ``copilot --output-format json`` line; never raises.
events = line_decoder(_HANDLERS, _other)


def quota(text: str) -> bool:
    """A TERMINAL usage or rate limit (a retry notice never matches)."""
    lowered = text.lower()
    return _RETRY_NOTICE.search(lowered) is None and says_any(lowered, QUOTA_WORDS)


def unavailable(text: str) -> bool:
    """A terminal outage or connection failure (a retry notice never matches)."""
    lowered = text.lower()
    return _RETRY_NOTICE.search(lowered) is None and says_any(lowered, UNAVAILABLE_WORDS)


def credentials(variables: Mapping[str, str]) -> CredentialPlan:
    return CredentialPlan(variables={k: v for k, v in variables.items() if k in CREDENTIAL_VARIABLES})


def configuration(variables: Mapping[str, str]) -> AgentConfiguration:
    # Settings, sessions and logs in the private home, whatever COPILOT_HOME the host has.
    env: dict[str, str] = {"COPILOT_HOME": "~/.copilot"}
    if variables.get("COPILOT_PROVIDER_BASE_URL"):
        env["COPILOT_OFFLINE"] = "true"
    return AgentConfiguration(env=env)


def session_globs(conversation: str) -> list[str]:
    return [f".copilot/session-state/{conversation}/**/*"]


def session_log(conversation: str) -> str:
    return f".copilot/session-state/{conversation}/events.jsonl"


def restore_path(conversation: str, captured: str, workspace: Path) -> str:
    return captured


def transcript_usage(text: str) -> Usage:
    """The session's total: the sum of its ``session.usage_record`` lines (one per model call)."""
    total: Usage | None = None
    for line in text.splitlines():
        if "session.usage_record" not in line:
            continue
        obj = parse(line)
        data = obj.get("data") if isinstance(obj, dict) else None
        if isinstance(data, dict) and obj.get("type") == "session.usage_record":
            one = _usage(data.get("usage"))
            total = one if total is None else total + one
    return total if total is not None else Usage.missing()


# Without a provider of its own, Copilot talks to GitHub's Copilot API and to GitHub for its token.
GITHUB_URLS = ("https://api.githubcopilot.com", "https://api.github.com")


def endpoints(variables: Mapping[str, str]) -> tuple[Endpoint, ...]:
    """The configured model provider, else GitHub's Copilot API and GitHub itself."""
    base = variables.get("COPILOT_PROVIDER_BASE_URL")
    return endpoints_of([base] if base else GITHUB_URLS)


def copilot_harness(*, executable: str | Path | None = None) -> Harness:
    """GitHub Copilot CLI: continuation (``--resume``), no fork (refused before a process starts), no live input
    (steering stops and resumes)."""
    return Harness(
        name="copilot",
        request_fn=request,
        events=events,
        quota=quota,
        unavailable=unavailable,
        requires_finished_event=True,
        credentials=credentials,
        configuration=configuration,
        bootstrap=Bootstrap(PACKAGE, VERSION, "copilot", unpack_variable=UNPACK_VARIABLE),
        resumable=True,
        forkable=False,
        live_input=False,
        session_globs=session_globs,
        restore_path=restore_path,
        session_log=session_log,
        transcript_usage=transcript_usage,
        cumulative_usage=True,
        executable=str(executable) if executable is not None else None,
        environment=ENVIRONMENT,
        endpoints=endpoints,
    )
