"""Egress of a sandbox that has no network of its own: an allow-list proxy on the host, reached through a unix socket.

A sandbox runs in a network namespace with only its own loopback. Its way out is one unix socket per run, in a
private directory the provider binds into the sandbox. Inside, a small bridge (``egress_bridge.py``, run with the
sandbox's own Python before the CLI starts) listens on the sandbox's loopback and carries each connection to that
socket, first naming what the connection is for:

- the proxy port (``PROXY_PORT``): an HTTP proxy for ``CONNECT host:port`` and plain-http absolute-URI requests;
  ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` point at it (``proxy_variables``);
- each allowed endpoint on the host's loopback (a model server at ``http://127.0.0.1:PORT``, Muster's own URL): the
  same port on the sandbox's loopback, so the same URL works inside, without sharing the host's network.

On the host, ``EgressProxy`` checks every connection against the allowed endpoints (the harness's model endpoints
plus the hosts the agent adds); a refused one is answered 403 (or closed) and reported through ``on_refused``, which
a provider turns into a ``warning`` event of the run. Whatever the sandbox sends, only the host side decides.

A provider asks for egress with ``EgressProxy(allowed, on_refused).open(directory)`` and runs the command through
``bridge_argv``; a container provider does the same with the directory mounted and ``--network none``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from muster_dispatch.errors import DispatchError
from muster_dispatch.events import AgentEvent

EgressMode = Literal["model", "none", "open"]
EGRESS_MODES: tuple[str, ...] = ("model", "none", "open")
PROXY_PORT = 3128  # the proxy on the sandbox's own loopback (the sandbox has no other service to collide with)
PROXY_TAG = "proxy"
SOCKET_NAME = "egress.sock"
SANDBOX_SOCKET_DIR = "/run/muster-egress"  # where the run's socket directory appears inside a sandbox
HEAD_LIMIT = 16 * 1024  # a request head (or a bridge's first line) longer than this is refused
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 15.0
_CHUNK = 64 * 1024
_PROXY_NAMES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
_HOP_HEADERS = frozenset({b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive"})
_LOOPBACK_NAMES = frozenset({"localhost"})
_BRIDGE = Path(__file__).with_name("egress_bridge.py")


@dataclass(frozen=True, slots=True, order=True)
class Endpoint:
    """A host and a TCP port a sandbox may connect to."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """``host:port`` (``[v6]:port``); raises ``ValueError`` saying what is wrong."""
        host, sep, port = text.strip().rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{text!r} is not host:port")
        if any(c.isspace() or c in "/@?#" for c in host):
            raise ValueError(f"{text!r}: invalid host")
        return cls(host.lower(), int(port))

    @classmethod
    def of_url(cls, url: str) -> Endpoint | None:
        """The endpoint an http(s) URL connects to; None when it is not one."""
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError:
            return None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        return cls(parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80))

    @property
    def loopback(self) -> bool:
        """On the host's own loopback (reached inside a sandbox at the same address and port)."""
        if self.host in _LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


@dataclass(frozen=True, slots=True)
class Egress:
    """Where a sandbox's processes may connect. ``model``: the harness's model endpoints (the vendor's API, or the
    configured base URL) plus ``hosts``; ``none``: nowhere; ``open``: the host's network, shared."""

    mode: EgressMode = "model"
    hosts: tuple[Endpoint, ...] = ()

    @classmethod
    def parse(cls, value: object, *, field: str = "egress") -> Egress:
        """``"model"``, ``"none"``, ``"open"``, or a list of ``host:port`` added to the model's endpoints."""
        if isinstance(value, Egress):
            return value
        if isinstance(value, str):
            if value not in EGRESS_MODES:
                raise DispatchError(
                    "configuration", f"{field} must be one of {', '.join(EGRESS_MODES)} or a list of host:port"
                )
            return cls(value)  # type: ignore[arg-type]
        if isinstance(value, list | tuple):
            try:
                hosts = tuple(Endpoint.parse(str(item)) for item in value)
            except ValueError as exc:
                raise DispatchError("configuration", f"{field}: {exc}", {"field": field}) from None
            return cls("model", hosts)
        raise DispatchError("configuration", f"{field} must be a string or a list of host:port", {"field": field})

    @property
    def proxied(self) -> bool:
        return self.mode == "model"

    def allowed(self, model: Iterable[Endpoint]) -> tuple[Endpoint, ...]:
        return tuple(sorted({*model, *self.hosts})) if self.proxied else ()

    def describe(self) -> str:
        """For people: ``model``, ``model + a:443``, ``none``, ``open``."""
        return " + ".join(["model", *(str(h) for h in self.hosts)]) if self.proxied else self.mode


def endpoints_of(urls: Iterable[str | None]) -> tuple[Endpoint, ...]:
    """The endpoints of the URLs that are set (a harness's base URLs, or its vendor's default)."""
    found = (Endpoint.of_url(url) for url in urls if url)
    return tuple(sorted({endpoint for endpoint in found if endpoint is not None}))


def refused_event(endpoint: Endpoint) -> AgentEvent:
    """The ``warning`` a refused connection becomes in the run's journal, naming where it went."""
    return AgentEvent(
        "warning",
        text=f"egress refused: {endpoint} is not an allowed endpoint of this sandbox",
        name=str(endpoint),
        code="egress",
        data={"host": endpoint.host, "port": endpoint.port},
    )


