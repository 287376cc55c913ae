"""A fake Gemini API: ``POST /v1beta/models/MODEL:streamGenerateContent?alt=sse`` streamed as Gemini streams it.

Gemini CLI reaches it through ``GOOGLE_GEMINI_BASE_URL``. Its non-streaming calls (``:generateContent`` for its own
checks, ``:countTokens``) are side requests: answered without consuming the test's plan, so that the plan describes
the conversation only.

Beside ``Reply`` and ``Fail`` a plan may hold a ``CutOff``: a stream that sends some text and then ends without a
finish reason (``endless``: sends the text and then nothing, holding the connection open); it stays at the head of
the plan unless ``forever`` is False.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.dispatch.fakes.plans import Fail, Recorded, Reply, Script, ToolCall
from tests.dispatch.fakes.server import serve_in_thread

MODEL = "gemini-2.5-pro"
SHELL_TOOL = "run_shell_command"
KEY_HEADER = "x-goog-api-key"


@dataclass(frozen=True)
class CutOff:
    """A stream that stops mid-answer: ``text`` then the end of the body with no finish reason; ``endless``: the
    text and then silence, the connection held open."""

    text: str = "I was say"
    endless: bool = False
    forever: bool = True  # every later request is cut off too (the CLI retries a cut-off stream)


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\r\n\r\n".encode()


def _usage(reply: Reply) -> dict[str, Any]:
    return {
        "promptTokenCount": reply.input_tokens + reply.cached_tokens,
        "candidatesTokenCount": reply.output_tokens,
        "totalTokenCount": reply.input_tokens + reply.cached_tokens + reply.output_tokens,
        "cachedContentTokenCount": reply.cached_tokens,
    }


def _chunk(parts: list[dict[str, Any]], *, finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    data: dict[str, Any] = {"candidates": [candidate], "modelVersion": MODEL, "responseId": uuid.uuid4().hex[:20]}
    if usage is not None:
        data["usageMetadata"] = usage
    return _sse(data)


def _function_call(tool: ToolCall) -> dict[str, Any]:
    if tool.name is not None:
        return {"functionCall": {"name": tool.name, "args": tool.arguments or {}}}
    return {"functionCall": {"name": SHELL_TOOL, "args": {"command": tool.command, "description": "run it"}}}


def stream_events(reply: Reply) -> Iterator[bytes]:
    """The SSE chunks of one answer: thought, the text in two halves, a function call, the finish with usage."""
    if reply.thinking is not None:
        yield _chunk([{"text": reply.thinking, "thought": True}])
    text = reply.text
    half = max(1, len(text) // 2)
    pieces = [p for p in (text[:half], text[half:]) if p]
    for piece in pieces[:-1]:
        yield _chunk([{"text": piece}])
    last: list[dict[str, Any]] = [{"text": pieces[-1]}] if pieces else []
    if reply.tool is not None:
        last.append(_function_call(reply.tool))
    yield _chunk(last or [{"text": ""}], finish="STOP", usage=_usage(reply))


def error_body(code: int, status: str, message: str, *details: dict[str, Any]) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status, "details": list(details)}}


# ------------------------------------------------------------------ ready-made failures

QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. For more information on this "
    "error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
)


def quota_exhausted(times: int | None = None) -> Fail:
    """A daily quota: RESOURCE_EXHAUSTED with a per-day QuotaFailure (Gemini CLI gives up at once)."""
    violation = {
        "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
        "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
        "quotaDimensions": {"location": "global", "model": MODEL},
        "quotaValue": "50",
    }
    quota = {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [violation]}
    help_ = {
        "@type": "type.googleapis.com/google.rpc.Help",
        "links": [{"description": "Learn more", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}],
    }
    return Fail(429, error_body(429, "RESOURCE_EXHAUSTED", QUOTA_MESSAGE, quota, help_), times=times)


def capacity_exhausted(times: int | None = None) -> Fail:
    """No capacity for the model: 503 with MODEL_CAPACITY_EXHAUSTED (an outage, not the user's quota)."""
    info = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "MODEL_CAPACITY_EXHAUSTED",
        "domain": "cloudcode-pa.googleapis.com",
        "metadata": {"model": MODEL},
    }
    message = f"No capacity available for model {MODEL} on the server"
    return Fail(503, error_body(503, "UNAVAILABLE", message, info), times=times)


