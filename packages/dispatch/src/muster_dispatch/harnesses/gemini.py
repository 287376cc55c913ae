"""Gemini CLI: ``gemini -p PROMPT --output-format stream-json -m MODEL`` and its JSON event lines.

Lines are ``{type, timestamp, …}`` with type ``init`` (session id, model), ``message`` (the user's prompt echoed, then
the answer as ``delta`` fragments), ``tool_use`` / ``tool_result``, ``error`` (severity warning or error) and one
``result`` (status success or error, the error's text, token stats) that ends the turn. A cut-off stream ends with an
``error`` event, a ``result`` of status error and exit code 0; an API error exits with its HTTP status modulo 256.

The private home holds ``~/.gemini/settings.json``, written from the agent variables:

- the auth type: ``gemini-api-key`` with ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``, else ``oauth-personal`` (the user's
  own login, copied from the host);
- ``general.maxAttempts`` from ``MUSTER_GEMINI_MAX_ATTEMPTS`` (default 3, 1 to 10): the CLI's own default retries a
  429 ten times, minutes before a quota is reported;
- usage statistics off.

A custom endpoint (tests) is the CLI's own ``GOOGLE_GEMINI_BASE_URL`` among the agent variables.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from muster_dispatch.egress import Endpoint, endpoints_of
from muster_dispatch.errors import DispatchError
from muster_dispatch.events import AgentEvent, event, line_decoder
from muster_dispatch.faults import says_any
from muster_dispatch.harness import AgentConfiguration, Bootstrap, Command, CredentialPlan, Harness
from muster_dispatch.host_login import HostLogin, LoginFile
from muster_dispatch.inputs import AgentInput
from muster_dispatch.jsonline import text_or_none as _s
from muster_dispatch.usage import Usage, counter, usage

PACKAGE = "@google/gemini-cli"
VERSION = "0.61.0"

CREDENTIAL_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
APPROVAL_MODES = ("default", "auto_edit", "yolo", "plan")
MAX_ATTEMPTS_VARIABLE = "MUSTER_GEMINI_MAX_ATTEMPTS"
DEFAULT_MAX_ATTEMPTS = 3
MAX_ATTEMPTS_LIMIT = 10

# A headless CLI: the workspace trusted without a prompt (else exit 55), no relaunch of itself in a child process.
ENVIRONMENT = {"GEMINI_CLI_TRUST_WORKSPACE": "true", "GEMINI_CLI_NO_RELAUNCH": "true", "NO_COLOR": "1"}

# Capacity is an outage even though the CLI files it under quota errors (RetryableQuotaError, TerminalQuotaError).
CAPACITY_WORDS = (
    "no capacity available",
    "model_capacity_exhausted",
    "model_capacity_exceeded",
    "capacity exceeded",
    "exhausted your capacity",
)
QUOTA_WORDS = (
    "exceeded your current quota",
    "exhausted your daily quota",
    "resource has been exhausted",
    "resource_exhausted",
    "quotafailure",
    "quota exceeded",
    "insufficient_g1_credits_balance",
    "request a quota increase",
)
UNAVAILABLE_WORDS = (
    *CAPACITY_WORDS,
    "overloaded",
    "service unavailable",
    '"status":"unavailable"',
    '"status":"internal"',
    "internal error has occurred",
    "bad gateway",
    "gateway timeout",
    "econnrefused",
    "connection refused",
    "econnreset",
    "etimedout",
    "fetch failed",
    "socket hang up",
)
_STATUS_5XX = re.compile(r'"code":\s*5\d\d\b|\bstatus[: ]+5\d\d\b')
# "Suggested retry after 3600s." / "Please retry in 41.2s": a delay from when the CLI printed it.
_RETRY_AFTER = re.compile(r"(?:retry after|retry in)\s+(\d+(?:\.\d+)?)\s*(ms|s)\b", re.IGNORECASE)

SETTINGS_PATH = ".gemini/settings.json"
HOST_LOGIN = HostLogin(
    files=(
        LoginFile(".gemini/oauth_creds.json", ".gemini/oauth_creds.json"),
        LoginFile(".gemini/google_accounts.json", ".gemini/google_accounts.json", required=False),
    ),
    fix=f"run `gemini` and log in with Google on this machine, or give the agent {' or '.join(CREDENTIAL_VARIABLES)}",
)


def request(input: AgentInput, model: str | None, program: str, approval_mode: str = "yolo") -> Command:
    # The prompt is one argument (no shell), spaces and newlines as written; in the `--prompt=` form a prompt that
    # starts with a dash is not read as an option. Stdin is empty: the CLI appends piped input to the prompt.
    args: list[str] = [f"--prompt={input.prompt}", "--output-format", "stream-json", "--approval-mode", approval_mode]
    if model:
        args += ["-m", model]
    if input.continuation is not None:
        args += ["--resume", input.continuation.conversation]
    return Command(program, tuple(args))


def _other(obj: dict[str, Any]) -> list[AgentEvent]:
    return [event("raw", data=obj)]


def _init(obj: dict[str, Any]) -> list[AgentEvent]:
    return [event("conversation", id=_s(obj.get("session_id")), name=_s(obj.get("model")), data=obj)]


def _message(obj: dict[str, Any]) -> list[AgentEvent]:
    if obj.get("role") != "assistant":
        return []  # the prompt, echoed
    text = _s(obj.get("content")) or ""
    return [event("text_delta", text=text)] if obj.get("delta") else [event("text", text=text)]


def _tool_use(obj: dict[str, Any]) -> list[AgentEvent]:
    return [event("tool", id=_s(obj.get("tool_id")), name=_s(obj.get("tool_name")), input=obj.get("parameters"))]


def _tool_result(obj: dict[str, Any]) -> list[AgentEvent]:
    tool_id = _s(obj.get("tool_id"))
    if obj.get("status") == "success":
        return [event("tool_result", id=tool_id, output=obj.get("output"))]
    error = obj.get("error")
    output = error.get("message") if isinstance(error, dict) else obj.get("output")
    return [event("tool_result", id=tool_id, output=output, code="error")]


def _error(obj: dict[str, Any]) -> list[AgentEvent]:
    text = _s(obj.get("message")) or "Gemini CLI reported an error"
    if obj.get("severity") == "error":
        return [event("failure", text=text, code="error", data=obj), *_quota(text)]
    return [event("warning", text=text, code=_s(obj.get("severity")), data=obj)]


def _result(obj: dict[str, Any]) -> list[AgentEvent]:
    status = _s(obj.get("status"))
    out = [event("usage", usage=_usage(obj.get("stats")), data={"duration_ms": _stat(obj, "duration_ms")})]
    if status != "success":
        error = obj.get("error")
        error = error if error.__class__ is dict else {}
        text = _s(error.get("message")) or "Gemini CLI ended the turn with an error"
        out.append(event("failure", text=text, code=_s(error.get("type")) or status or "error", data=obj))
        out += _quota(text)
    out.append(event("finished", code=status))
    return out


def _stat(obj: dict[str, Any], key: str) -> Any:
    stats = obj.get("stats")
    return stats.get(key) if stats.__class__ is dict else None


def _usage(stats: Any) -> Usage:
    if stats.__class__ is not dict:
        return Usage.missing()
    models: dict[str, Usage] = {}
    per_model = stats.get("models")
    if per_model.__class__ is dict:
        for name, counts in per_model.items():
            if counts.__class__ is dict:
                models[name] = _counts(counts)
    total = _counts(stats)
    return usage(total.input, total.cached, 0, total.output, models, total.complete)


def _counts(counts: dict[str, Any]) -> Usage:
    # `input` is the prompt without its cached part; `input_tokens` the whole prompt.
    fresh = counter(counts.get("input"))
    prompt = counter(counts.get("input_tokens"))
    cached = counter(counts.get("cached")) or 0
    output = counter(counts.get("output_tokens"))
    if fresh is None and prompt is not None:
        fresh = max(prompt - cached, 0)
    return usage(fresh or 0, cached, 0, output or 0, {}, fresh is not None and output is not None)


def _quota(text: str) -> list[AgentEvent]:
    lowered = text.lower()
    if not _is_quota(lowered):
        return []
    return [event("quota", text=text, reset_at=reset_after(text), code="quota")]


def reset_after(text: str, *, now: datetime | None = None) -> datetime | None:
    """The end of the delay a quota text suggests ("Suggested retry after 3600s."), from ``now``."""
    match = _RETRY_AFTER.search(text)
    if match is None:
        return None
    seconds = float(match[1]) / (1000 if match[2].lower() == "ms" else 1)
    return (now or datetime.now(UTC)) + timedelta(seconds=seconds)


_HANDLERS: dict[Any, Callable[[dict[str, Any]], list[AgentEvent]]] = {
    "init": _init,
    "message": _message,
    "tool_use": _tool_use,
    "tool_result": _tool_result,
    "error": _error,
    "result": _result,
}

# Decode one ``--output-format stream-json`` line; never raises.
events = line_decoder(_HANDLERS, _other)


def _retry(lowered: str) -> bool:
    # "Attempt 1 failed with status 500. Retrying with backoff…", "Attempt 1 failed: …. Retrying after 1069ms…"
    return "retrying" in lowered


def _is_quota(lowered: str) -> bool:
    return says_any(lowered, QUOTA_WORDS) and not says_any(lowered, CAPACITY_WORDS)


def quota(text: str) -> bool:
    """A TERMINAL quota (a retry notice never matches; a model out of capacity is an outage, not a quota)."""
    lowered = text.lower()
    return not _retry(lowered) and _is_quota(lowered)


def unavailable(text: str) -> bool:
    """A terminal outage, capacity shortage or connection failure (a retry notice never matches)."""
    lowered = text.lower()
    if _retry(lowered):
        return False
    return says_any(lowered, UNAVAILABLE_WORDS) or _STATUS_5XX.search(lowered) is not None


def credentials(variables: Mapping[str, str]) -> CredentialPlan:
    """A key variable when the agent has one; else the user's own login (``gemini``, then Login with Google)."""
    keys = {k: v for k, v in variables.items() if k in CREDENTIAL_VARIABLES}
    return CredentialPlan(variables=keys) if keys else CredentialPlan(host_login=HOST_LOGIN)


