"""Real a2a-sdk servers (and a scripted raw HTTP peer) on 127.0.0.1 free ports, for tests and the benchmark.

The agent is scripted by the first word of the user's message:

    complete <text>   artifact <text>, completed
    status <text>     completed, answer only in status.message
    history <text>    completed, answer only as an agent message in the history
    message <text>    a direct Message answer (no task)
    fail <text>       failed with <text>
    reject <text>     rejected with <text>
    input <text>      input-required, asking <text>; the follow-up message completes with "got <reply>"
    auth <text>       auth-required
    cancel <text>     the agent cancels the task itself
    slow <seconds>    working for <seconds>, then artifact "done", completed
    held <text>       working until the test sets ``executor.released``, then artifact "done", completed
    late <seconds>    answers the send only after <seconds> (its task's handle arrives late), then works until cancelled
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from a2a.helpers import new_task_from_user_message, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, Role, TaskState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route


class ScriptedExecutor(AgentExecutor):
    """An agent whose behaviour is chosen by the message text; it records what it was asked to cancel."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.started: list[str] = []
        self.released = asyncio.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        text = context.get_user_input()
        command, _, arg = text.partition(" ")
        if command == "message":
            await event_queue.enqueue_event(new_text_message(arg, context_id=context.context_id, role=Role.ROLE_AGENT))
            return
        if command == "late":
            await asyncio.sleep(float(arg))  # the peer's own slowness: the handle leaves after the caller's budget
            command, arg = "slow", "3600"
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        self.started.append(task.id)
        updater = TaskUpdater(event_queue, task.id, task.context_id)

        def says(words: str) -> Any:
            return updater.new_agent_message([Part(text=words)])

        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.add_artifact([Part(text=f"got {text}")], name="answer")
            await updater.complete()
        elif command == "complete":
            await updater.add_artifact([Part(text=arg)], name="answer")
            await updater.add_artifact([Part(text="second part")], name="more")
            await updater.complete()
        elif command == "status":
            await updater.complete(says(arg))
        elif command == "history":
            await updater.update_status(TaskState.TASK_STATE_WORKING, says(arg))
            await updater.complete()
        elif command == "fail":
            await updater.failed(says(arg))
        elif command == "reject":
            await updater.reject(says(arg))
        elif command == "input":
            await updater.requires_input(says(arg))
        elif command == "auth":
            await updater.requires_auth(says(arg))
        elif command == "cancel":
            await updater.cancel(says(arg))
        elif command in ("slow", "held"):
            await updater.start_work()
            await (self.released.wait() if command == "held" else asyncio.sleep(float(arg)))
            await updater.add_artifact([Part(text="done")], name="answer")
            await updater.complete()
        else:
            await updater.add_artifact([Part(text=text)], name="echo")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        self.cancelled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def make_card(
    name: str,
    url: str,
    *,
    binding: str = "JSONRPC",
    version: str = "1.0",
    streaming: bool = False,
    skills: list[tuple[str, str]] | None = None,
) -> AgentCard:
    skill_list = [
        AgentSkill(id=sid, name=sname, description=f"{sname} things", tags=["test"])
        for sid, sname in (skills if skills is not None else [("echo", "Echo")])
    ]
    return AgentCard(
        name=name,
        description=f"{name}, a scripted test agent",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding=binding, protocol_version=version)],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=skill_list,
    )


def free_socket() -> socket.socket:
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when proto says TCP; without it
    # every keep-alive answer stalls ~40 ms (Nagle against delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@asynccontextmanager
async def serve_asgi(app: Any, sock: socket.socket | None = None, **options: Any) -> AsyncIterator[str]:
    """Run ``app`` with uvicorn on a loopback port; yields ``http://127.0.0.1:<port>`` (``https`` when ``options``
    name a certificate, ``ssl_certfile``: uvicorn's own options)."""
    sock = sock or free_socket()
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1, **options)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"{'https' if options.get('ssl_certfile') else 'http'}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@dataclass(frozen=True)
class RpcSeen:
    """One JSON-RPC request the peer received: its method, the task id it names (if any) and its headers."""

    method: str
    task_id: str | None
    headers: dict[str, str]


