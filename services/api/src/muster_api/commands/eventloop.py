"""The event loop of the service's own processes: uvloop where it is installed (uvicorn[standard] brings it, and
``muster serve`` runs on it), for ``anyio.run``. A process whose work is sockets and pipes — a worker's database round
trips and CLI pipes, an MCP tool call's pipe and socket — has its loop do them in C."""

from __future__ import annotations

import importlib.util
from typing import Any


def loop_options() -> dict[str, Any]:
    return {"use_uvloop": importlib.util.find_spec("uvloop") is not None}
