"""The errors of muster_dispatch: one root class, a code that says what went wrong.

Error tree::

    DispatchError (code: configuration | process | timeout | aborted | quota | session | replay | steering
                   | prompt | response | workspace | provider)
    └── ReplayDivergence (code "replay": a replayed turn does not match the journal)

``details["unavailable"]`` is set on a service outage or connection failure (read it with ``unavailable_fault``);
``details["reset_at"]`` (ISO 8601) is set on a ``quota`` error when the CLI said when the limit resets.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

ErrorCode = Literal[
    "configuration",
    "process",
    "timeout",
    "aborted",
    "quota",
    "session",
    "replay",
    "steering",
    "prompt",
    "response",
    "workspace",
    "provider",
]

ERROR_CODES: frozenset[str] = frozenset(get_args(ErrorCode))


class DispatchError(Exception):
    """A turn could not be dispatched or did not complete; ``code`` is one of ``ERROR_CODES``."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        details: dict[str, Any] | None = None,
        cause: BaseException | None = None,
    ) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown dispatch error code {code!r}")
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause

    @property
    def problem_extra(self) -> dict[str, Any]:
        """Members the service adds to the problem+json body."""
        return {"code": self.code, "details": self.details}

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DispatchError:
        code = data.get("code")
        message = str(data.get("message", ""))
        details = data.get("details") if isinstance(data.get("details"), dict) else None
        if code == "replay":
            return ReplayDivergence(message, details)
        return cls(code if code in ERROR_CODES else "process", message, details)  # type: ignore[arg-type,unused-ignore]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class ReplayDivergence(DispatchError):
    """A replayed turn diverged from its journal (prompt mismatch under ``divergence="fail"``, or exhausted)."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__("replay", message, details)
