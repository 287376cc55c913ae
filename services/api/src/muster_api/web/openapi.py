"""The OpenAPI document says what the API answers: the problem responses that apply to every route are added here,
once, beside the ones each route documents itself (its own rules: 404 for a name, 409 for a conflict…).

Every route can answer: 401/403 when the service has API keys (``middleware.Edge``), 422 for input that breaks a rule,
503 while the database is unreachable; a route that takes a body, 413 over the body limit.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

PROBLEM_CONTENT: dict[str, Any] = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "RFC 9457 problem details; `code` is stable where the service names the rule, `errors` lists "
    "each field and rule of invalid input.",
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "code": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "field": {"type": "string"},
                    "rule": {"type": "string"},
                    "message": {"type": "string"},
                },
            },
        },
    },
    "required": ["type", "title", "status", "detail"],
}
COMMON: dict[str, str] = {
    "401": "credentials missing: an `X-API-Key` (when the service has keys) or the session token (`code` says which)",
    "403": "credentials of someone else, or an `X-API-Key` that is not valid here",
    "422": "invalid input: `errors` names each field and rule",
    "503": "the database is unreachable (`code` database_unavailable, `Retry-After`); retry",
}
WITH_BODY: dict[str, str] = {"413": "the request body is over the service's limit"}
RETRY_AFTER: dict[str, Any] = {
    "Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}
}


def _add(operation: dict[str, Any], status: str, description: str) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    response = responses.setdefault(status, {"description": description})
    # A route's own description is kept; its body is a problem whatever it said.
    response["content"] = PROBLEM_CONTENT
    if status in ("429", "503"):
        response["headers"] = RETRY_AFTER


def _not_nullable(parameter: dict[str, Any]) -> None:
    """A query, header or path parameter is absent or a string: it cannot be null, so an optional one is documented
    as its type alone (FastAPI writes ``anyOf: [type, null]`` for ``X | None``)."""
    schema = parameter.get("schema", {})
    options = schema.get("anyOf")
    if not isinstance(options, list):
        return
    kept = [option for option in options if option != {"type": "null"}]
    if len(kept) == 1:
        schema.pop("anyOf")
        schema.update(kept[0])


def document(schema: dict[str, Any]) -> dict[str, Any]:
    schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    for item in schema.get("paths", {}).values():
        for method, operation in item.items():
            if method not in ("get", "head", "post", "put", "patch", "delete"):
                continue
            for parameter in operation.get("parameters", []):
                _not_nullable(parameter)
            for status, description in COMMON.items():
                _add(operation, status, description)
            if "requestBody" in operation:
                for status, description in WITH_BODY.items():
                    _add(operation, status, description)
            for status in list(operation.get("responses", {})):
                if status.startswith(("4", "5")):
                    _add(operation, status, "")
    return schema


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    description=app.description,
                    routes=app.routes,
                )
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
