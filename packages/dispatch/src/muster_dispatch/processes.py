"""Finding every process a CLI started, including tools it moved to their own session (both CLIs run shell tools
with setsid, out of reach of a process-group kill)."""

from __future__ import annotations

import contextlib
import os

RUN_VARIABLE = "MUSTER_RUN_ID"  # set in the CLI's environment; its descendants inherit it


def descendants(root: int, marker: str | None = None) -> set[int]:
    """Processes below ``root`` (by parent links), plus any process whose environment carries ``marker``
    (``MUSTER_RUN_ID=<marker>``: a descendant already orphaned and re-parented). Linux /proc; empty elsewhere."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for name in entries:
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
            # The command name may hold spaces and parentheses: the fields start after the last ')'.
            parents[int(name)] = int(data[data.rfind(b")") + 2 :].split()[1])
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    frontier = [root]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in found:
                found.add(child)
                frontier.append(child)
    if marker:
        needle = f"{RUN_VARIABLE}={marker}".encode()
        own = os.getpid()
        for pid in parents:
            if pid in found or pid in (own, root):
                continue
            with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.add(pid)
    found.discard(os.getpid())
    return found


def signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
