"""A fake OpenAI Responses API: ``POST /v1/responses`` streamed as the Responses API streams it (SSE).

Codex asks for ``/v1/models`` at start-up too; the answer names the configured model so that codex keeps it.
OpenCode (through ``@ai-sdk/openai``) asks for a session title with a tool-less request of its own: that one is
answered without consuming the test's plan, so that the plan describes the conversation only.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.dispatch.fakes.plans import Fail, Recorded, Reply, Script, ToolCall, credential_of
from tests.dispatch.fakes.server import serve_in_thread

MODEL = "gpt-5.5"


def _sse(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def _shell_tool(body: Any) -> tuple[str, str]:
    """The name and argument key of the shell tool codex offered in this request."""
    names = set()
    if isinstance(body, dict):
        for tool in body.get("tools") or []:
            if isinstance(tool, dict) and tool.get("name"):
                names.add(str(tool["name"]))
    if "exec_command" in names:
        return "exec_command", "cmd"
    if "shell_command" in names:
        return "shell_command", "command"
    return "shell", "command"


def _function_call(tool: ToolCall, body: Any) -> dict[str, Any]:
    if tool.patch is not None:  # apply_patch is a freeform (custom) tool for codex's models
        return {
            "id": f"ctc_{uuid.uuid4().hex[:24]}",
            "type": "custom_tool_call",
            "status": "completed",
            "call_id": tool.call_id,
            "name": "apply_patch",
            "input": tool.patch,
        }
    if tool.name == "tool_search":  # codex's client-side search over its deferred (MCP) tools
        return {
            "id": f"tsc_{uuid.uuid4().hex[:24]}",
            "type": "tool_search_call",
            "status": "completed",
            "execution": "client",
            "call_id": tool.call_id,
            "arguments": tool.arguments or {},
        }
    if tool.name is not None:
        named: dict[str, Any] = {
            "id": f"fc_{uuid.uuid4().hex[:24]}",
            "type": "function_call",
            "status": "completed",
            "call_id": tool.call_id,
            "name": tool.name,
            "arguments": json.dumps(tool.arguments or {}),
        }
        if tool.namespace is not None:
            named["namespace"] = tool.namespace
        return named
    name, key = _shell_tool(body)
    command: Any = tool.command if key == "cmd" or name == "shell_command" else ["bash", "-lc", tool.command]
    return {
        "id": f"fc_{uuid.uuid4().hex[:24]}",
        "type": "function_call",
        "status": "completed",
        "call_id": tool.call_id,
        "name": name,
        "arguments": json.dumps({key: command}),
    }


def stream_events(reply: Reply, body: Any) -> Iterator[bytes]:
    """The SSE byte chunks of one Responses answer."""
    response_id = f"resp_{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    base = {"id": response_id, "object": "response", "created_at": created, "model": MODEL}
    seq = 0

    def event(data: dict[str, Any]) -> bytes:
        nonlocal seq
        data["sequence_number"] = seq
        seq += 1
        return _sse(data)

    yield event({"type": "response.created", "response": {**base, "status": "in_progress", "output": []}})
    yield event({"type": "response.in_progress", "response": {**base, "status": "in_progress", "output": []}})
    output: list[dict[str, Any]] = []
    if reply.thinking is not None:
        output.append((yield from _reasoning_item(event, len(output), reply.thinking)))
    if reply.text:
        output.append((yield from _message_item(event, len(output), reply.text)))
    if reply.tool is not None:
        output.append((yield from _tool_item(event, len(output), _function_call(reply.tool, body))))
    usage = {
        "input_tokens": reply.input_tokens,
        "input_tokens_details": {"cached_tokens": reply.cached_tokens},
        "output_tokens": reply.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": reply.input_tokens + reply.output_tokens,
    }
    yield event(
        {"type": "response.completed", "response": {**base, "status": "completed", "output": output, "usage": usage}}
    )


Event = Callable[[dict[str, Any]], bytes]


def _reasoning_item(event: Event, index: int, thinking: str) -> Generator[bytes, None, dict[str, Any]]:
    item_id = f"rs_{uuid.uuid4().hex[:24]}"
    summary = [{"type": "summary_text", "text": thinking}]
    yield event(
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {"id": item_id, "type": "reasoning", "summary": []},
        }
    )
    yield event(
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": item_id,
            "output_index": index,
            "summary_index": 0,
            "delta": thinking,
        }
    )
    item = {"id": item_id, "type": "reasoning", "summary": summary}
    yield event({"type": "response.output_item.done", "output_index": index, "item": item})
    return item


def _message_item(event: Event, index: int, text: str) -> Generator[bytes, None, dict[str, Any]]:
    item_id = f"msg_{uuid.uuid4().hex[:24]}"
    where = {"item_id": item_id, "output_index": index, "content_index": 0}
    yield event(
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []},
        }
    )
    yield event(
        {"type": "response.content_part.added", **where, "part": {"type": "output_text", "text": "", "annotations": []}}
    )
    half = max(1, len(text) // 2)
    for piece in (text[:half], text[half:]):
        if piece:
            yield event({"type": "response.output_text.delta", **where, "delta": piece})
    part = {"type": "output_text", "text": text, "annotations": []}
    yield event({"type": "response.output_text.done", **where, "text": text})
    yield event({"type": "response.content_part.done", **where, "part": part})
    item = {"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
    yield event({"type": "response.output_item.done", "output_index": index, "item": item})
    return item


def _tool_item(event: Event, index: int, item: dict[str, Any]) -> Generator[bytes, None, dict[str, Any]]:
    if item["type"] == "tool_search_call":
        empty: dict[str, Any] = {}
    else:
        empty = {"arguments": ""} if "arguments" in item else {"input": ""}
    pending = {**item, "status": "in_progress", **empty}
    yield event({"type": "response.output_item.added", "output_index": index, "item": pending})
    if item["type"] == "function_call":
        where = {"item_id": item["id"], "output_index": index}
        yield event({"type": "response.function_call_arguments.delta", **where, "delta": item["arguments"]})
        yield event({"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]})
    yield event({"type": "response.output_item.done", "output_index": index, "item": item})
    return item


def _is_side_request(body: Any) -> bool:
    """OpenCode's title request: a "title generator" instruction and no tools."""
    if not isinstance(body, dict) or body.get("tools"):
        return False
    return "title generator" in json.dumps(body.get("input", ""))[:400]