def max_attempts(variables: Mapping[str, str]) -> int:
    raw = variables.get(MAX_ATTEMPTS_VARIABLE)
    if raw is None:
        return DEFAULT_MAX_ATTEMPTS
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_ATTEMPTS_LIMIT:
        raise DispatchError(
            "configuration",
            f"{MAX_ATTEMPTS_VARIABLE} must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}",
            {"field": MAX_ATTEMPTS_VARIABLE},
        )
    return int(raw)


def configuration(variables: Mapping[str, str]) -> AgentConfiguration:
    # The auth type must be named: without it 0.61.0 refuses an API key ("Invalid auth method selected.", exit 41).
    auth = "gemini-api-key" if any(k in variables for k in CREDENTIAL_VARIABLES) else "oauth-personal"
    settings = {
        "security": {"auth": {"selectedType": auth}},
        "general": {"maxAttempts": max_attempts(variables)},
        "privacy": {"usageStatisticsEnabled": False},
    }
    return AgentConfiguration(files={SETTINGS_PATH: json.dumps(settings, indent=2)})


def slug(name: str) -> str:
    """The CLI's name for a project's directory under ``~/.gemini/tmp``: its folder's name, lower case, dashed."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", name.lower())).strip("-") or "project"


def session_globs(conversation: str) -> list[str]:
    # A session file is named by its start time and the first eight characters of its id.
    return [f".gemini/tmp/*/chats/session-*-{conversation[:8]}.jsonl"]


def restore_path(conversation: str, captured: str, workspace: Path) -> str:
    return f".gemini/tmp/{slug(workspace.name)}/chats/{Path(captured).name}"


API_URL = "https://generativelanguage.googleapis.com"
# A personal Google login talks to Code Assist, and refreshes its token at Google's OAuth endpoint.
CODE_ASSIST_URL = "https://cloudcode-pa.googleapis.com"
OAUTH_URL = "https://oauth2.googleapis.com"


def endpoints(variables: Mapping[str, str]) -> tuple[Endpoint, ...]:
    """The configured base URL, else Google's API; with the user's own login, Code Assist and where it refreshes."""
    if not any(variables.get(name) for name in CREDENTIAL_VARIABLES):
        return endpoints_of([CODE_ASSIST_URL, OAUTH_URL])
    return endpoints_of([variables.get("GOOGLE_GEMINI_BASE_URL") or API_URL])


def gemini_harness(*, executable: str | Path | None = None, approval_mode: str = "yolo") -> Harness:
    """Gemini CLI: continuation (``--resume``), no fork (it has none headless); no live input, so steering stops and
    resumes. ``approval_mode``: yolo (default: edits and workspace commands run; headless, any other mode leaves
    the shell tool out), auto_edit, default, plan."""
    if approval_mode not in APPROVAL_MODES:
        raise DispatchError(
            "configuration",
            f"approval_mode must be one of {', '.join(APPROVAL_MODES)}",
            {"field": "approval_mode"},
        )
    return Harness(
        name="gemini",
        request_fn=functools.partial(request, approval_mode=approval_mode),
        events=events,
        quota=quota,
        unavailable=unavailable,
        requires_finished_event=True,
        credentials=credentials,
        configuration=configuration,
        bootstrap=Bootstrap(PACKAGE, VERSION, "gemini"),
        endpoints=endpoints,
        resumable=True,
        forkable=False,
        live_input=False,
        session_globs=session_globs,
        restore_path=restore_path,
        executable=str(executable) if executable is not None else None,
        environment=ENVIRONMENT,
    )