def server_error(times: int | None = 1) -> Fail:
    return Fail(500, error_body(500, "INTERNAL", "An internal error has occurred."), times=times)


def overloaded(times: int | None = None) -> Fail:
    return Fail(503, error_body(503, "UNAVAILABLE", "The model is overloaded. Please try again later."), times=times)


# ------------------------------------------------------------------ the app


class FakeGemini:
    """The scripted server. ``script`` plans answers and records requests; ``url`` is set while it runs."""

    def __init__(self, default: Reply | None = None) -> None:
        self.script = Script(default)
        self.url = ""
        self.app = Starlette(
            routes=[
                Route("/{version}/models/{call:path}", self._models, methods=["POST"]),
                Route("/{path:path}", self._unknown, methods=["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"]),
            ]
        )

    @contextmanager
    def running(self) -> Iterator[FakeGemini]:
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
        headers = {k: v for k, v in request.headers.items() if k.lower() not in (KEY_HEADER, "authorization")}
        credential = request.headers.get(KEY_HEADER) or request.query_params.get("key")
        self.script.record(Recorded(request.method, request.url.path, headers, body, answered, credential))
        return body

    async def _models(self, request: Request) -> Response:
        call = request.path_params["call"]
        if call.endswith(":countTokens"):
            await self._record(request, "side")
            return JSONResponse({"totalTokens": 100})
        if not call.endswith(":streamGenerateContent"):
            await self._record(request, "side")
            # The CLI's own structured checks (next speaker, loop detection) read a JSON answer.
            answer = json.dumps({"reasoning": "The model answered.", "next_speaker": "user"})
            return JSONResponse(
                {
                    "candidates": [{"content": {"parts": [{"text": answer}], "role": "model"}, "finishReason": "STOP"}],
                    "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7},
                }
            )
        plan, answered = self.script.next()
        await self._record(request, answered)
        if isinstance(plan, Fail):
            return JSONResponse(plan.body, status_code=plan.status, headers=plan.headers)
        if isinstance(plan, CutOff):
            if plan.forever:
                self.script.keep(plan)
            return StreamingResponse(_cut(plan), media_type="text/event-stream")
        reply = plan
        await run_in_threadpool(reply.wait_gate)

        async def chunks() -> AsyncIterator[bytes]:
            for chunk in stream_events(reply):
                yield chunk

        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def _unknown(self, request: Request) -> Response:
        await self._record(request, "unknown")
        return JSONResponse(error_body(404, "NOT_FOUND", f"Not found: {request.url.path}"), status_code=404)


async def _cut(plan: CutOff) -> AsyncIterator[bytes]:
    yield _chunk([{"text": plan.text}])
    if plan.endless:
        await asyncio.Event().wait()  # never set: the stream stays open until the client goes away


def user_texts(request: Recorded) -> list[str]:
    """The user-side texts of a generateContent request (prompts and function responses)."""
    return _texts(request, "user")


def model_texts(request: Recorded) -> list[str]:
    """The model turns a request carries as history (what a resume must have restored)."""
    return _texts(request, "model")


def _texts(request: Recorded, role: str) -> list[str]:
    body = request.body
    out: list[str] = []
    contents = body.get("contents") if isinstance(body, dict) else None
    for content in contents if isinstance(contents, list) else []:
        if not isinstance(content, dict) or content.get("role") != role:
            continue
        for part in content.get("parts") or []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
            elif isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                out.append(json.dumps(part["functionResponse"]))
    return out
