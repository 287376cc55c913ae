"""Each served agent as its own ASGI sub-application under ``/a2a/serve/{name}``.

Its own application, not routes added to the service's: the SDK's HTTP+JSON routes end in a catch-all
``Mount('/{tenant}')`` that would hide every route added after it, and A2A errors (JSON-RPC ``error.data``, AIP-193
REST errors, version errors) must reach the client as the SDK writes them, not rewritten as problem+json. The
service's middlewares (API keys, body limit, access log) still wrap it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from a2a.server.routes import create_jsonrpc_routes, create_rest_routes
from a2a.utils.constants import A2A_JSON_MEDIA_TYPE
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from muster_api.dispatch.config import NAME_PATTERN, AgentDefinition, ServedOptions
from muster_api.served.card import REST_PATH, card_document, card_of
from muster_api.served.handler import ServedAgentHandler
from muster_api.web.problems import problem

if TYPE_CHECKING:
    from muster_api.dispatch.component import DispatchState

PREFIX = "/a2a/serve"
CARD_PATH = "/.well-known/agent-card.json"
A2A_MEDIA_TYPE = A2A_JSON_MEDIA_TYPE.encode()
# The card paths a setting (MUSTER_A2A_SERVE_PUBLIC_CARDS) may open to requests without an API key.
PUBLIC_CARDS = rf"^{PREFIX}/{NAME_PATTERN[1:-1]}{re.escape(CARD_PATH)}$"


def _base(request: Request) -> str:
    return str(request.url.replace(path=request.scope.get("root_path", ""), query="", fragment="")).rstrip("/")


def agent_app(state: DispatchState, definition: AgentDefinition, options: ServedOptions) -> Starlette:
    handler = ServedAgentHandler(state, definition.name, card_of(definition, options, ""))

    async def card(request: Request) -> Response:
        return JSONResponse(card_document(card_of(definition, options, _base(request))))

    routes: list[BaseRoute] = [Route(CARD_PATH, card, methods=["GET"])]
    # The JSON-RPC URL is the base URL; clients write it with and without the trailing slash.
    routes += create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)
    routes += create_rest_routes(handler, path_prefix=REST_PATH, enable_v0_3_compat=True)
    return Starlette(routes=routes)


def _content_type(scope: Scope) -> str:
    raw = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
    return raw.decode("latin-1").split(";", 1)[0].strip().lower()


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json")


async def _unsupported_content_type(send: Send, media_type: str) -> None:
    """The JSON-RPC answer to a body that is not declared JSON (the SDK would call it a parse error)."""
    error = {
        "code": -32005,
        "message": f"Content-Type {media_type or '(none)'} is not supported: send application/json",
    }
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _media_type_refusal(start: Message, body: Message) -> tuple[Message, Message]:
    """ContentTypeNotSupportedError's HTTP+JSON status is 415 in the specification's error table (the SDK answers
    400, its gRPC status's); the body stays the SDK's, with its code and reason."""
    try:
        document = json.loads(body.get("body", b""))
        reasons = {detail.get("reason") for detail in document["error"].get("details", [])}
    except (ValueError, KeyError, AttributeError, TypeError):
        return start, body
    if "CONTENT_TYPE_NOT_SUPPORTED" not in reasons:
        return start, body
    document["error"]["code"] = 415
    raw = json.dumps(document).encode()
    headers = [(k, str(len(raw)).encode() if k == b"content-length" else v) for k, v in start["headers"]]
    return {**start, "status": 415, "headers": headers}, {**body, "body": raw}


class _HttpJson:
    """Around an agent's sub-application: what the HTTP+JSON binding (section 11.1 of the specification) and the
    JSON-RPC error table ask of the media types, where the SDK differs. REST answers are labelled
    ``application/json`` (the SDK says ``application/a2a+json``, the same JSON); a JSON-RPC request that is not
    declared JSON gets ContentTypeNotSupportedError (-32005); on HTTP+JSON that error's status is 415."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope["path"][len(scope.get("root_path", "")) :]
        if scope["method"] == "POST" and route == "/" and not _is_json(media := _content_type(scope)):
            await _unsupported_content_type(send, media)
            return

        held: list[Message] = []

        async def relabel(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    (k, b"application/json" if k == b"content-type" and v == A2A_MEDIA_TYPE else v)
                    for k, v in message["headers"]
                ]
                if message["status"] == 400 and route.startswith(REST_PATH):
                    held.append(message)  # an error answer: its body says whether a media type was refused
                    return
            if held and message["type"] == "http.response.body" and not message.get("more_body", False):
                for part in _media_type_refusal(held.pop(), message):
                    await send(part)
                return
            await send(message)

        await self.app(scope, receive, relabel)


@dataclass(frozen=True)
class _Built:
    definition: AgentDefinition
    app: ASGIApp


async def _not_served(scope: Scope, receive: Receive, send: Send, name: str) -> None:
    detail = f"no dispatch agent {name!r} is served over A2A (set a2a = true in its dispatch_agents entry)"
    await problem(404, detail)(scope, receive, send)


class ServedAgents:
    """Mounted at ``PREFIX``: ``/{name}/…`` goes to that agent's sub-application, built when first asked for and
    again once a reload changed the agent's definition."""

    def __init__(self) -> None:
        self._built: dict[str, _Built] = {}

    def _app(self, state: DispatchState, name: str) -> ASGIApp | None:
        definition = state.agents.get(name)
        options = definition.served if definition is not None else None
        if definition is None or options is None:
            return None
        built = self._built.get(name)
        if built is None or built.definition is not definition:
            built = _Built(definition, _HttpJson(agent_app(state, definition, options)))
            self._built[name] = built
        return built.app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        root = scope.get("root_path", "")
        rest = scope["path"][len(root) :] if scope["path"].startswith(root) else scope["path"]
        name, _, _ = rest.lstrip("/").partition("/")
        app = self._app(scope["app"].state.dispatch, name)
        if app is None:
            await _not_served(scope, receive, send, name)
            return
        child = dict(scope, root_path=f"{root}/{name}")
        if rest.rstrip("/") == f"/{name}":
            child["path"] = f"{root}/{name}/"  # the base URL itself is the JSON-RPC endpoint, slash or not
        await app(child, receive, send)