@dataclass
class Peer:
    """A running scripted agent: its base URL, card URL, executor and the requests its endpoint received."""

    base: str
    executor: ScriptedExecutor
    card: AgentCard
    seen_headers: list[dict[str, str]] = field(default_factory=list)
    rpc: list[RpcSeen] = field(default_factory=list)

    @property
    def card_url(self) -> str:
        return f"{self.base}/.well-known/agent-card.json"

    def get_tasks(self, task_id: str, **headers: str) -> int:
        """How many GetTask requests for ``task_id`` arrived (with these header values, if given)."""
        return sum(
            1
            for seen in self.rpc
            if seen.method in ("GetTask", "tasks/get")
            and seen.task_id == task_id
            and all(seen.headers.get(k.replace("_", "-")) == v for k, v in headers.items())
        )


def _rpc_seen(body: bytes, headers: dict[str, str]) -> RpcSeen | None:
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("method"), str):
        return None
    params = document.get("params")
    task_id = params.get("id") if isinstance(params, dict) else None
    return RpcSeen(document["method"], task_id if isinstance(task_id, str) else None, headers)


def _recording(app: Any, peer: Peer) -> Any:
    async def wrapper(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        peer.seen_headers.append(headers)
        if scope["method"] != "POST":
            await app(scope, receive, send)
            return
        # Read the body to record the JSON-RPC method, then hand the same body to the app.
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        seen = _rpc_seen(body, headers)
        if seen is not None:
            peer.rpc.append(seen)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return wrapper


@asynccontextmanager
async def a2a_peer(
    name: str = "Scripted Agent",
    *,
    kind: str = "jsonrpc",
    streaming: bool = False,
    skills: list[tuple[str, str]] | None = None,
    cache_control: str | None = None,
) -> AsyncIterator[Peer]:
    """A real a2a-sdk server. ``kind``: ``jsonrpc`` (v1.0), ``rest`` (v1.0 HTTP+JSON), ``v03`` / ``v03rest`` (a v0.3
    card and the SDK's v0.3 compatibility layer on the JSON-RPC / HTTP+JSON endpoint)."""
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    executor = ScriptedExecutor()
    if kind == "rest":
        card = make_card(name, f"{base}/rest", binding="HTTP+JSON", streaming=streaming, skills=skills)
    elif kind == "v03rest":
        card = make_card(name, f"{base}/rest", binding="HTTP+JSON", version="0.3", streaming=streaming, skills=skills)
    elif kind == "v03":
        card = make_card(name, f"{base}/rpc", version="0.3", streaming=streaming, skills=skills)
    else:
        card = make_card(name, f"{base}/rpc", streaming=streaming, skills=skills)
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    routes: list[BaseRoute] = []
    if kind in ("v03", "v03rest"):
        # A v0.3 server publishes only the v0.3 card fields (url, preferredTransport, protocolVersion).
        document = agent_card_to_dict(card)
        document.pop("supportedInterfaces", None)
        document["protocolVersion"] = "0.3.0"

        async def v03_card(request: Request) -> Response:
            return JSONResponse(document)

        routes.append(Route("/.well-known/agent-card.json", v03_card))
    else:
        routes.extend(create_agent_card_routes(card, cache_control=cache_control))
    if kind in ("rest", "v03rest"):
        routes.extend(create_rest_routes(handler, path_prefix="/rest", enable_v0_3_compat=kind == "v03rest"))
    else:
        routes.extend(create_jsonrpc_routes(handler, "/rpc", enable_v0_3_compat=kind == "v03"))
    peer = Peer(base=base, executor=executor, card=card)
    app = _recording(Starlette(routes=routes), peer)
    async with serve_asgi(app, sock):
        yield peer


Handler = Callable[[Request], Awaitable[Response]]


@dataclass
class RawPeer:
    """A scripted raw HTTP peer: every path answers what the test put in ``routes``; it records requests."""

    base: str
    routes: dict[str, Handler]
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def json(self, path: str, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        async def answer(request: Request) -> Response:
            return Response(json.dumps(body), status_code=status, media_type="application/json", headers=headers)

        self.routes[path] = answer

    def text(self, path: str, body: str, status: int = 200) -> None:
        async def answer(request: Request) -> Response:
            return Response(body, status_code=status, media_type="application/json")

        self.routes[path] = answer


@asynccontextmanager
async def raw_peer(host: str = "127.0.0.1") -> AsyncIterator[RawPeer]:
    sock = free_socket()
    port = sock.getsockname()[1]
    peer = RawPeer(base=f"http://{host}:{port}", routes={})

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        peer.seen.append((request.url.path, {k.lower(): v for k, v in request.headers.items()}))
        handler = peer.routes.get(request.url.path)
        response = await handler(request) if handler else Response("not here", status_code=404)
        await response(scope, receive, send)

    async with serve_asgi(app, sock):
        yield peer
