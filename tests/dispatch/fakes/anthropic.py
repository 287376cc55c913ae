"""A fake Anthropic Messages API: ``POST /v1/messages`` streamed exactly as Anthropic streams it (SSE).

Claude Code also makes side requests (a tiny quota probe, title/topic generation with a small model, token
counting). They are answered without consuming the test's plan so that the plan describes the conversation only.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.dispatch.fakes.plans import Fail, Recorded, Reply, Script, ToolCall, credential_of
from tests.dispatch.fakes.server import serve_in_thread

SHELL_TOOL = "Bash"


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _is_side_request(body: Any) -> bool:
    """Claude Code's own background calls: no tools and a tiny token budget, or a structured-output title call."""
    if not isinstance(body, dict):
        return True
    if body.get("tools"):
        return False
    return int(body.get("max_tokens") or 0) <= 1 or "title" in json.dumps(body.get("system", "")).lower()


def _usage(reply: Reply) -> dict[str, Any]:
    return {
        "input_tokens": reply.input_tokens,
        "cache_creation_input_tokens": reply.cache_created,
        "cache_read_input_tokens": reply.cached_tokens,
        "output_tokens": 1,
        "service_tier": "standard",
    }


def stream_events(reply: Reply, model: str) -> Iterator[bytes]:
    """The SSE byte chunks of one answer, block by block."""
    message_id = f"msg_{uuid.uuid4().hex[:24]}"
    yield _sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": _usage(reply),
            },
        },
    )
    blocks: list[Iterator[bytes]] = []
    if reply.thinking is not None:
        blocks.append(_thinking_block(len(blocks), reply.thinking))
    if reply.text:
        blocks.append(_text_block(len(blocks), reply.text))
    if reply.tool is not None:
        blocks.append(_tool_block(len(blocks), reply.tool))
    for block in blocks:
        yield from block
    stop_reason = "tool_use" if reply.tool is not None else "end_turn"
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> Iterator[bytes]:
    yield _sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
    for delta in deltas:
        yield _delta(index, delta)
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})


def _thinking_block(index: int, thinking: str) -> Iterator[bytes]:
    yield _sse(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": ""}},
    )
    yield _sse("ping", {"type": "ping"})
    yield _delta(index, {"type": "thinking_delta", "thinking": thinking})
    yield _delta(index, {"type": "signature_delta", "signature": "c2lnbmF0dXJl"})
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})


def _text_block(index: int, text: str) -> Iterator[bytes]:
    # Two deltas so that partial-message consumers see a real stream.
    half = max(1, len(text) // 2)
    pieces = [piece for piece in (text[:half], text[half:]) if piece]
    return _block(index, {"type": "text", "text": ""}, [{"type": "text_delta", "text": piece} for piece in pieces])


def _tool_block(index: int, tool: ToolCall) -> Iterator[bytes]:
    start = {"type": "tool_use", "id": f"toolu_{tool.call_id}", "name": tool.name or SHELL_TOOL, "input": {}}
    arguments = json.dumps(
        tool.arguments if tool.arguments is not None else {"command": tool.command, "description": "Run the command"}
    )
    half = len(arguments) // 2
    deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in (arguments[:half], arguments[half:])]
    return _block(index, start, deltas)


def message_json(reply: Reply, model: str) -> dict[str, Any]:
    """The non-streaming form of the same answer."""
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {**_usage(reply), "output_tokens": reply.output_tokens},
    }


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": f"req_{uuid.uuid4().hex[:20]}"}


# ------------------------------------------------------------------ ready-made failures


def overloaded(times: int | None = 1) -> Fail:
    return Fail(529, error_body("overloaded_error", "Overloaded"), times=times)


def rate_limited(times: int | None = 1) -> Fail:
    return Fail(
        429,
        error_body("rate_limit_error", "This request would exceed your rate limit. Please try again later."),
        headers={"retry-after": "0"},
        times=times,
    )


