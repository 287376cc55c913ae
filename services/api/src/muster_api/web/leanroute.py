"""Routes answered without FastAPI's general request handler, for the API's hot paths.

FastAPI's handler resolves a route's dependency tree on every request (cache keys, scopes, an exit stack), parses
the content type with ``email.message``, and prepares background tasks and a sub-response the routes here never use:
measured on the mesh's send, several times the CPU of a no-op route. A ``LeanRoute`` whose endpoint takes only
path, query and header parameters (one value each), a body, the request, and dependencies that are ``Direct``
(computed from the request alone), is answered by a handler that does just that: the same steps in the same order,
each parameter validated by its FastAPI field as FastAPI's handler does it, so a bad input is refused with the same
errors. What FastAPI works out per request from the annotations (which source, which key, one value or a list) is
worked out here once. The route is still an ``APIRoute``: the OpenAPI document is built from it as before. Any
other endpoint (one that does not return a ``Response`` itself, a dependency of another kind, a cookie) gets
FastAPI's handler.

A ``Direct`` dependency is not looked up in ``app.dependency_overrides``. The private framework names this needs are
imported from ``framework`` (which says why); an app made with ``lean_routes`` off serves these routes through
FastAPI's handler and router.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from copy import deepcopy
from typing import Any, get_type_hints

from fastapi import params
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from pydantic_core import PydanticUndefined
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Receive, Scope, Send

from muster_api.web.framework import (
    ModelField,
    effective_route_context,
    field_annotation_is_scalar,
    get_missing_field_error,
    get_route_path,
    route_selected,
)
from muster_api.web.jsonbody import StrictJsonRoute, parse_body

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class Direct(ABC):
    """A dependency that needs nothing but the request: a ``LeanRoute`` calls ``direct`` instead of resolving it.
    As a FastAPI dependency (any other route) it is awaited with the request."""

    @abstractmethod
    def direct(self, request: Request) -> Any: ...

    async def __call__(self, request: Request) -> Any:
        return self.direct(request)


def _directs(dependant: Dependant) -> list[tuple[str, Direct]] | None:
    found = []
    for sub in dependant.dependencies:
        if not isinstance(sub.call, Direct) or sub.name is None:
            return None
        found.append((sub.name, sub.call))
    return found


Validator = Callable[[Any], tuple[Any, list[Any]]]


def _validator(field: ModelField, loc: tuple[str, ...]) -> Validator:
    """FastAPI's validation of one value (``_validate_value_with_model_field``): absent, a required field is an
    error and an optional one its default; present, the field's own validation, errors located at ``loc``."""
    info = field.field_info

    def validate(value: Any) -> tuple[Any, list[Any]]:
        if value is PydanticUndefined:
            if info.is_required():
                return None, [get_missing_field_error(loc=loc)]
            value = deepcopy(field.default)
            if not info.validate_default:
                return value, []
        return field.validate(value, {}, loc=loc)

    return validate


def _param_validators(fields: list[ModelField]) -> list[tuple[str, str, Validator]] | None:
    """(name, key, validator) of each path or query parameter, if each is one scalar value under one key (the
    case FastAPI's ``request_params_to_args`` reads with ``get``, an empty-string value included)."""
    found = []
    for field in fields:
        info = field.field_info
        if not isinstance(info, params.Param) or info.validation_alias is not None:
            return None
        if not field_annotation_is_scalar(info.annotation):
            return None
        found.append((field.name, field.alias, _validator(field, (info.in_.value, field.alias))))
    return found


def _body_validators(fields: list[ModelField], embed: bool) -> list[tuple[str, Validator]] | None:
    """No body, or a body that is one field, not embedded: FastAPI validates the whole body against it, errors located
    at ``body``. None: another kind of body."""
    if not fields:
        return []
    info = fields[0].field_info
    if len(fields) != 1 or embed or not isinstance(info, params.Body) or isinstance(info, params.Form):
        return None
    return [(fields[0].name, _validator(fields[0], ("body",)))]


