"""What a ``muster`` process skips at start-up. ``import httpx`` imports its own command line (``httpx._main``:
rich, pygments, click) whenever those are installed, and they are (rich for our console, click for uvicorn): about
200 ms of CPU in every process that imports httpx, ``muster mcp`` included — which a dispatched CLI waits for before
its first model request, so a woken agent paid it on every wake (``bench/runtime``). httpx treats the command line as
optional (a stub ``main`` when its import fails); we never run it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

SKIPPED = "httpx._main"


class _SkipHttpxCli:
    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name == SKIPPED:
            raise ImportError(f"{SKIPPED} is not loaded by muster (httpx's own command line)")
        return None


def skip_httpx_cli() -> None:
    """Before httpx is first imported: leave its command line out (a no-op once httpx is loaded)."""
    if "httpx" not in sys.modules and not any(isinstance(f, _SkipHttpxCli) for f in sys.meta_path):
        sys.meta_path.insert(0, _SkipHttpxCli())
