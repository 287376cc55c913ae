"""A recording HTTP proxy on loopback: forwards every request to the service (streaming answers through, SSE
included) and keeps what it was sent, so a test can say what the service received. Given a target it stands in for
the service (a reverse proxy); without one it is a forward proxy (``HTTP_PROXY``) that sends each request to the
host the request names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.a2a.peers import serve_asgi

HOP_BY_HOP = {b"host", b"connection", b"keep-alive", b"transfer-encoding", b"content-length"}


@dataclass
class Recording:
    base: str
    requests: list[str] = field(default_factory=list)

    def everything(self) -> str:
        return "\n".join(self.requests)


@asynccontextmanager
async def recording_proxy(target: str | None = None, **options: Any) -> AsyncIterator[Recording]:
    """``options``: uvicorn's (``ssl_certfile``, ``ssl_keyfile``: the proxy answers https)."""
    timeout = httpx.Timeout(30, read=None)
    async with httpx.AsyncClient(base_url=target or "", timeout=timeout, trust_env=False) as upstream:
        recording = Recording(base="")

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
            headers = [(k, v) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP]
            host = dict(scope["headers"]).get(b"host", b"").decode()
            origin = "" if target else f"http://{host}"
            query = scope["query_string"].decode()
            recording.requests.append(
                f"{scope['method']} {origin}{scope['path']}?{query} {[(k.decode(), v.decode()) for k, v in headers]} "
                f"{body.decode(errors='replace')}"
            )
            request = upstream.build_request(
                scope["method"],
                f"{origin}{scope['path']}?{query}" if query else f"{origin}{scope['path']}",
                headers=headers,
                content=body,
            )
            response = await upstream.send(request, stream=True)
            try:
                answer = [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]
                await send({"type": "http.response.start", "status": response.status_code, "headers": answer})
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                await response.aclose()

        async with serve_asgi(app, **options) as base:
            recording.base = base
            yield recording
