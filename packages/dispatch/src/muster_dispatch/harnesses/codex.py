"""Codex: ``codex exec --json --skip-git-repo-check PROMPT`` and its JSONL thread events.

Custom model servers are configured through a ``config.toml`` in the private ``CODEX_HOME`` (``<home>/.codex``),
written from the agent variables (see ``configuration``):

- ``MUSTER_CODEX_BASE_URL`` (or ``OPENAI_BASE_URL``; e.g. ``http://127.0.0.1:PORT/v1``): defines the model
  provider ``muster`` (``wire_api = "responses"``, ``supports_websockets = false``) and selects it;
- ``MUSTER_CODEX_ENV_KEY`` (default ``OPENAI_API_KEY``): the variable holding the key; when it is not defined the
  provider uses the user's login (``auth.json``, see ``credentials``);
- ``MUSTER_CODEX_MAX_RETRIES`` (default 1): ``request_max_retries`` and ``stream_max_retries``;
- ``MUSTER_CODEX_IDLE_TIMEOUT_MS`` (default 30000): ``stream_idle_timeout_ms``;
- ``MUSTER_CODEX_SANDBOX`` (optional): ``sandbox_mode`` (read-only | workspace-write | danger-full-access).
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from muster_dispatch.egress import Endpoint, endpoints_of
from muster_dispatch.errors import DispatchError
from muster_dispatch.events import AgentEvent, event, line_decoder
from muster_dispatch.harness import (
    AgentConfiguration,
    Bootstrap,
    Command,
    CredentialPlan,
    Harness,
    McpServer,
    private_files_of,
)
from muster_dispatch.harnesses.codex_common import (
    quota,
    retry_notice,
    shell_result,
    turn_failure,
    unavailable,
    usage_from_counts,
)
from muster_dispatch.harnesses.codex_live import app_server_driver, decode_app_server
from muster_dispatch.host_login import HostLogin, LoginFile
from muster_dispatch.inputs import AgentInput
from muster_dispatch.jsonline import parse
from muster_dispatch.jsonline import text_or_none as _s
from muster_dispatch.usage import Usage

PACKAGE = "@openai/codex"
VERSION = "0.169.0"

CREDENTIAL_VARIABLES = ("OPENAI_API_KEY", "CODEX_API_KEY")

ENVIRONMENT = {"NO_COLOR": "1"}


def request(input: AgentInput, model: str | None, program: str) -> Command:
    if input.live_input:
        # The app-server driver sends the model, prompt and thread over stdin (see codex_live).
        return Command(program, ("app-server",), stdin="", keep_stdin=True)
    # A fork arrives here already prepared by ``fork`` (a resume of the child thread).
    args: list[str] = ["exec", "--json", "--skip-git-repo-check"]
    if model:
        args += ["--model", model]
    if input.continuation is not None:
        args += ["resume", input.continuation.conversation]
    args.append(input.prompt)
    return Command(program, tuple(args))


def _other(obj: dict[str, Any]) -> list[AgentEvent]:
    if "type" not in obj and ("method" in obj or "id" in obj):
        return decode_app_server(obj)  # live input: `codex app-server` JSON-RPC lines
    return [event("raw", data=obj)]


# Events are immutable: the end of every turn can share one.
_FINISHED = event("finished")
_FAILED = event("finished", code="failed")


def _item_line(obj: dict[str, Any]) -> list[AgentEvent]:
    item = obj.get("item")
    if item.__class__ is not dict:
        return [event("raw", data=obj)]
    kind = obj["type"]
    decoder = _ITEMS.get(item.get("type") or item.get("item_type"))
    if decoder is None:
        return [event("raw", data={"type": kind, "item": item})]
    return decoder(kind, item)


def _turn_completed(obj: dict[str, Any]) -> list[AgentEvent]:
    return [event("usage", usage=_usage(obj.get("usage"))), _FINISHED]


def _turn_failed(obj: dict[str, Any]) -> list[AgentEvent]:
    error = obj.get("error") or {}
    message = _s(error.get("message") if isinstance(error, dict) else None) or "turn failed"
    out = turn_failure(message, obj)
    out.append(_FAILED)
    return out


def _thread_started(obj: dict[str, Any]) -> list[AgentEvent]:
    thread = obj.get("thread_id")
    return [event("conversation", None, thread if thread.__class__ is str else None, data=obj)]


def _turn_started(obj: dict[str, Any]) -> list[AgentEvent]:
    return []


def _error(obj: dict[str, Any]) -> list[AgentEvent]:
    message = obj.get("message")
    if message.__class__ is not str:
        message = ""
    if retry_notice(message.lower()):
        return [event("retry", text=message, data=obj)]
    return [event("failure", text=message or "error", code="error", data=obj)]


# Item decoders by item type: (line type, item) -> events. "item.updated" lines carry nothing we need.
_ItemFn = Callable[[str, dict[str, Any]], list[AgentEvent]]


def _message(kind: str, item: dict[str, Any]) -> list[AgentEvent]:
    if kind != "item.completed":
        return []
    text = item.get("text")
    return [event("text", text=text if text.__class__ is str else "", id=_s(item.get("id")))]


def _reasoning(kind: str, item: dict[str, Any]) -> list[AgentEvent]:
    if kind != "item.completed":
        return []
    text = item.get("text")
    return [event("reasoning", text=text if text.__class__ is str else "", id=_s(item.get("id")))]


def _command(kind: str, item: dict[str, Any]) -> list[AgentEvent]:
    item_id = _s(item.get("id"))
    if kind == "item.started":
        return [event("tool", id=item_id, name="shell", input={"command": item.get("command")})]
    if kind != "item.completed":
        return []
    return [shell_result(item_id, item.get("exit_code"), item.get("status"), item.get("aggregated_output"))]


def _file_change(kind: str, item: dict[str, Any]) -> list[AgentEvent]:
    if kind != "item.completed":
        return []
    return [event("file_change", id=_s(item.get("id")), data=item.get("changes"))]


def _mcp(kind: str, item: dict[str, Any]) -> list[AgentEvent]:
    item_id = _s(item.get("id"))
    name = f"{item.get('server')}.{item.get('tool')}"
    if kind == "item.started":
        return [event("tool", id=item_id, name=name, input=item.get("arguments"))]
    if kind != "item.completed":
        return []
    code = "error" if item.get("error") or item.get("status") == "failed" else None
    return [event("tool_result", id=item_id, name=name, output=item.get("result"), code=code)]


def _web_search(kind: str, item: dict[str, Any]) -> list[AgentEvent]:
    item_id = _s(item.get("id"))
    if kind == "item.started":
        return [event("tool", id=item_id, name="web_search", input={"query": item.get("query")})]
    if kind != "item.completed":
        return []
    return [event("tool_result", id=item_id, name="web_search", data=item)]


def _error_item(kind: str, item: dict[str, Any]) -> list[AgentEvent]:
    # A non-fatal notice: the turn goes on; `turn.failed` is the failure.
    if kind != "item.completed":
        return []
    return [event("warning", text=_s(item.get("message")) or "", id=_s(item.get("id")), data=item)]


def _todo_list(kind: str, item: dict[str, Any]) -> list[AgentEvent]:
    return [event("raw", data=item)] if kind == "item.completed" else []


_ITEMS: dict[Any, _ItemFn] = {
    "agent_message": _message,
    "assistant_message": _message,  # older builds
    "reasoning": _reasoning,
    "command_execution": _command,
    "file_change": _file_change,
    "mcp_tool_call": _mcp,
    "web_search": _web_search,
    "error": _error_item,
    "todo_list": _todo_list,
}


_HANDLERS: dict[Any, Callable[[dict[str, Any]], list[AgentEvent]]] = {
    "item.completed": _item_line,
    "item.started": _item_line,
    "item.updated": _item_line,
    "turn.completed": _turn_completed,
    "turn.failed": _turn_failed,
    "thread.started": _thread_started,
    "turn.started": _turn_started,
    "error": _error,
}

# Decode one ``codex exec --json`` line; never raises.
events = line_decoder(_HANDLERS, _other)


def _usage(native: Any) -> Usage:
    if native.__class__ is not dict:
        return Usage.missing()
    get = native.get
    return usage_from_counts(
        get("input_tokens"), get("cached_input_tokens"), get("cache_write_input_tokens"), get("output_tokens")
    )


HOST_LOGIN = HostLogin(
    files=(LoginFile(".codex/auth.json", ".codex/auth.json"),),
    fix=f"run `codex login` on this machine, or give the agent one of {', '.join(CREDENTIAL_VARIABLES)}",
)


def credentials(variables: Mapping[str, str]) -> CredentialPlan:
    """A key variable when the agent has one; else the user's own login (``codex login``: ChatGPT or a stored key)."""
    wanted = {*CREDENTIAL_VARIABLES, variables.get("MUSTER_CODEX_ENV_KEY", "OPENAI_API_KEY")}
    keys = {k: v for k, v in variables.items() if k in wanted}
    return CredentialPlan(variables=keys) if keys else CredentialPlan(host_login=HOST_LOGIN)


