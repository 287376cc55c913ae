"""The asynchronous client's HTTP: httpcore's connection pool, driven directly.

``httpx.AsyncClient`` spends more CPU per request than the exchange itself does (merging the URL, the auth and
redirect flows, the cookie jar, the response decoders), and ``muster mcp`` pays it on every tool call. A client talks
to one service, so what httpx decides per request is decided here once, from the environment httpx trusts:

- the proxy: ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` (or lower case) and ``NO_PROXY``, read by the standard
  library (``urllib.request``, which httpx reads them through too); ``http``, ``https`` and ``socks5`` proxies;
- the certificates: ``SSL_CERT_FILE``/``SSL_CERT_DIR``, through ``httpx.create_ssl_context`` (made only for https).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpcore
import httpx

from muster_client.network import AsyncioNetwork

TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    httpcore.NetworkError,
    httpcore.TimeoutException,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
    OSError,
)
"""What an exchange raises when the service could not be reached or did not answer (the client's
``ServiceUnreachable``)."""

Pool = httpcore.AsyncConnectionPool
CONNECTIONS, KEPT, KEEP = 100, 20, 5.0
"""httpx's default limits: connections at most, kept alive at most, seconds an idle one is kept."""
Timeouts = dict[str, float | None]


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer: status, headers (names in lower case), body."""

    status_code: int
    reason_phrase: str
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


def answer(response: httpcore.Response, content: bytes) -> Answer:
    reason = response.extensions.get("reason_phrase", b"")
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
    return Answer(response.status, reason.decode("latin-1"), headers, content)


def environment_proxy(url: httpx.URL) -> httpx.Proxy | None:
    """The proxy the environment names for ``url`` (None: connect directly)."""
    proxies = urllib.request.getproxies()
    named = proxies.get(url.scheme) or proxies.get("all")
    if not named or urllib.request.proxy_bypass(url.netloc.decode("ascii")):
        return None
    return httpx.Proxy(named if "://" in named else f"http://{named}")


def connection_pool(url: httpx.URL) -> Pool:
    """httpcore's pool for ``url``: direct, or through the environment's proxy (as ``httpx.AsyncHTTPTransport``
    builds it, with httpx's default limits)."""
    proxy = environment_proxy(url)
    https = "https" in (url.scheme, proxy.url.scheme if proxy else "")
    ssl_context = httpx.create_ssl_context(trust_env=True) if https else None
    if proxy is None:
        return httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=CONNECTIONS,
            max_keepalive_connections=KEPT,
            keepalive_expiry=KEEP,
            network_backend=AsyncioNetwork(),
        )
    proxy_url = httpcore.URL(
        scheme=proxy.url.raw_scheme, host=proxy.url.raw_host, port=proxy.url.port, target=proxy.url.raw_path
    )
    if proxy.url.scheme in ("http", "https"):
        return httpcore.AsyncHTTPProxy(
            proxy_url=proxy_url,
            proxy_auth=proxy.raw_auth,
            proxy_headers=proxy.headers.raw,
            proxy_ssl_context=proxy.ssl_context,
            ssl_context=ssl_context,
            max_connections=CONNECTIONS,
            max_keepalive_connections=KEPT,
            keepalive_expiry=KEEP,
            network_backend=AsyncioNetwork(),
        )
    if proxy.url.scheme in ("socks5", "socks5h"):
        return httpcore.AsyncSOCKSProxy(
            proxy_url=proxy_url,
            proxy_auth=proxy.raw_auth,
            ssl_context=ssl_context,
            max_connections=CONNECTIONS,
            max_keepalive_connections=KEPT,
            keepalive_expiry=KEEP,
            network_backend=AsyncioNetwork(),
        )
    raise ValueError(f"the proxy {proxy.url} is not http, https or socks5")


def query(params: Mapping[str, Any] | None) -> str:
    """``?…`` of the parameters as httpx writes them (booleans as true/false), or nothing."""
    if not params:
        return ""
    text = {k: ("true" if v is True else "false" if v is False else "" if v is None else v) for k, v in params.items()}
    return "?" + urlencode(text)


def json_body(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


class Exchange:
    """Requests to one service (``url`` may carry a path prefix) over one pool of kept-alive connections."""

    def __init__(self, url: str) -> None:
        base = httpx.URL(url)
        self._pool = connection_pool(base)
        self._scheme, self._host, self._port = base.raw_scheme, base.raw_host, base.port
        self._prefix = base.raw_path.rstrip(b"/")

    def _url(self, target: str) -> httpcore.URL:
        return httpcore.URL(
            scheme=self._scheme, host=self._host, port=self._port, target=self._prefix + target.encode("ascii")
        )

    async def request(
        self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes | None, timeouts: Timeouts
    ) -> Answer:
        """``target``: the path and query. The answer read whole."""
        response = await self._pool.request(
            method, self._url(target), headers=headers, content=body, extensions={"timeout": timeouts}
        )
        return answer(response, response.content)

    @asynccontextmanager
    async def stream(
        self, target: str, headers: list[tuple[bytes, bytes]], timeouts: Timeouts
    ) -> AsyncIterator[httpcore.Response]:
        """A GET whose answer is read as it comes (``lines``)."""
        async with self._pool.stream("GET", self._url(target), headers=headers, extensions={"timeout": timeouts}) as r:
            yield r

    async def aclose(self) -> None:
        await self._pool.aclose()


async def lines(response: httpcore.Response) -> AsyncIterator[str]:
    """The body's lines, split at ``\\n`` (a ``\\r`` before it dropped): an event stream's lines."""
    pending = b""
    async for chunk in response.aiter_stream():
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.removesuffix(b"\r").decode("utf-8", errors="replace")
    if pending:
        yield pending.removesuffix(b"\r").decode("utf-8", errors="replace")