def _read(values: dict[str, Any], errors: list[Any], validators: list[tuple[str, str, Validator]], source: Any) -> None:
    for name, key, validate in validators:
        raw = source.get(key)
        value, wrong = validate(PydanticUndefined if raw is None else raw)
        if wrong:
            errors.extend(wrong)
        else:
            values[name] = value


def _plain(dependant: Dependant) -> bool:
    """No parameter of a kind the lean handler does not read."""
    return not (
        dependant.cookie_params
        or dependant.background_tasks_param_name
        or dependant.response_param_name
        or dependant.websocket_param_name
        or dependant.security_scopes_param_name
    )


def _lean(dependant: Dependant, embed_body_fields: bool) -> Handler | None:
    directs = _directs(dependant)
    path = _param_validators(dependant.path_params)
    query = _param_validators(dependant.query_params)
    header = _param_validators(dependant.header_params)
    body_fields = _body_validators(dependant.body_params, embed_body_fields)
    endpoint = dependant.call
    if directs is None or path is None or query is None or header is None or body_fields is None:
        return None
    if not _plain(dependant):
        return None
    assert endpoint is not None
    request_name = dependant.request_param_name

    async def handler(request: Request) -> Response:
        body: Any = PydanticUndefined
        if body_fields:
            raw = await request.body()
            if raw:
                body = parse_body(raw, request.headers.get("content-type"))
        # FastAPI's order: the body is read, the dependencies run, then the parameters are validated together.
        values: dict[str, Any] = {name: dependency.direct(request) for name, dependency in directs}
        errors: list[Any] = []
        if path:
            _read(values, errors, path, request.path_params)
        if query:
            _read(values, errors, query, request.query_params)
        if header:
            _read(values, errors, header, request.headers)
        for name, validate in body_fields:
            value, wrong = validate(body)
            values[name] = value
            errors.extend(wrong)
        if errors:
            raise RequestValidationError(errors, body=None if body is PydanticUndefined else body)
        if request_name:
            values[request_name] = request
        response: Response = await endpoint(**values)
        return response

    return handler


def _answers_response(endpoint: Callable[..., Any] | None) -> bool:
    """An ``async def`` that returns a ``Response`` itself: FastAPI's handler would pass that through untouched."""
    if endpoint is None or not inspect.iscoroutinefunction(endpoint):
        return False
    returns = get_type_hints(endpoint).get("return")
    return isinstance(returns, type) and issubclass(returns, Response)


class LeanRoute(StrictJsonRoute):
    def get_route_handler(self) -> Handler:
        # Included in a router, the route is answered through a copy of it with the inclusion's settings (its
        # dependencies among them): FastAPI builds that copy's handler here, naming the copy in this variable.
        context = effective_route_context.get()
        route: Any = context if context is not None and context.original_route is self else self
        plain = super().get_route_handler()
        if route.is_sse_stream or route.is_json_stream or not _answers_response(route.dependant.call):
            return plain
        lean = _lean(route.dependant, route._embed_body_fields)
        if lean is None:
            return plain

        async def handler(request: Request) -> Response:
            # An app made with lean_routes off (Settings) is answered by FastAPI's handler.
            return await (lean if getattr(request.app.state, "lean_routes", True) else plain)(request)

        return handler