API_URL = "https://api.openai.com/v1"
CHATGPT_URL = "https://chatgpt.com/backend-api/codex"  # the model endpoint of a ChatGPT login
AUTH_URL = "https://auth.openai.com"  # where a login refreshes its token


def endpoints(variables: Mapping[str, str]) -> tuple[Endpoint, ...]:
    """The configured base URL, else OpenAI's API and ChatGPT's (which one a login uses is in its file, not read
    here); with the user's login, where it refreshes."""
    base = variables.get("MUSTER_CODEX_BASE_URL") or variables.get("OPENAI_BASE_URL")
    login = credentials(variables).host_login is not None
    return endpoints_of([*([base] if base else [API_URL, CHATGPT_URL]), AUTH_URL if login else None])


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def configuration(variables: Mapping[str, str]) -> AgentConfiguration:
    lines: list[str] = ['approval_policy = "never"']
    sandbox = variables.get("MUSTER_CODEX_SANDBOX")
    if sandbox:
        if sandbox not in ("read-only", "workspace-write", "danger-full-access"):
            raise DispatchError("configuration", f"MUSTER_CODEX_SANDBOX: unknown sandbox mode {sandbox!r}")
        lines.append(f"sandbox_mode = {_toml(sandbox)}")
    base_url = variables.get("MUSTER_CODEX_BASE_URL") or variables.get("OPENAI_BASE_URL")
    if base_url:
        env_key = variables.get("MUSTER_CODEX_ENV_KEY", "OPENAI_API_KEY")
        if "MUSTER_CODEX_ENV_KEY" in variables and env_key not in variables:
            raise DispatchError(
                "configuration",
                f"MUSTER_CODEX_ENV_KEY names {env_key}, which is not defined",
                {"field": env_key},
            )
        # Without a key variable the provider takes the user's login (auth.json, copied from the host).
        auth = f"env_key = {_toml(env_key)}" if env_key in variables else "requires_openai_auth = true"
        retries = _number(variables, "MUSTER_CODEX_MAX_RETRIES", "1")
        idle = _number(variables, "MUSTER_CODEX_IDLE_TIMEOUT_MS", "30000")
        lines.insert(0, 'model_provider = "muster"')
        lines += [
            "",
            "[model_providers.muster]",
            'name = "muster"',
            f"base_url = {_toml(base_url)}",
            'wire_api = "responses"',
            auth,
            f"request_max_retries = {retries}",
            f"stream_max_retries = {retries}",
            f"stream_idle_timeout_ms = {idle}",
            "supports_websockets = false",
        ]
    return AgentConfiguration(files={".codex/config.toml": "\n".join(lines) + "\n"}, env={"CODEX_HOME": "~/.codex"})


