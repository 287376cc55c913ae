"""Errors of the service's dispatch routes (the package's own ``DispatchError`` covers the turns themselves).

MusterApiError
└── RunRequestError            a run request the service refuses
    ├── UnknownAgentError      no dispatch agent of that name (404)
    ├── UnknownRunError        no run of that id (404)
    ├── RunFinishedError       steer or cancel of a run that is over (409)
    ├── WorkspaceBusyError     another run is queued or running on the workspace (409)
    ├── RunConflictError       an idempotency key reused for another request, a continuation of a run that has no
    │                          conversation yet (409)
    └── WorkspaceRefusedError  a workspace name breaking a confinement rule (422, the rule named)
"""

from __future__ import annotations

from typing import Any

from muster_api.errors import MusterApiError


class RunRequestError(MusterApiError):
    """A run request the service refuses; ``problem_extra`` names the field and the rule where there is one."""

    def __init__(self, message: str, *, field: str | None = None, rule: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.rule = rule

    @property
    def problem_extra(self) -> dict[str, Any]:
        if self.field is None:
            return {}
        return {"errors": [{"field": self.field, "rule": self.rule or "invalid", "message": str(self)}]}


class UnknownAgentError(RunRequestError):
    pass


class UnknownRunError(RunRequestError):
    pass


class RunFinishedError(RunRequestError):
    pass


class WorkspaceBusyError(RunRequestError):
    pass


class RunConflictError(RunRequestError):
    pass


class WorkspaceRefusedError(RunRequestError):
    pass
