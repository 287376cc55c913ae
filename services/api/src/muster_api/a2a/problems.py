"""How errors of muster_a2a map to HTTP statuses; merged into the one table in muster_api.problems."""

from __future__ import annotations

from muster_a2a import AgentConfigError, MusterA2AError, UnknownCallError, UnknownToolError

STATUS: dict[type[Exception], int] = {
    UnknownToolError: 404,
    UnknownCallError: 404,
    # A reload with a broken config file: the detail names the problem (a 5xx would hide it).
    AgentConfigError: 422,
    MusterA2AError: 500,
}
