"""RFC 9457 problem+json for every error: one table from error class to HTTP status.

Each capability contributes its rows in ``muster_api.<capability>.problems.STATUS``; the most specific class wins
(the error's MRO is walked), so a package's root error is the fallback for its whole tree. An error with a ``code``
(``DispatchError``) is looked up by (class, code) first, in ``CODE_STATUS``.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from muster_api.a2a.problems import STATUS as A2A_STATUS
from muster_api.dispatch.problems import CODE_STATUS as DISPATCH_CODE_STATUS
from muster_api.dispatch.problems import STATUS as DISPATCH_STATUS
from muster_api.errors import ConfigurationError, NotReadyError, PayloadTooLargeError
from muster_api.mesh.problems import STATUS as MESH_STATUS

log = logging.getLogger("muster.api")

PROBLEM_JSON = "application/problem+json"

STATUS: dict[type[Exception], int] = {
    NotReadyError: 503,
    PayloadTooLargeError: 413,
    ConfigurationError: 500,
    **MESH_STATUS,
    **A2A_STATUS,
    **DISPATCH_STATUS,
}


CODE_STATUS: dict[tuple[type[Exception], str], int] = {**DISPATCH_CODE_STATUS}


def status_for(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        for cls in type(exc).__mro__:
            if (cls, code) in CODE_STATUS:
                return CODE_STATUS[(cls, code)]
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return None


def problem(
    status: int,
    detail: str,
    *,
    instance: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    phrase = HTTPStatus(status).phrase
    body: dict[str, Any] = {
        "type": f"https://muster.dev/problems/{phrase.lower().replace(' ', '-')}",
        "title": phrase,
        "status": status,
        "detail": detail,
    }
    if instance is not None:
        body["instance"] = instance
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _field(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:] or parts
    return ".".join(parts) or "body"


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "field": _field(tuple(e.get("loc", ()))),
            "rule": e.get("type", "invalid"),
            "message": e.get("msg", ""),
        }
        for e in exc.errors()
    ]
    summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    return problem(422, f"invalid request: {summary}", instance=request.url.path, errors=errors)


async def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    response = problem(exc.status_code, str(exc.detail), instance=request.url.path)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _mapped(request: Request, exc: Exception) -> JSONResponse:
    status = status_for(exc)
    if status is None or (status >= 500 and not isinstance(exc, NotReadyError)):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, "internal error; see the server log", instance=request.url.path)
    extra: dict[str, Any] = getattr(exc, "problem_extra", None) or {}
    return problem(status, str(exc), instance=request.url.path, **extra)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    # Registered per class so that Starlette answers them without re-raising; `Exception` is the last resort.
    for cls in STATUS:
        app.add_exception_handler(cls, _mapped)
    app.add_exception_handler(Exception, _mapped)
