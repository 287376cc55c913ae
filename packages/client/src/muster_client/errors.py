"""Errors of muster_client. A problem+json answer of the service becomes an ``ApiError`` carrying its ``status``,
its stable ``code`` (the service's, or one named after the status when the problem has none), its ``detail`` and,
for invalid input, ``errors`` (each ``{field, rule, message}``).

MusterClientError              root: anything this client raises
├── ServiceUnreachable         no answer at all: connection refused, DNS, a timeout (the service is down or elsewhere)
├── UnexpectedAnswer           an answer that is not what the route promises (not JSON, wrong shape)
└── ApiError                   the service answered a problem (status ≥ 400)
    ├── BadRequest             400
    ├── Unauthorized           401: no usable credentials (API key, or the agent's session token)
    ├── Forbidden              403: credentials of someone else
    ├── NotFound               404
    ├── Conflict               409: an expired recipient, an idempotency key reused with other arguments…
    ├── PayloadTooLarge        413
    ├── InvalidRequest         422: ``errors`` names each field and rule
    ├── TooManyRequests        429: ``retry_after`` seconds from the Retry-After header
    └── ServerError            5xx (503: not ready, or the database unreachable; ``retry_after`` when said)
"""

from __future__ import annotations

from typing import Any


class MusterClientError(Exception):
    """Root of every error muster_client raises."""


class ServiceUnreachable(MusterClientError):
    """The service gave no answer: it is not running at that URL, or it did not answer in time."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"the Muster service at {url} is not reachable ({reason})")
        self.url = url
        self.reason = reason


class UnexpectedAnswer(MusterClientError):
    """The service answered, but not with the shape the route promises."""


class ApiError(MusterClientError):
    """A problem+json answer (RFC 9457). ``problem`` is the whole body as received."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        title: str = "",
        errors: list[dict[str, Any]] | None = None,
        problem: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.retry_after = retry_after
        self.status = status
        self.code = code
        self.detail = detail
        self.title = title
        self.errors = errors or []
        self.problem = problem or {}


class BadRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class PayloadTooLarge(ApiError):
    pass


class InvalidRequest(ApiError):
    pass


class TooManyRequests(ApiError):
    pass


class ServerError(ApiError):
    pass


BY_STATUS: dict[int, tuple[type[ApiError], str]] = {
    400: (BadRequest, "bad_request"),
    401: (Unauthorized, "unauthorized"),
    403: (Forbidden, "forbidden"),
    404: (NotFound, "not_found"),
    409: (Conflict, "conflict"),
    413: (PayloadTooLarge, "payload_too_large"),
    422: (InvalidRequest, "invalid_request"),
    429: (TooManyRequests, "too_many_requests"),
}
"""The class raised for each status, and the ``code`` given when the problem body names none."""


def error_for(status: int, body: dict[str, Any], fallback_detail: str, *, retry_after: float | None = None) -> ApiError:
    """The error for a problem answer: its class by status, its code from the body when the body has one."""
    if status in BY_STATUS:
        cls, default_code = BY_STATUS[status]
    elif status >= 500:
        cls, default_code = ServerError, "server_error"
    else:
        cls, default_code = ApiError, f"http_{status}"
    code = body.get("code")
    detail = body.get("detail")
    errors = body.get("errors")
    return cls(
        status,
        code if isinstance(code, str) and code else default_code,
        detail if isinstance(detail, str) and detail else fallback_detail,
        title=str(body.get("title") or ""),
        errors=[e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else None,
        problem=body,
        retry_after=retry_after,
    )
