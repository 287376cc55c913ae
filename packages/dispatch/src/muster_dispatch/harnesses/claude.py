"""Claude Code: ``claude -p PROMPT --output-format stream-json --verbose`` and its stream-json lines."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from muster_dispatch.egress import Endpoint, endpoints_of
from muster_dispatch.errors import DispatchError
from muster_dispatch.events import AgentEvent, event, line_decoder
from muster_dispatch.faults import reset_from_epoch
from muster_dispatch.harness import (
    AgentConfiguration,
    Bootstrap,
    Command,
    CredentialPlan,
    Harness,
    McpServer,
    private_files_of,
)
from muster_dispatch.host_login import HostLogin, LoginFile
from muster_dispatch.inputs import AgentInput
from muster_dispatch.jsonline import text_or_none as _s
from muster_dispatch.usage import Usage, counter, usage

PACKAGE = "@anthropic-ai/claude-code"
VERSION = "2.1.328"

# Keep a headless CLI quiet and bounded: no telemetry, no self-update, few retries (they are transient anyway).
ENVIRONMENT = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}

CREDENTIAL_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")


PERMISSION_MODES = ("default", "acceptEdits", "plan", "dontAsk", "auto")


def request(input: AgentInput, model: str | None, program: str, permission_mode: str = "acceptEdits") -> Command:
    # acceptEdits: a headless agent must be able to edit the workspace (the default mode denies every write, and
    # bypassPermissions is refused as root).
    args: list[str] = ["-p"]
    stdin: str | None = None
    if input.live_input:
        # One init+result per user message; the prompt is the first message on stdin, which stays open for steering.
        args += ["--input-format", "stream-json"]
        stdin = live_message(input.prompt)
    else:
        args.append(input.prompt)
    args += ["--output-format", "stream-json", "--verbose"]
    if permission_mode != "default":
        args += ["--permission-mode", permission_mode]
    if model:
        args += ["--model", model]
    if input.continuation is not None:
        args += ["--resume", input.continuation.conversation]
        if input.continuation.fork:
            args.append("--fork-session")
    return Command(program, tuple(args), stdin=stdin, keep_stdin=input.live_input)


def live_message(text: str) -> str:
    message = {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": text}]}}
    return json.dumps(message) + "\n"


def _other(obj: dict[str, Any]) -> list[AgentEvent]:
    return [event("raw", data=obj)]


def _system(obj: dict[str, Any]) -> list[AgentEvent]:
    subtype = obj.get("subtype")
    if subtype == "init":
        return [event("conversation", id=_s(obj.get("session_id")), name=_s(obj.get("model")), data=obj)]
    if subtype == "api_retry":
        return [event("retry", text=_retry_text(obj), code=_s(obj.get("error")), data=obj)]
    if subtype == "permission_denied":
        return [
            event(
                "warning",
                text=_s(obj.get("message")) or "permission denied",
                id=_s(obj.get("tool_use_id")),
                name=_s(obj.get("tool_name")),
                code="permission_denied",
                data=obj,
            )
        ]
    return [event("raw", data=obj)]  # thinking_tokens, compact_boundary, hooks…


def _assistant(obj: dict[str, Any]) -> list[AgentEvent]:
    message = obj.get("message") or {}
    content = message.get("content") or []
    message_id = _s(message.get("id"))
    if message.get("model") == "<synthetic>" or obj.get("is_api_error_message") or obj.get("isApiErrorMessage"):
        # API failures after the CLI's own retries arrive as a synthetic assistant message.
        text = " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
        return [event("failure", text=text or "API error", code=_s(obj.get("error")) or "unknown", data=obj)]
    out: list[AgentEvent] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype == "text":
            out.append(event("text", text=block.get("text", ""), id=message_id))
        elif btype == "thinking":
            out.append(event("reasoning", text=block.get("thinking", ""), id=message_id))
        elif btype == "tool_use":
            out.append(event("tool", id=_s(block.get("id")), name=_s(block.get("name")), input=block.get("input")))
    return out


def _user(obj: dict[str, Any]) -> list[AgentEvent]:
    message = obj.get("message") or {}
    content = message.get("content")
    out: list[AgentEvent] = []
    if isinstance(content, list):
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        for block in results:
            tool_id = _s(block.get("tool_use_id"))
            failed = bool(block.get("is_error"))
            out.append(
                event(
                    "tool_result",
                    id=tool_id,
                    output=_tool_output(block.get("content")),
                    code="error" if failed else None,
                )
            )
            # A file changed only when the tool succeeded: the result names the file (Write/Edit/MultiEdit),
            # a denied or failed write has no filePath.
            detail = obj.get("tool_use_result")
            if (
                not failed
                and len(results) == 1
                and isinstance(detail, dict)
                and isinstance(detail.get("filePath"), str)
            ):
                kind = _s(detail.get("type")) or "edit"
                out.append(event("file_change", id=tool_id, name=kind, data={"path": detail["filePath"], "kind": kind}))
    return out


def _tool_output(content: Any) -> Any:
    if isinstance(content, list):
        texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        if len(texts) == len(content):
            return "\n".join(t for t in texts if isinstance(t, str))
    return content


def _stream(obj: dict[str, Any]) -> list[AgentEvent]:
    streamed = obj.get("event") or {}
    if streamed.get("type") == "content_block_delta":
        delta = streamed.get("delta") or {}
        if delta.get("type") == "text_delta":
            return [event("text_delta", text=delta.get("text", ""))]
        if delta.get("type") == "thinking_delta":
            return [event("reasoning", text=delta.get("thinking", ""), code="delta")]
    return []  # message_start / stops / signatures: the complete assistant line follows


def _result(obj: dict[str, Any]) -> list[AgentEvent]:
    get = obj.get
    session = _s(get("session_id"))
    text = _s(get("result"))
    subtype = _s(get("subtype"))
    out = [
        event("usage", usage=_usage(obj), data={"total_cost_usd": get("total_cost_usd")}),
        event("result", text=text, id=session, code=subtype, data=obj),
    ]
    # `is_error` decides, not `subtype`: API failures keep subtype "success".
    if get("is_error") or (subtype is not None and subtype.startswith("error")):
        api_error = get("api_error")
        code = _s(api_error) or (str(obj["api_error_status"]) if get("api_error_status") else None) or subtype
        message = text or _s(get("terminal_reason")) or subtype or "Claude Code reported an error"
        if isinstance(api_error, str) and api_error not in message:
            message = f"{message} ({api_error})"
        out.append(event("failure", text=message, code=code, data=obj))
    out.append(event("finished", id=session, code=subtype))
    return out


def _usage(obj: dict[str, Any]) -> Usage:
    native = obj.get("usage")
    if native.__class__ is not dict:
        return Usage.missing()
    get = native.get
    tokens_in = counter(get("input_tokens"))
    tokens_out = counter(get("output_tokens"))
    models: dict[str, Usage] = {}
    model_usage = obj.get("modelUsage")
    if model_usage.__class__ is dict:
        for name, m in model_usage.items():
            if m.__class__ is dict:
                models[name] = _model_usage(m.get)
    cached = counter(get("cache_read_input_tokens")) or 0
    created = counter(get("cache_creation_input_tokens")) or 0
    return usage(
        tokens_in or 0, cached, created, tokens_out or 0, models, tokens_in is not None and tokens_out is not None
    )


def _model_usage(get: Callable[[str], Any]) -> Usage:
    return usage(
        counter(get("inputTokens")) or 0,
        counter(get("cacheReadInputTokens")) or 0,
        counter(get("cacheCreationInputTokens")) or 0,
        counter(get("outputTokens")) or 0,
        {},
        True,
    )


def _rate_limit(obj: dict[str, Any]) -> list[AgentEvent]:
    info = obj.get("rate_limit_info") or {}
    status = info.get("status")
    kind = _s(info.get("rateLimitType"))
    reset_at = reset_from_epoch(info.get("resetsAt"))
    if status == "rejected":
        text = f"rate limit rejected ({kind or 'unknown'})"
        return [event("quota", text=text, reset_at=reset_at, code=kind, data=obj)]
    if status == "allowed_warning":
        return [event("warning", text=f"rate limit warning ({kind or 'unknown'})", code=kind, data=obj)]
    return []


_HANDLERS: dict[Any, Callable[[dict[str, Any]], list[AgentEvent]]] = {
    "assistant": _assistant,
    "user": _user,
    "stream_event": _stream,
    "result": _result,
    "system": _system,
    "rate_limit_event": _rate_limit,
}

# Decode one stream-json line; never raises.
events = line_decoder(_HANDLERS, _other)


def _retry_text(obj: dict[str, Any]) -> str:
    return (
        f"API retry {obj.get('attempt', '?')}/{obj.get('max_retries', '?')}: "
        f"{obj.get('error_status', '')} {obj.get('error', '')}".strip()
    )


_QUOTA = re.compile(
    r"usage_limit_reached|hit your (?:\S+ )?(?:\S+ )?limit|reached your specified API usage limits"
    r"|credit balance is too low|billing_error|\brate[_ ]limit(?:ed)?\b|\b429\b|rate limit rejected"
    r"|out of (?:extra )?usage|usage limit",
    re.IGNORECASE,
)
_UNAVAILABLE = re.compile(
    r"overloaded|\b529\b|API Error: 5\d\d|server_error|connection_failed|connection refused|ECONNREFUSED"
    r"|unable to connect|ECONNRESET|ETIMEDOUT|fetch failed|socket hang up|\b50[0234]\b|service unavailable",
    re.IGNORECASE,
)
_TRANSIENT = re.compile(r"^\s*API retry \d+/|retrying in|\bretry(?:ing)? attempt", re.IGNORECASE)


def quota(text: str) -> bool:
    """A TERMINAL usage or rate limit (a retry notice never matches)."""
    return not _TRANSIENT.search(text) and _QUOTA.search(text) is not None


def unavailable(text: str) -> bool:
    """A terminal outage or connection failure (a retry notice never matches)."""
    return not _TRANSIENT.search(text) and _UNAVAILABLE.search(text) is not None


# The keys of ~/.claude.json that make the CLI consider itself logged in; the rest of that file (projects, history,
# MCP servers) never leaves the host.
ACCOUNT_KEYS = ("oauthAccount", "userID", "hasCompletedOnboarding", "primaryApiKey", "customApiKeyResponses")

HOST_LOGIN = HostLogin(
    files=(
        LoginFile(".claude/.credentials.json", ".claude/.credentials.json"),
        LoginFile(".claude.json", ".claude.json", required=False, keys=ACCOUNT_KEYS),
    ),
    fix=f"run `claude`, then /login, on this machine, or give the agent one of {', '.join(CREDENTIAL_VARIABLES)}",
)


def credentials(variables: Mapping[str, str]) -> CredentialPlan:
    """A key variable when the agent has one; else the user's own login (``claude`` then ``/login``)."""
    keys = {k: v for k, v in variables.items() if k in CREDENTIAL_VARIABLES}
    return CredentialPlan(variables=keys) if keys else CredentialPlan(host_login=HOST_LOGIN)