def proxy_variables(port: int = PROXY_PORT) -> dict[str, str]:
    """The variables that send a sandbox's HTTP(S) traffic to its proxy (both spellings: curl reads only the lower
    case ``http_proxy``); nothing is exempt."""
    url = f"http://127.0.0.1:{port}"
    names = {name: url for upper in _PROXY_NAMES for name in (upper, upper.lower())}
    return {**names, "NO_PROXY": "", "no_proxy": ""}


def bridge_python() -> tuple[str, tuple[Path, ...]]:
    """The Python that runs the bridge in a sandbox, and what to bind read-only for it: the system's ``python3``,
    else this interpreter's installation."""
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is not None:
        return system, ()
    return sys.executable, (Path(sys.base_prefix),)


def bridge_argv(python: str, socket_path: str, allowed: Sequence[Endpoint], argv: Sequence[str]) -> list[str]:
    """``argv`` behind the bridge: it listens on the proxy port and on each allowed loopback endpoint's port, then
    becomes ``argv`` (so nothing connects before it listens)."""
    listeners = [f"{PROXY_PORT}={PROXY_TAG}"]
    for endpoint in allowed:
        if endpoint.loopback:
            if endpoint.port == PROXY_PORT:
                raise DispatchError(
                    "configuration",
                    f"egress: {endpoint} uses the port of the sandbox's own proxy ({PROXY_PORT}); use another port",
                    {"field": "egress"},
                )
            listeners.append(f"{endpoint.port}={endpoint}")
    source = _BRIDGE.read_text(encoding="utf-8")
    return [python, "-I", "-S", "-c", source, socket_path, *sorted(set(listeners)), "--", *argv]


class EgressProxy:
    """One run's allow-list proxy, on ``<directory>/egress.sock``; ``close()`` stops it and removes the socket."""

    def __init__(self, allowed: Iterable[Endpoint], on_refused: Callable[[Endpoint], None]) -> None:
        self.allowed = frozenset(allowed)
        self.on_refused = on_refused
        self.directory: Path | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def open(self, directory: Path) -> None:
        """Listen in ``directory`` (made private; a path too long for a socket is reached through its descriptor)."""
        self._server = await asyncio.start_unix_server(self._serve, sock=_bind(directory), limit=HEAD_LIMIT)
        self.directory = directory

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in self._tasks:
            task.cancel()
        if self.directory is not None:
            with contextlib.suppress(OSError):
                (self.directory / SOCKET_NAME).unlink()
                self.directory.rmdir()

    def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._connection(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), HEAD_TIMEOUT)
            tag = line.decode("ascii", "replace").strip()
            if tag == PROXY_TAG:
                await self._proxy(reader, writer)
            else:
                await self._forward(tag, reader, writer)
        except (OSError, ValueError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a client that went away or sent garbage: its connection just ends
        finally:
            writer.close()

    async def _forward(self, tag: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        endpoint = Endpoint.parse(tag)
        if endpoint not in self.allowed or not endpoint.loopback:
            self.on_refused(endpoint)
            return
        await self._relay(endpoint, reader, writer, None)

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        request = ProxyRequest.parse(head)
        if request is None:
            writer.write(_answer(400, "not a proxy request"))
            return
        if request.endpoint not in self.allowed:
            self.on_refused(request.endpoint)
            writer.write(_answer(403, f"muster egress: {request.endpoint} is not allowed"))
            return
        await self._relay(request.endpoint, reader, writer, request)

    async def _relay(
        self,
        endpoint: Endpoint,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: ProxyRequest | None,
    ) -> None:
        """Connect to ``endpoint`` and carry bytes both ways; ``request``: the proxy request that asked for it (None:
        a loopback forward, carried as it is)."""
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(endpoint.host, endpoint.port), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            if request is not None:
                writer.write(_answer(502, f"muster egress: {endpoint}: {getattr(exc, 'strerror', None) or exc}"))
            return
        try:
            if request is not None and request.upstream_head is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            elif request is not None and request.upstream_head:
                up_writer.write(request.upstream_head)
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            up_writer.close()


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """The head of a request to the proxy: where it goes, and (plain http) the head to send there instead."""

    endpoint: Endpoint
    upstream_head: bytes | None  # None for CONNECT

    @classmethod
    def parse(cls, head: bytes) -> ProxyRequest | None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return None
        method, target, version = parts
        text = target.decode("ascii", "replace")
        if method == b"CONNECT":
            try:
                return cls(Endpoint.parse(text), None)
            except ValueError:
                return None
        endpoint = Endpoint.of_url(text) if text.startswith("http://") else None
        if endpoint is None:
            return None
        path = urlsplit(text)._replace(scheme="", netloc="").geturl() or "/"
        # One request per connection: a later request on it could name another host.
        kept = [line for line in lines[1:] if line and line.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS]
        upstream = [b" ".join((method, path.encode(), version)), *kept, b"Connection: close", b"", b""]
        return cls(endpoint, b"\r\n".join(upstream))


def _bind(directory: Path) -> socket.socket:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    (directory / SOCKET_NAME).unlink(missing_ok=True)
    handle = os.open(directory, os.O_PATH)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(f"/proc/self/fd/{handle}/{SOCKET_NAME}")
    except OSError:
        sock.close()
        raise
    finally:
        os.close(handle)
    return sock


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


def _answer(status: int, text: str) -> bytes:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = (text + "\n").encode()
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + body


__all__ = [
    "EGRESS_MODES",
    "PROXY_PORT",
    "SANDBOX_SOCKET_DIR",
    "Egress",
    "EgressMode",
    "EgressProxy",
    "Endpoint",
    "bridge_argv",
    "bridge_python",
    "endpoints_of",
    "proxy_variables",
    "refused_event",
]
