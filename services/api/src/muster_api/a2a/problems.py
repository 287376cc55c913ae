"""How errors of muster_a2a map to HTTP statuses; merged into the one table in muster_api.web.problems."""

from __future__ import annotations

from muster_a2a import (
    AgentConfigError,
    CallTakenOverError,
    MusterA2AError,
    NotContinuableError,
    UnknownCallError,
    UnknownToolError,
)

STATUS: dict[type[Exception], int] = {
    UnknownToolError: 404,
    UnknownCallError: 404,
    # A reload with a broken config file: the detail names the problem (a 5xx would hide it).
    AgentConfigError: 422,
    # Not an error of the call: another instance follows it now (the body names the call to look up).
    CallTakenOverError: 409,
    # The answer names a call whose task does not wait for one (another tool's, or answered already).
    NotContinuableError: 409,
    MusterA2AError: 500,
}
