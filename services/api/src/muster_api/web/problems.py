"""RFC 9457 problem+json for every error: one table from error class to HTTP status.

Each capability contributes its rows in ``muster_api.<capability>.problems.STATUS``; the most specific class wins
(the error's MRO is walked), so a package's root error is the fallback for its whole tree. An error with a ``code``
(``DispatchError``) is looked up by (class, code) first, in ``CODE_STATUS``.
"""

from __future__ import annotations

import logging
import sqlite3
import traceback
import uuid
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
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


# How long a client should wait before retrying while the database is unreachable: reconnecting is attempted on
# every call, so a short wait is enough to see it come back.
RETRY_AFTER_SECONDS = 5
DATABASE_UNAVAILABLE = "database_unavailable"

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,  # no pooled connection came free
    asyncpg.PostgresConnectionError,  # cannot connect, or the connection broke
    asyncpg.InterfaceError,  # the connection was closed under us
    asyncpg.AdminShutdownError,  # the server is shutting down (pg_terminate_backend, a restart)
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,  # the server is starting up or shutting down
    asyncpg.TooManyConnectionsError,
    ConnectionError,  # refused or reset
    TimeoutError,
)
# SQLite's errors are all one class; these messages are about reaching the file, not about the statement.
_SQLITE_UNAVAILABLE = ("database is locked", "unable to open database file", "disk i/o error")


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        orig = getattr(current, "orig", None)
        linked = (current.__cause__, current.__context__, orig if isinstance(orig, BaseException) else None)
        stack.extend(e for e in linked if e is not None)


def database_unavailable(exc: BaseException) -> bool:
    """Whether this error means the database could not be reached (a 503 to retry), not a bug (a 500)."""
    for cause in _causes(exc):
        if isinstance(cause, sa_exc.DBAPIError) and cause.connection_invalidated:
            return True
        if isinstance(cause, _UNAVAILABLE):
            return True
        if isinstance(cause, sqlite3.OperationalError) and str(cause).lower().startswith(_SQLITE_UNAVAILABLE):
            return True
    return False


def _where(exc: BaseException) -> str:
    """Where the error was raised (file:line in function): enough to find it, and no values."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename.rpartition('/')[2]}:{last.lineno} in {last.name}"


def unhandled(exc: BaseException, method: str, path: str) -> JSONResponse:
    """The answer to an error nothing else answered: 503 when the database is out of reach, else a 500 whose
    ``error_id`` is in the one log line written for it. The log names the error's class and where it was raised,
    never its message: a driver's message can carry bound parameters (message bodies, token hashes)."""
    if database_unavailable(exc):
        log.warning("database unavailable method=%s path=%s error=%s", method, path, type(exc).__name__)
        return problem(
            503,
            f"the database is unreachable; retry in {RETRY_AFTER_SECONDS} s",
            instance=path,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            code=DATABASE_UNAVAILABLE,
        )
    error_id = uuid.uuid4().hex[:16]
    log.error(
        "unhandled error error_id=%s method=%s path=%s error=%s at=%s",
        error_id,
        method,
        path,
        type(exc).__name__,
        _where(exc),
    )
    return problem(
        500, f"internal error {error_id}; the server log has a line with this id", instance=path, error_id=error_id
    )


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
        return unhandled(exc, request.method, request.url.path)
    extra: dict[str, Any] = getattr(exc, "problem_extra", None) or {}
    headers = None
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, int | float):
        headers = {"Retry-After": str(max(1, round(retry_after)))}
    return problem(status, str(exc), instance=request.url.path, headers=headers, **extra)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    # Registered per class so that Starlette answers them without re-raising. Anything else is answered by the
    # ``Edge`` middleware: an ``Exception`` handler here would be Starlette's server-error handler, which
    # re-raises after answering, and the server would log the error a second time with its whole traceback.
    for cls in STATUS:
        app.add_exception_handler(cls, _mapped)
