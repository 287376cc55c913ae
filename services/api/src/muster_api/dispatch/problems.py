"""How errors of muster_dispatch and of the dispatch routes map to HTTP statuses; merged into the one table in
muster_api.web.problems. ``DispatchError`` carries a code: ``CODE_STATUS`` maps each code (a request the package
refuses). A turn that fails is never an HTTP error: it is a run with status ``failed`` and its error code."""

from __future__ import annotations

from muster_api.dispatch.errors import (
    RunConflictError,
    RunFinishedError,
    RunRequestError,
    UnknownAgentError,
    UnknownRunError,
    WorkspaceBusyError,
    WorkspaceRefusedError,
)
from muster_dispatch import DispatchError

STATUS: dict[type[Exception], int] = {
    RunRequestError: 400,
    UnknownAgentError: 404,
    UnknownRunError: 404,
    RunFinishedError: 409,
    WorkspaceBusyError: 409,
    RunConflictError: 409,
    WorkspaceRefusedError: 422,
    DispatchError: 422,
}

CODE_STATUS: dict[tuple[type[Exception], str], int] = {
    (DispatchError, "configuration"): 422,
    (DispatchError, "prompt"): 422,
    (DispatchError, "workspace"): 422,
    (DispatchError, "session"): 422,
    (DispatchError, "replay"): 422,
    (DispatchError, "steering"): 409,
    (DispatchError, "quota"): 429,
    (DispatchError, "timeout"): 504,
    (DispatchError, "aborted"): 409,
    (DispatchError, "provider"): 503,
    (DispatchError, "process"): 502,
    (DispatchError, "response"): 502,
}
