"""Codex live input: ``codex app-server`` (JSON-RPC lines on stdin/stdout), whose ``turn/steer`` appends a user message
to the running turn.

The driver sends ``initialize``, then ``thread/start`` (or ``thread/resume`` for a continuation), then ``turn/start``
with the prompt; steering becomes ``turn/steer`` once the turn runs (texts steered earlier join the first input).
When the turn completes (or a request fails) the driver is done and the runner closes stdin: app-server then exits.
Steering can race the end of the turn: codex refuses a ``turn/steer`` that arrives after the turn completed ("no
active turn to steer"). The text is then not lost: it starts a new turn on the same thread (the outcome Claude's
stream-json gives by queueing the message), and the driver is done only when no steering is unanswered.
The notifications are decoded by ``decode_app_server`` into the same normalized events as ``codex exec --json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from muster_dispatch.errors import DispatchError
from muster_dispatch.events import AgentEvent, event
from muster_dispatch.harnesses.codex_common import shell_result, turn_failure, usage_from_counts
from muster_dispatch.inputs import AgentInput
from muster_dispatch.jsonline import parse
from muster_dispatch.jsonline import text_or_none as _s

_INITIALIZE, _THREAD, _TURN = 1, 2, 3
# Steering requests carry string ids with this prefix: their refusal is recovered from (see above), not a failure.
STEER_ID_PREFIX = "steer-"


def _line(message: dict[str, Any]) -> str:
    return json.dumps(message) + "\n"


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


class AppServerDriver:
    """Sequencing of one app-server turn; ``feed`` answers each output line with the lines to write."""

    def __init__(self, input: AgentInput, model: str | None, cwd: Path) -> None:
        self.input = input
        self.model = model
        self.cwd = cwd
        self.thread: str | None = None
        self.turn: str | None = None
        self.done = False
        self._early: list[str] = []  # steering that arrived before the turn started
        self._next_id = 100
        self._steering: dict[str, str] = {}  # unanswered turn/steer request id -> its text
        self._turn_over = False  # turn/completed seen while steering was unanswered

    def opening(self) -> list[str]:
        return [
            _line(
                {
                    "id": _INITIALIZE,
                    "method": "initialize",
                    "params": {"clientInfo": {"name": "muster", "version": "0.1.0"}},
                }
            )
        ]

    def feed(self, line: str) -> list[str]:
        message = parse(line)
        if not isinstance(message, dict):
            return []
        ident = message.get("id")
        if "error" in message and ident in (_INITIALIZE, _THREAD, _TURN):
            self.done = True  # the decoder reports the failure; nothing more will happen
            return []
        if ident == _INITIALIZE and "result" in message:
            params: dict[str, Any] = {"cwd": str(self.cwd)}
            if self.model:
                params["model"] = self.model
            continuation = self.input.continuation
            if continuation is not None:
                params["threadId"] = continuation.conversation
                return [
                    _line({"method": "initialized"}),
                    _line({"id": _THREAD, "method": "thread/resume", "params": params}),
                ]
            return [
                _line({"method": "initialized"}),
                _line({"id": _THREAD, "method": "thread/start", "params": params}),
            ]
        if ident == _THREAD and isinstance(message.get("result"), dict):
            thread = message["result"].get("thread") or {}
            self.thread = thread.get("id") if isinstance(thread, dict) else None
            texts = [self.input.prompt, *self._early]
            self._early.clear()
            params = {"threadId": self.thread, "input": [_text(t) for t in texts]}
            return [_line({"id": _TURN, "method": "turn/start", "params": params})]
        if isinstance(ident, str) and ident in self._steering:
            return self._steering_answered(ident, refused="error" in message)
        method = message.get("method")
        if method == "turn/started":
            turn = (message.get("params") or {}).get("turn") or {}
            self.turn = turn.get("id") if isinstance(turn, dict) else None
            self._turn_over = False
            return self.pending()
        if method == "turn/completed":
            self.turn = None
            if self._steering:
                self._turn_over = True  # wait for codex's answer to the steering before ending
            else:
                self.done = True
        return []

    def _steering_answered(self, ident: str, *, refused: bool) -> list[str]:
        text = self._steering.pop(ident)
        if refused:
            # The turn ended before codex read the steering: it joins the next turn of the thread.
            self._early.insert(0, text)
        if not self._turn_over or self._steering:
            return []
        if not self._early:
            self.done = True
            return []
        texts, self._early = self._early, []
        self._turn_over = False
        self._next_id += 1
        params = {"threadId": self.thread, "input": [_text(t) for t in texts]}
        return [_line({"id": self._next_id, "method": "turn/start", "params": params})]

    def steer(self, text: str) -> list[str]:
        if self.done:
            raise DispatchError("steering", "the turn is over")
        if self.turn is None:
            # Before the thread answered, the text joins the first input of turn/start; after, it waits for the
            # turn id that turn/steer needs (sent from ``feed`` on turn/started).
            self._early.append(text)
            return []
        self._next_id += 1
        ident = f"{STEER_ID_PREFIX}{self._next_id}"
        self._steering[ident] = text
        params = {"threadId": self.thread, "expectedTurnId": self.turn, "input": [_text(text)]}
        return [_line({"id": ident, "method": "turn/steer", "params": params})]

    def pending(self) -> list[str]:
        """Steering queued while the turn was being confirmed, sent as soon as its id is known."""
        if self.turn is None or not self._early or self.done:
            return []
        texts, self._early = self._early, []
        return [line for text in texts for line in self.steer(text)]


def app_server_driver(input: AgentInput, model: str | None, cwd: Path) -> AppServerDriver:
    return AppServerDriver(input, model, cwd)


# ---------------------------------------------------------------------------------------------- decoding


def decode_app_server(message: dict[str, Any]) -> list[AgentEvent]:
    method = message.get("method")
    if method is None:
        return _response(message)
    handler = _NOTIFICATIONS.get(method)
    params = message.get("params")
    if handler is None or not isinstance(params, dict):
        return [event("raw", data=message)]
    return handler(params)


def _response(message: dict[str, Any]) -> list[AgentEvent]:
    error = message.get("error")
    if isinstance(error, dict):
        text = error.get("message") if isinstance(error.get("message"), str) else "app-server request failed"
        ident = message.get("id")
        if isinstance(ident, str) and ident.startswith(STEER_ID_PREFIX):
            # The driver sends the refused steering as a new turn: worth knowing, not a failure of the dispatch.
            return [event("warning", text=f"steering sent as a new turn: {text}", code="steering", data=message)]
        return [event("failure", text=text, code="rpc", data=message)]
    result = message.get("result")
    if isinstance(result, dict) and isinstance(result.get("thread"), dict):
        thread_id = result["thread"].get("id")
        if isinstance(thread_id, str):
            return [event("conversation", id=thread_id, name=_s(result.get("model")))]
    return []  # initialize / turn/start / turn/steer acknowledgements


def _thread_started(params: dict[str, Any]) -> list[AgentEvent]:
    thread = params.get("thread") or {}
    return [event("conversation", id=_s(thread.get("id")))] if isinstance(thread, dict) else []


def _item_started(params: dict[str, Any]) -> list[AgentEvent]:
    item = params.get("item") or {}
    kind = item.get("type")
    if kind == "commandExecution":
        return [event("tool", id=_s(item.get("id")), name="shell", input={"command": item.get("command")})]
    if kind == "mcpToolCall":
        name = f"{item.get('server')}.{item.get('tool')}"
        return [event("tool", id=_s(item.get("id")), name=name, input=item.get("arguments"))]
    if kind == "webSearch":
        return [event("tool", id=_s(item.get("id")), name="web_search", input={"query": item.get("query")})]
    return []


def _item_completed(params: dict[str, Any]) -> list[AgentEvent]:
    item = params.get("item") or {}
    kind = item.get("type")
    item_id = _s(item.get("id"))
    if kind == "agentMessage":
        return [event("text", text=_s(item.get("text")) or "", id=item_id)]
    if kind == "reasoning":
        parts = [p for p in (item.get("summary") or []) + (item.get("content") or []) if isinstance(p, str)]
        return [event("reasoning", text="\n".join(parts), id=item_id)]
    if kind == "commandExecution":
        return [shell_result(item_id, item.get("exitCode"), item.get("status"), item.get("aggregatedOutput"))]
    if kind == "fileChange":
        return [event("file_change", id=item_id, data=item.get("changes"))]
    if kind == "mcpToolCall":
        name = f"{item.get('server')}.{item.get('tool')}"
        code = "error" if item.get("error") or item.get("status") == "failed" else None
        return [event("tool_result", id=item_id, name=name, output=item.get("result"), code=code)]
    if kind == "webSearch":
        return [event("tool_result", id=item_id, name="web_search", data=item)]
    if kind == "userMessage":
        return []
    return [event("raw", data=item)]


def _delta(params: dict[str, Any]) -> list[AgentEvent]:
    return [event("text_delta", text=_s(params.get("delta")) or "", id=_s(params.get("itemId")))]


def _token_usage(params: dict[str, Any]) -> list[AgentEvent]:
    usage = params.get("tokenUsage") or {}
    total = usage.get("total") if isinstance(usage, dict) else None
    if not isinstance(total, dict):
        return []
    get = total.get
    value = usage_from_counts(
        get("inputTokens"), get("cachedInputTokens"), get("cacheWriteInputTokens"), get("outputTokens")
    )
    # A running total for the thread: the turn state keeps the last one instead of adding them up.
    return [event("usage", usage=value, code="total")]


def _turn_completed(params: dict[str, Any]) -> list[AgentEvent]:
    turn = params.get("turn") or {}
    status = turn.get("status") if isinstance(turn, dict) else None
    out: list[AgentEvent] = []
    if status == "failed":
        error = turn.get("error") or {}
        message = _s(error.get("message") if isinstance(error, dict) else None) or "turn failed"
        out.extend(turn_failure(message, turn))
    elif status == "interrupted":
        out.append(event("warning", text="the turn was interrupted", code="interrupted"))
    out.append(event("finished", id=_s(turn.get("id")) if isinstance(turn, dict) else None, code=status))
    return out


def _error(params: dict[str, Any]) -> list[AgentEvent]:
    error = params.get("error") or {}
    message = _s(error.get("message") if isinstance(error, dict) else None) or "error"
    if params.get("willRetry"):
        return [event("retry", text=message, data=params)]
    return [event("failure", text=message, code="error", data=params)]


def _ignored(params: dict[str, Any]) -> list[AgentEvent]:
    return []


_NOTIFICATIONS = {
    "thread/started": _thread_started,
    "item/started": _item_started,
    "item/completed": _item_completed,
    "item/agentMessage/delta": _delta,
    "thread/tokenUsage/updated": _token_usage,
    "turn/completed": _turn_completed,
    "error": _error,
    "turn/started": _ignored,
    "thread/status/changed": _ignored,
    "account/rateLimits/updated": _ignored,
    "remoteControl/status/changed": _ignored,
}