def error_body(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"type": kind, "code": kind, "message": message, "param": None, **extra}}


# ------------------------------------------------------------------ ready-made failures


def rate_limited(times: int | None = 1) -> Fail:
    return Fail(
        429,
        error_body("rate_limit_exceeded", "Rate limit reached for requests. Please try again in 20ms."),
        headers={"retry-after-ms": "10"},
        times=times,
    )


def overloaded(times: int | None = None) -> Fail:
    return Fail(
        503, error_body("server_is_overloaded", "The server is overloaded. Please try again later."), times=times
    )


def server_error(times: int | None = None) -> Fail:
    return Fail(500, error_body("server_error", "The server had an error while processing your request."), times=times)


def auth_failed() -> Fail:
    return Fail(
        401,
        error_body("invalid_api_key", "Incorrect API key provided: sk-test. You can find your API key at ..."),
        times=None,
    )


def usage_limited(reset_epoch: int, times: int | None = None) -> Fail:
    """ChatGPT-plan usage limit: 429 of type ``usage_limit_reached`` with the reset time codex prints."""
    body = {
        "error": {
            "type": "usage_limit_reached",
            "message": "The usage limit has been reached",
            "plan_type": "plus",
            "resets_at": reset_epoch,
            "resets_in_seconds": max(0, reset_epoch - int(time.time())),
        }
    }
    return Fail(429, body, times=times)


def insufficient_quota(times: int | None = None) -> Fail:
    return Fail(
        429,
        error_body(
            "insufficient_quota", "You exceeded your current quota, please check your plan and billing details."
        ),
        times=times,
    )


# ------------------------------------------------------------------ the app


class FakeOpenAI:
    """The scripted server. ``script`` plans answers and records requests; ``url`` is set while it runs."""

    def __init__(self, default: Reply | None = None) -> None:
        self.script = Script(default)
        self.url = ""
        self.app = Starlette(
            routes=[
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/{path:path}", self._unknown, methods=["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"]),
            ]
        )

    @contextmanager
    def running(self) -> Iterator[FakeOpenAI]:
        with serve_in_thread(self.app) as url:
            self.url = url
            try:
                yield self
            finally:
                self.url = ""

    @staticmethod
    def _headers(request: Request) -> dict[str, str]:
        return {k: v for k, v in request.headers.items() if k.lower() not in ("authorization", "x-api-key")}

    async def _body(self, request: Request) -> Any:
        raw = await request.body()
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode(errors="replace")

    async def _responses(self, request: Request) -> Response:
        body = await self._body(request)
        if _is_side_request(body):
            self.script.record(Recorded(request.method, request.url.path, self._headers(request), body, "side"))
            title = Reply(text="Muster test")
            return StreamingResponse(stream_events(title, body), media_type="text/event-stream")
        plan, answered = self.script.next()
        self.script.record(
            Recorded(
                request.method, request.url.path, self._headers(request), body, answered, credential_of(request.headers)
            )
        )
        if isinstance(plan, Fail):
            return JSONResponse(plan.body, status_code=plan.status, headers=plan.headers)
        reply = plan
        await run_in_threadpool(reply.wait_gate)

        async def chunks() -> AsyncIterator[bytes]:
            for chunk in stream_events(reply, body):
                yield chunk

        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def _models(self, request: Request) -> Response:
        self.script.record(
            Recorded(
                request.method, request.url.path, self._headers(request), None, "side", credential_of(request.headers)
            )
        )
        return JSONResponse(
            {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "openai"}]}
        )

    async def _unknown(self, request: Request) -> Response:
        body = await self._body(request)
        self.script.record(
            Recorded(
                request.method,
                request.url.path,
                self._headers(request),
                body,
                "unknown",
                credential_of(request.headers),
            )
        )
        return JSONResponse(error_body("not_found", f"Not found: {request.url.path}"), status_code=404)