API_URL = "https://api.anthropic.com"
OAUTH_URL = "https://platform.claude.com"  # where a subscription login refreshes its token


def endpoints(variables: Mapping[str, str]) -> tuple[Endpoint, ...]:
    """The configured ``ANTHROPIC_BASE_URL`` or Anthropic's API; with the user's login, where it refreshes."""
    login = credentials(variables).host_login is not None
    return endpoints_of([variables.get("ANTHROPIC_BASE_URL") or API_URL, OAUTH_URL if login else None])


# Skip the first-run onboarding in a fresh private home; nothing here refers to a variable, so it is encoded once
# (the configuration is asked for on every turn).
_SETTINGS = json.dumps({"hasCompletedOnboarding": True})


def configuration(variables: Mapping[str, str]) -> AgentConfiguration:
    return AgentConfiguration(files={".claude.json": _SETTINGS})


def mcp_configuration(servers: Sequence[McpServer]) -> AgentConfiguration:
    """User-scoped servers in the private ``.claude.json``, their tools allowed in the private settings (a headless
    run has nobody to ask)."""
    declared = {
        s.name: {"type": "stdio", "command": s.command, "args": list(s.args), "env": dict(s.env)} for s in servers
    }
    allowed = {"permissions": {"allow": [f"mcp__{s.name}" for s in servers]}}
    files = {".claude.json": json.dumps({"mcpServers": declared}), ".claude/settings.json": json.dumps(allowed)}
    # A server's start (a Python process) can outlast Claude's default wait on a busy machine.
    env = {"MCP_TIMEOUT": MCP_START_MS}
    return AgentConfiguration(files=files, env=env, private_files=private_files_of(servers))