def server_error(times: int | None = None) -> Fail:
    return Fail(500, error_body("api_error", "Internal server error"), times=times)


def auth_failed() -> Fail:
    return Fail(401, error_body("authentication_error", "invalid x-api-key"), times=None)


def usage_limited(reset_epoch: int, times: int | None = None) -> Fail:
    """A subscription usage limit: 429 with the ``anthropic-ratelimit-unified-*`` headers Claude Code reads."""
    headers = {
        "anthropic-ratelimit-unified-status": "rejected",
        "anthropic-ratelimit-unified-reset": str(reset_epoch),
        "anthropic-ratelimit-unified-representative-claim": "five_hour",
        "anthropic-ratelimit-unified-5h-status": "rejected",
        "anthropic-ratelimit-unified-5h-reset": str(reset_epoch),
        "anthropic-ratelimit-unified-5h-utilization": "1.0",
        "anthropic-ratelimit-unified-fallback-percentage": "0.5",
        "anthropic-ratelimit-unified-overage-status": "rejected",
        "anthropic-ratelimit-unified-overage-disabled-reason": "org_level_disabled",
        "retry-after": str(max(0, reset_epoch - int(time.time()))),
    }
    return Fail(429, error_body("rate_limit_error", "Rate limited"), headers=headers, times=times)


def credit_too_low() -> Fail:
    """An API-key account without credit: Anthropic answers 400 invalid_request_error with this text."""
    message = (
        "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or "
        "purchase credits."
    )
    return Fail(400, error_body("invalid_request_error", message), times=None)


def api_usage_limit() -> Fail:
    """A workspace spend limit set by the organisation (400 with the usage-limits text)."""
    message = "You have reached your specified API usage limits. You will regain access on 2030-01-01 at 00:00 UTC."
    return Fail(400, error_body("invalid_request_error", message), times=None)


# ------------------------------------------------------------------ the app


class FakeAnthropic:
    """The scripted server. ``script`` plans answers and records requests; ``url`` is set while it runs."""

    def __init__(self, default: Reply | None = None) -> None:
        self.script = Script(default)
        self.url = ""
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route("/{path:path}", self._unknown, methods=["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"]),
            ]
        )

    @contextmanager
    def running(self) -> Iterator[FakeAnthropic]:
        with serve_in_thread(self.app) as url:
            self.url = url
            try:
                yield self
            finally:
                self.url = ""

    async def _record(self, request: Request, answered: str) -> Any:
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("x-api-key", "authorization")}
        self.script.record(
            Recorded(request.method, request.url.path, headers, body, answered, credential_of(request.headers))
        )
        return body

    async def _messages(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        model = str(body.get("model", "claude-sonnet-4-5")) if isinstance(body, dict) else "claude-sonnet-4-5"
        if _is_side_request(body):
            plan: Reply | Fail = Reply(text="Side answer", input_tokens=5, output_tokens=2)
            answered = "side"
        else:
            plan, answered = self.script.next()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("x-api-key", "authorization")}
        self.script.record(
            Recorded(request.method, request.url.path, headers, body, answered, credential_of(request.headers))
        )
        if isinstance(plan, Fail):
            return JSONResponse(plan.body, status_code=plan.status, headers=plan.headers)
        await run_in_threadpool(plan.wait_gate)
        if isinstance(body, dict) and body.get("stream"):

            async def chunks() -> AsyncIterator[bytes]:
                for chunk in stream_events(plan, model):
                    yield chunk

            return StreamingResponse(
                chunks(), media_type="text/event-stream", headers={"request-id": f"req_{uuid.uuid4().hex[:20]}"}
            )
        return JSONResponse(message_json(plan, model))

    async def _count_tokens(self, request: Request) -> Response:
        await self._record(request, "side")
        return JSONResponse({"input_tokens": 100})

    async def _unknown(self, request: Request) -> Response:
        await self._record(request, "unknown")
        return JSONResponse(error_body("not_found_error", f"Not found: {request.url.path}"), status_code=404)