class HotPaths(BaseRoute):
    """Put first in the app's routes: finds a ``LeanRoute`` without FastAPI's router, which tries each route of
    each included router in turn, and then once more the routes of the router it chose (measured: a dozen route
    matches for a send, and most of the router's CPU for a run's POST and its stream).

    A route without path parameters is found by (method, path) in one dict lookup, holding only the pairs the router
    itself resolves to the same route (checked when built). A route with path parameters whose text before the first
    parameter (its prefix) ends with ``/`` is found by (method, prefix), then its own match, in the router's order
    among the routes under that key; it is held only if no route before it in the router's order that is not under
    the same key could take the same method and a path with that prefix, so the first of them that matches is the
    one the router would choose. A method the route does not take, a trailing slash, a path none of them match, or any
    other path goes on to the router as before."""

    def __init__(self, routes: list[BaseRoute]) -> None:
        self.table: dict[tuple[str, str], Any] = {}
        self.prefixed: dict[tuple[str, str], list[Any]] = {}
        order = [(included, context) for included in routes for context in _contexts(included)]
        for index, (included, context) in enumerate(order):
            if isinstance(getattr(context, "original_route", None), LeanRoute):
                if context.param_convertors:
                    self._add_prefixed(context, [earlier for _, earlier in order[:index]])
                else:
                    self._add(routes, included, context)
        self.lengths = sorted({len(prefix) for _, prefix in self.prefixed})

    def _add(self, routes: list[BaseRoute], included: Any, context: Any) -> None:
        for method in context.methods or ():
            probe: Scope = {"type": "http", "path": context.path, "root_path": "", "method": method}
            if _routed_to(routes, probe, included, context):
                self.table[(method, context.path)] = context

    def _add_prefixed(self, context: Any, before: list[Any]) -> None:
        prefix = context.path_format.partition("{")[0]
        if not prefix.endswith("/"):
            return
        for method in context.methods or ():
            held = self.prefixed.get((method, prefix), [])
            others = [earlier for earlier in before if all(earlier is not h for h in held)]
            if not any(self._may_take(earlier, method, prefix) for earlier in others):
                self.prefixed[(method, prefix)] = [*held, context]

    def _may_take(self, route: Any, method: str, prefix: str) -> bool:
        """Whether ``route`` may answer ``method`` on some path starting with ``prefix`` (in doubt, yes)."""
        path = getattr(route, "path_format", None)
        if path is None:
            return True
        methods = getattr(route, "methods", None)
        if methods and method not in methods:
            return False  # at most a partial match: the router goes on to a full one
        static, brace, _ = path.partition("{")
        if not brace and isinstance(getattr(route, "original_route", route), Route):
            # One path only: the dict answers it first when it holds it.
            return path.startswith(prefix) and self.table.get((method, path)) is not route
        return static.startswith(prefix) or prefix.startswith(static)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http":
            method, path = scope["method"], get_route_path(scope)
            context = self.table.get((method, path))
            if context is not None:
                # What the route's own match puts in the scope.
                return Match.FULL, {"endpoint": context.endpoint, "path_params": {}, "route": context.original_route}
            for length in self.lengths:
                for context in self.prefixed.get((method, path[:length]), ()):
                    match, child = context.matches(scope)
                    if match == Match.FULL:
                        return match, {**child, "route": context.original_route, HOT: context}
        return Match.NONE, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        context = scope.pop(HOT, None) or self.table[(scope["method"], get_route_path(scope))]
        route_selected(scope=scope, path=context.path_format)  # the route's name for OpenTelemetry, when enabled
        await context.app(scope, receive, send)


HOT = "muster.hot_route"  # the route context ``HotPaths.matches`` chose by prefix, for its ``handle``


def _contexts(route: BaseRoute) -> list[Any]:
    """An included router's route contexts in the router's order; any other route stands for itself."""
    contexts = getattr(route, "effective_route_contexts", None)
    return [route] if contexts is None else list(contexts())


def _routed_to(routes: list[BaseRoute], probe: Scope, included: Any, context: object) -> bool:
    """Whether FastAPI's router sends ``probe`` to ``context``: the first route that matches it in full is the
    inclusion holding ``context``, and the first of that inclusion's routes to match it is ``context``."""
    for route in routes:
        match, _ = route.matches(dict(probe))
        if match == Match.FULL:
            return route is included and _chosen(route, probe) is context
        if match == Match.PARTIAL:
            return False
    return False


def _chosen(included: Any, probe: Scope) -> object:
    """The route context an inclusion (FastAPI's ``_IncludedRouter``) picks for ``probe``."""
    return included._match(dict(probe))[3]
