"""OpenCode: ``opencode run --format json PROMPT`` and its JSON event lines (``{type, timestamp, sessionID, part}``).

OpenCode prints no end-of-turn event: the ``step_finish`` whose reason is ``stop`` ends a turn (a step that ends in
tool calls is followed by another). Its session id is on every line. A custom model server is configured through
an ``opencode.json`` in the private home (``~/.config/opencode``), written from the agent variables:

- ``MUSTER_OPENCODE_BASE_URL`` (e.g. ``http://127.0.0.1:PORT/v1``): defines the provider ``muster`` and selects it;
- ``MUSTER_OPENCODE_MODEL``: the model of that provider (required with the URL);
- ``MUSTER_OPENCODE_ENV_KEY`` (default ``OPENAI_API_KEY``): the variable holding the key, referenced as
  ``{env:NAME}`` so the key is never written to disk; it must be defined;
- ``MUSTER_OPENCODE_NPM`` (default ``@ai-sdk/openai``, the Responses API): the AI SDK provider package
  (``@ai-sdk/openai-compatible`` for chat completions, ``@ai-sdk/anthropic`` for Anthropic messages).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from muster_dispatch.egress import Endpoint, endpoints_of
from muster_dispatch.errors import DispatchError
from muster_dispatch.events import AgentEvent, event, line_decoder
from muster_dispatch.faults import reset_in, says_any
from muster_dispatch.harness import (
    AgentConfiguration,
    Bootstrap,
    Command,
    CredentialPlan,
    Harness,
    McpServer,
    private_files_of,
)
from muster_dispatch.inputs import AgentInput
from muster_dispatch.jsonline import text_or_none as _s
from muster_dispatch.usage import Usage, counter, usage

PACKAGE = "opencode-ai"
VERSION = "1.18.33"

CREDENTIAL_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY")
# The host login file of `opencode auth login` (API keys and OAuth tokens per provider).
AUTH_FILE = ".local/share/opencode/auth.json"

ENVIRONMENT = {"NO_COLOR": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1"}

# Substring tests on the lower-cased text (cheaper than an IGNORECASE alternation on the decode path).
QUOTA_WORDS = (
    "exceeded your current quota",
    "insufficient_quota",
    "quota exceeded",
    "usage limit",
    "rate limit",
    "too many requests",
    "(http 429)",
    "credit balance is too low",
)
UNAVAILABLE_WORDS = (
    "overloaded",
    "at capacity",
    "service unavailable",
    "internal server error",
    "server_error",
    "bad gateway",
    "gateway timeout",
    "connection refused",
    "econnrefused",
    "unable to connect",
    "econnreset",
    "fetch failed",
    "(http 500)",
    "(http 502)",
    "(http 503)",
    "(http 504)",
    "(http 529)",
)


def request(input: AgentInput, model: str | None, program: str) -> Command:
    args: list[str] = ["run", "--format", "json"]
    if model:
        args += ["--model", model]
    if input.continuation is not None:
        args += ["--session", input.continuation.conversation]
        if input.continuation.fork:
            args.append("--fork")
    # The prompt goes on stdin: `opencode run` quotes a message argument that contains a space.
    return Command(program, tuple(args), stdin=input.prompt)


def _other(obj: dict[str, Any]) -> list[AgentEvent]:
    return [event("raw", data=obj)]


def _session(obj: dict[str, Any]) -> str | None:
    return _s(obj.get("sessionID"))


def _step_start(obj: dict[str, Any]) -> list[AgentEvent]:
    return [event("conversation", id=_session(obj), data=obj)]


def _text(obj: dict[str, Any]) -> list[AgentEvent]:
    part = obj["part"]
    return [event("text", text=_s(part.get("text")) or "", id=_s(part.get("id")))]


def _reasoning(obj: dict[str, Any]) -> list[AgentEvent]:
    part = obj["part"]
    return [event("reasoning", text=_s(part.get("text")) or "", id=_s(part.get("id")))]


def _tool_use(obj: dict[str, Any]) -> list[AgentEvent]:
    part = obj["part"]
    state = part.get("state") or {}
    call_id = _s(part.get("callID"))
    name = _s(part.get("tool"))
    tool_input = state.get("input")
    out = [event("tool", id=call_id, name=name, input=tool_input)]
    status = state.get("status")
    if status in ("completed", "error"):
        failed = status == "error"
        output = state.get("error") if failed else state.get("output")
        out.append(event("tool_result", id=call_id, name=name, output=output, code="error" if failed else None))
        path = tool_input.get("filePath") if isinstance(tool_input, dict) else None
        if not failed and name in ("write", "edit", "patch") and isinstance(path, str):
            out.append(event("file_change", id=call_id, name=name, data={"path": path, "kind": name}))
    return out


def _step_finish(obj: dict[str, Any]) -> list[AgentEvent]:
    part = obj["part"]
    out = [event("usage", usage=_usage(part.get("tokens")), data={"cost": part.get("cost")})]
    if part.get("reason") == "stop":
        out.append(event("finished", id=_session(obj), code="stop"))
    return out


def _usage(tokens: Any) -> Usage:
    if tokens.__class__ is not dict:
        return Usage.missing()
    cache = tokens.get("cache")
    cache = cache if cache.__class__ is dict else {}
    tokens_in = counter(tokens.get("input"))
    tokens_out = counter(tokens.get("output"))
    return usage(
        tokens_in or 0,
        counter(cache.get("read")) or 0,
        counter(cache.get("write")) or 0,
        tokens_out or 0,
        {},
        tokens_in is not None and tokens_out is not None,
    )


def _error(obj: dict[str, Any]) -> list[AgentEvent]:
    error = obj.get("error")
    error = error if isinstance(error, dict) else {}
    data = error.get("data")
    data = data if isinstance(data, dict) else {}
    status = data.get("statusCode")
    message = _s(data.get("message")) or _s(error.get("name")) or "OpenCode reported an error"
    if isinstance(status, int):
        message = f"{message} (HTTP {status})"
    code = _s(error.get("name")) or "error"
    # A turn that failed before its first step still names its session.
    out = [event("conversation", id=_session(obj)), event("failure", text=message, code=code, data=obj)]
    lowered = message.lower()
    if says_any(lowered, QUOTA_WORDS):
        out.append(event("quota", text=message, reset_at=reset_in(message, lowered), code=code))
    return out


_HANDLERS: dict[Any, Callable[[dict[str, Any]], list[AgentEvent]]] = {
    "step_start": _step_start,
    "text": _text,
    "reasoning": _reasoning,
    "tool_use": _tool_use,
    "step_finish": _step_finish,
    "error": _error,
}

# Decode one ``opencode run --format json`` line; never raises.
events = line_decoder(_HANDLERS, _other)


def _retry(lowered: str) -> bool:
    return "retrying" in lowered or lowered.lstrip().startswith("retry")


def quota(text: str) -> bool:
    """A TERMINAL usage or rate limit (a retry notice never matches)."""
    lowered = text.lower()
    return not _retry(lowered) and says_any(lowered, QUOTA_WORDS)


def unavailable(text: str) -> bool:
    """A terminal outage or connection failure (a retry notice never matches)."""
    lowered = text.lower()
    return not _retry(lowered) and says_any(lowered, UNAVAILABLE_WORDS)


def credentials(variables: Mapping[str, str]) -> CredentialPlan:
    wanted = {*CREDENTIAL_VARIABLES, variables.get("MUSTER_OPENCODE_ENV_KEY", "OPENAI_API_KEY")}
    passed = {k: v for k, v in variables.items() if k in wanted}
    # Without a key variable, the host's `opencode auth login` file is the login.
    host = {} if passed else {str(Path.home() / AUTH_FILE): AUTH_FILE}
    return CredentialPlan(variables=passed, host_files=host)


# The vendor API behind each key variable; OpenCode also reads its model catalog from models.dev.
VENDOR_URLS = {
    "OPENAI_API_KEY": "https://api.openai.com",
    "ANTHROPIC_API_KEY": "https://api.anthropic.com",
    "GEMINI_API_KEY": "https://generativelanguage.googleapis.com",
    "OPENROUTER_API_KEY": "https://openrouter.ai",
}
CATALOG_URL = "https://models.dev"


def endpoints(variables: Mapping[str, str]) -> tuple[Endpoint, ...]:
    """The configured base URL; else the API of each vendor whose key the agent has (every vendor's with the login
    file, which may hold any of them); and the model catalog."""
    base = variables.get("MUSTER_OPENCODE_BASE_URL")
    if base:
        return endpoints_of([base, CATALOG_URL])
    keyed = [url for name, url in VENDOR_URLS.items() if name in variables]
    return endpoints_of([*(keyed or VENDOR_URLS.values()), CATALOG_URL])


def configuration(variables: Mapping[str, str]) -> AgentConfiguration:
    settings: dict[str, Any] = {"$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled"}
    base_url = variables.get("MUSTER_OPENCODE_BASE_URL")
    if base_url:
        env_key = variables.get("MUSTER_OPENCODE_ENV_KEY", "OPENAI_API_KEY")
        model = variables.get("MUSTER_OPENCODE_MODEL")
        if env_key not in variables:
            raise DispatchError(
                "configuration",
                f"MUSTER_OPENCODE_BASE_URL needs the key variable {env_key} (MUSTER_OPENCODE_ENV_KEY) to be defined",
                {"field": env_key},
            )
        if not model:
            raise DispatchError(
                "configuration",
                "MUSTER_OPENCODE_BASE_URL needs MUSTER_OPENCODE_MODEL",
                {"field": "MUSTER_OPENCODE_MODEL"},
            )
        settings["provider"] = {
            "muster": {
                "npm": variables.get("MUSTER_OPENCODE_NPM", "@ai-sdk/openai"),
                "name": "muster",
                "options": {"baseURL": base_url, "apiKey": f"{{env:{env_key}}}"},
                "models": {model: {"name": model}},
            }
        }
        settings["model"] = f"muster/{model}"
    return AgentConfiguration(files={".config/opencode/opencode.json": json.dumps(settings, indent=2)})


def mcp_configuration(servers: Sequence[McpServer]) -> AgentConfiguration:
    """Local servers under ``mcp`` in the private ``opencode.json``."""
    declared = {
        s.name: {"type": "local", "command": [s.command, *s.args], "environment": dict(s.env), "enabled": True}
        for s in servers
    }
    files = {".config/opencode/opencode.json": json.dumps({"mcp": declared}, indent=2)}
    return AgentConfiguration(files=files, private_files=private_files_of(servers))


def session_globs(conversation: str) -> list[str]:
    # Every session lives in one SQLite database (with its write-ahead log).
    return [".local/share/opencode/opencode.db*"]


def restore_path(conversation: str, captured: str, workspace: Path) -> str:
    return captured


def opencode_harness(*, executable: str | Path | None = None) -> Harness:
    """OpenCode: continuation (``--session``) and fork (``--fork``); no live input, so steering stops and resumes."""
    return Harness(
        name="opencode",
        request_fn=request,
        events=events,
        quota=quota,
        unavailable=unavailable,
        requires_finished_event=True,
        credentials=credentials,
        configuration=configuration,
        mcp=mcp_configuration,
        endpoints=endpoints,
        bootstrap=Bootstrap(PACKAGE, VERSION, "opencode"),
        resumable=True,
        forkable=True,
        live_input=False,
        session_globs=session_globs,
        restore_path=restore_path,
        executable=str(executable) if executable is not None else None,
        environment=ENVIRONMENT,
    )