def mcp_configuration(servers: Sequence[McpServer]) -> AgentConfiguration:
    """``[mcp_servers.NAME]`` tables appended to the private ``config.toml``."""
    lines: list[str] = []
    for server in servers:
        args = ", ".join(_toml(arg) for arg in server.args)
        lines += [f"[mcp_servers.{server.name}]", f"command = {_toml(server.command)}", f"args = [{args}]"]
        lines += ["startup_timeout_sec = 120", "tool_timeout_sec = 120", ""]
        if server.env:
            lines.append(f"[mcp_servers.{server.name}.env]")
            lines += [f"{name} = {_toml(value)}" for name, value in server.env.items()]
            lines.append("")
    return AgentConfiguration(files={".codex/config.toml": "\n".join(lines)}, private_files=private_files_of(servers))


def _number(variables: Mapping[str, str], name: str, default: str) -> str:
    value = variables.get(name, default)
    if not value.isdigit():
        raise DispatchError("configuration", f"{name} must be a non-negative integer", {"field": name})
    return value


def session_globs(conversation: str) -> list[str]:
    return [f".codex/sessions/**/rollout-*{conversation}.jsonl"]


def restore_path(conversation: str, captured: str, workspace: Path) -> str:
    return captured  # codex finds a thread by id anywhere under sessions/


def fork(conversation: str, files: Mapping[str, bytes]) -> tuple[str, dict[str, bytes]]:
    """Fork a thread: its rollout copied under a new thread id (codex resumes any rollout it finds by id)."""
    child = _uuid7()
    old, new = conversation.encode(), child.encode()
    out: dict[str, bytes] = {}
    for path, content in files.items():
        if not path.endswith(f"{conversation}.jsonl"):
            continue
        out[path[: -len(f"{conversation}.jsonl")] + f"{child}.jsonl"] = content.replace(old, new)
    if not out:
        raise DispatchError("session", f"no rollout of thread {conversation} to fork", {"field": "conversation"})
    return child, out


def _uuid7() -> str:
    """A time-ordered UUID (version 7), the shape of codex's own thread ids."""
    value = (int(time.time() * 1000) & ((1 << 48) - 1)) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=value))


def transcript_usage(text: str) -> Usage:
    """The thread's running total from the last ``token_count`` event of a rollout file (read from the end: a long
    thread's rollout is large and this runs after every turn)."""
    for line in reversed(text.splitlines()):
        if "token_count" not in line:
            continue
        obj = parse(line)
        payload = obj.get("payload") if isinstance(obj, dict) else None
        if isinstance(payload, dict) and payload.get("type") == "token_count":
            info = payload.get("info")
            if isinstance(info, dict) and isinstance(info.get("total_token_usage"), dict):
                return _usage(info["total_token_usage"])
    return Usage.missing()


def codex_harness(*, executable: str | Path | None = None) -> Harness:
    return Harness(
        name="codex",
        request_fn=request,
        events=events,
        quota=quota,
        unavailable=unavailable,
        requires_finished_event=True,
        credentials=credentials,
        configuration=configuration,
        mcp=mcp_configuration,
        endpoints=endpoints,
        bootstrap=Bootstrap(PACKAGE, VERSION, "codex"),
        resumable=True,
        forkable=True,
        fork=fork,
        live_input=True,
        live_driver=app_server_driver,
        cumulative_usage=True,
        session_globs=session_globs,
        restore_path=restore_path,
        transcript_usage=transcript_usage,
        executable=str(executable) if executable is not None else None,
        environment=ENVIRONMENT,
    )