MCP_START_MS = "120000"


def project_dir(workspace: Path) -> str:
    """Claude keeps sessions per project: the workspace path with every non-alphanumeric character as '-'."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(workspace))


def session_globs(conversation: str) -> list[str]:
    return [f".claude/projects/*/{conversation}.jsonl"]


def restore_path(conversation: str, captured: str, workspace: Path) -> str:
    if captured.endswith(f"{conversation}.jsonl"):
        return f".claude/projects/{project_dir(workspace)}/{conversation}.jsonl"
    return captured


def transcript_usage(text: str) -> Usage:
    """Usage from a session JSONL: the assistant messages, each message id counted once."""
    seen: dict[str, Usage] = {}
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict) or obj.get("type") != "assistant":
            continue
        message = obj.get("message") or {}
        native = message.get("usage")
        if not isinstance(native, dict) or message.get("model") == "<synthetic>":
            continue
        model = str(message.get("model") or "unknown")
        usage = Usage(
            input=counter(native.get("input_tokens")) or 0,
            cached=counter(native.get("cache_read_input_tokens")) or 0,
            cache_created=counter(native.get("cache_creation_input_tokens")) or 0,
            output=counter(native.get("output_tokens")) or 0,
        )
        seen[str(message.get("id") or len(seen))] = Usage(
            usage.input, usage.cached, usage.cache_created, usage.output, {model: usage}
        )
    total = Usage(complete=bool(seen))
    for usage in seen.values():
        total = total + usage
    return total


def claude_harness(*, executable: str | Path | None = None, permission_mode: str = "acceptEdits") -> Harness:
    """Claude Code. ``permission_mode``: acceptEdits (default: edits and workspace commands run), default, plan…"""
    if permission_mode not in PERMISSION_MODES:
        raise DispatchError(
            "configuration",
            f"permission_mode must be one of {', '.join(PERMISSION_MODES)}",
            {"field": "permission_mode"},
        )
    return Harness(
        name="claude",
        request_fn=functools.partial(request, permission_mode=permission_mode),
        events=events,
        quota=quota,
        unavailable=unavailable,
        requires_finished_event=True,
        credentials=credentials,
        configuration=configuration,
        mcp=mcp_configuration,
        endpoints=endpoints,
        bootstrap=Bootstrap(PACKAGE, VERSION, "claude"),
        resumable=True,
        forkable=True,
        live_input=True,
        live_message=live_message,
        session_globs=session_globs,
        restore_path=restore_path,
        transcript_usage=transcript_usage,
        executable=str(executable) if executable is not None else None,
        environment=ENVIRONMENT,
    )
