"""Pure ASGI middleware (no BaseHTTPMiddleware: it would buffer SSE and long-polls)."""

from __future__ import annotations

import hmac
import logging
import re
import time
from collections.abc import Sequence
from typing import Protocol

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from muster_api.web.problems import problem, unhandled

log = logging.getLogger("muster.access")

MAX_BODY_BYTES = 1024 * 1024
# What a load balancer or an orchestrator probes without credentials, and the dashboard's shell and assets (they
# hold no data: the page asks for a key itself when the API answers 401). Everything else, the API's own description
# (/docs, /openapi.json) included, needs a key once keys are set.
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/"})
OPEN_PREFIXES = ("/ui/",)
OPEN_METHODS = frozenset({"GET", "HEAD"})


class ScopedKeys(Protocol):
    """Keys narrower than the service's (``app.state.scoped_keys``): good for some requests only."""

    async def admits(self, key: bytes, scope: Scope) -> bool: ...


def _scoped(scope: Scope) -> ScopedKeys | None:
    app = scope.get("app")
    found: ScopedKeys | None = getattr(app.state, "scoped_keys", None) if app is not None else None
    return found


def _open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


class Edge:
    """What every HTTP request passes before the app, in one layer (each ASGI layer is a coroutine and a wrapped
    ``send`` per request), in this order:

    - the access log: one line per request, method, path (never the query: it may carry cursors we do not want in
      logs), status and ms, for every answer, the ones below included;
    - the API-key guard: when MUSTER_API_KEYS is set, every request but a GET or HEAD of health and readiness needs
      one of them in ``X-API-Key`` (401 without, 403 with another), or a key the app's ``scoped_keys`` admits for
      this request (a dispatched run's, ``muster_api.dispatch.run_keys``). ``public``: a pattern of further paths
      open to GET and HEAD (the served agents' cards, when the operator makes them public);
    - the body limit: bodies over ``limit`` bytes are refused with 413 before the app reads them (declared or
      streamed);
    - the last resort: an error no exception handler answered is answered (``problems.unhandled``: 503 for an
      unreachable database, else a 500 with an error id) and not re-raised, so that it is logged once, in one line.
      An error after the answer started (a stream) can only end the response: it is logged the same way.
    """

    def __init__(
        self, app: ASGIApp, keys: Sequence[str] = (), public: str | None = None, limit: int = MAX_BODY_BYTES
    ) -> None:
        self.app = app
        self.keys = [k.encode() for k in keys]
        self.public = re.compile(public) if public else None
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        begun = time.perf_counter()
        status = 0

        async def _send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if await self._refused(scope, receive, _send):
                return
            try:
                await self.app(scope, self._limited(receive), _send)
            except Exception as exc:
                response = unhandled(exc, scope["method"], scope["path"])
                if not status:
                    await response(scope, receive, _send)
        finally:
            log.info(
                "request method=%s path=%s status=%d duration_ms=%.1f",
                scope["method"],
                scope["path"],
                status or 500,
                (time.perf_counter() - begun) * 1000,
            )

    def _open(self, path: str) -> bool:
        return _open(path) or (self.public is not None and self.public.match(path) is not None)

    async def _refused(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Answer a request without a valid key, or with a declared body over the limit; whether it was."""
        if self.keys and not (self._open(scope["path"]) and scope["method"] in OPEN_METHODS):
            presented = next((v for k, v in scope["headers"] if k == b"x-api-key"), None)
            if presented is None:
                detail = "this API requires an X-API-Key header"
                await problem(401, detail, headers={"WWW-Authenticate": "ApiKey"})(scope, receive, send)
                return True
            if not any(hmac.compare_digest(presented, key) for key in self.keys):
                scoped = _scoped(scope)
                try:
                    admitted = scoped is not None and await scoped.admits(presented, scope)
                except Exception as exc:  # an unreachable database: answered as the app's own errors are
                    await unhandled(exc, scope["method"], scope["path"])(scope, receive, send)
                    return True
                if not admitted:
                    await problem(403, "the X-API-Key presented is not valid for this request")(scope, receive, send)
                    return True
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await problem(413, f"request body exceeds {self.limit} bytes")(scope, receive, send)
                return True
        return False

    def _limited(self, receive: Receive) -> Receive:
        seen = 0

        async def _receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # An HTTPException is the one error FastAPI lets through its body parsing (any other becomes a
                    # 400): its handler answers the 413 problem.
                    raise HTTPException(413, f"request body exceeds {self.limit} bytes")
            return message

        return _receive
