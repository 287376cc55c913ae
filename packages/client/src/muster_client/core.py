"""What both clients share: headers, timeouts, turning an answer into a model or an error, the session token."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import httpx

from muster_client import config
from muster_client.calls import Call
from muster_client.errors import ServiceUnreachable, UnexpectedAnswer, error_for
from muster_client.models import CheckinRecord, CheckoutResult, InboxMessage, RunEvent
from muster_client.sse import ServerEvent

T = TypeVar("T")


SESSION_ENDED = frozenset({"unauthorized", "token_required", "invalid_token", "lease_expired", "superseded"})


class ClientCore:
    """``url`` (else ``MUSTER_URL``, else http://127.0.0.1:8000), ``api_key`` (else ``MUSTER_API_KEY``; sent as
    ``X-API-Key``), ``token``: the agent's mesh session token. A confirmed check-in that starts a session sets
    ``token``; a confirmed check-out clears it. Neither key nor token is ever part of ``repr``."""

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        token: str | None = None,
        timeout: float = config.DEFAULT_TIMEOUT,
    ) -> None:
        self.url = config.service_url(url)
        self.token = token
        self.timeout = timeout
        self._api_key = config.api_key(api_key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r})"

    def base_headers(self) -> dict[str, str]:
        return {"X-API-Key": self._api_key} if self._api_key else {}

    def headers(self, call: Call[Any]) -> dict[str, str]:
        headers = self.base_headers()
        if call.as_agent and self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if call.idempotency_key is not None:
            headers["Idempotency-Key"] = call.idempotency_key
        return headers

    def timeout_for(self, call: Call[Any]) -> httpx.Timeout:
        read = None if call.hold is None else self.timeout + call.hold
        return httpx.Timeout(self.timeout, read=read)

    def stream_headers(self, last_event_id: int | None) -> dict[str, str]:
        headers = self.base_headers()
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        headers["Accept"] = "text/event-stream"
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        return headers

    def unreachable(self, exc: httpx.TransportError) -> ServiceUnreachable:
        if isinstance(exc, httpx.TimeoutException):
            reason = f"no answer within the timeout ({type(exc).__name__})"
        else:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return ServiceUnreachable(self.url, reason)

    def finish(self, call: Call[T], response: httpx.Response) -> T:
        """The answer as the call's model; a problem answer raised as its ``ApiError``."""
        raise_for_problem(response)
        try:
            data = response.json()
        except ValueError as exc:
            raise UnexpectedAnswer(
                f"{call.method} {call.path} answered {response.status_code} that is not JSON: {response.text[:200]!r}"
            ) from exc
        result = call.decode(data)
        if response.headers.get("idempotent-replayed") == "true" and hasattr(result, "replayed"):
            result.replayed = True
        if isinstance(result, CheckinRecord) and result.token:
            self.token = result.token
        elif isinstance(result, CheckoutResult):
            self.token = None
        return result


def raise_for_problem(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    body: dict[str, Any] = {}
    try:
        parsed = json.loads(response.content or b"null")
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        body = parsed
    fallback = response.text[:500] if response.content and not body else response.reason_phrase
    raise error_for(
        response.status_code,
        body,
        fallback or f"HTTP {response.status_code}",
        retry_after=_seconds(response.headers.get("retry-after")),
    )


def _seconds(value: str | None) -> float | None:
    """Retry-After in seconds (the service sends seconds, never an HTTP date)."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def inbox_event(event: ServerEvent) -> InboxMessage | None:
    """A ``message`` event of the inbox stream as its message; an ``error`` event raised (the stream ended)."""
    if event.event == "message":
        return InboxMessage.model_validate_json(event.data)
    if event.event == "error":
        try:
            data = json.loads(event.data)
        except ValueError:
            data = {"detail": event.data}
        body = data if isinstance(data, dict) else {"detail": event.data}
        # The stream carries the mesh's code but no status: the session ending is what stops an open stream.
        status = 401 if body.get("code") in SESSION_ENDED else 400
        raise error_for(status, body, "the inbox stream ended")
    return None


def run_event(event: ServerEvent) -> RunEvent:
    """One event of a run's SSE stream (the final ``result`` carries the run itself)."""
    try:
        data = json.loads(event.data)
    except ValueError:
        data = {"raw": event.data}
    body = data if isinstance(data, dict) else {"value": data}
    if event.event == "result":
        return RunEvent(id=None, type="result", data=body)
    # A journal row comes unnamed (an agent's own ``result`` event must not read as the end): its type is the
    # normalized event's.
    journaled = body.get("event")
    kind = journaled.get("type") if isinstance(journaled, dict) else None
    seq = int(event.id) if event.id and event.id.isdigit() else None
    return RunEvent(id=seq, type=kind if isinstance(kind, str) else event.event, data=body)
