"""CPU time spent by the processes of a benchmark: Python processes from ``/proc/<pid>/stat`` (utime + stime of all
their threads), PostgreSQL backends from ``/proc/<pid>/schedstat`` (time on CPU in nanoseconds: a tick of
``/proc/<pid>/stat`` is 10 ms, and a dozen backends each read to the tick before and after blur a figure of a few
milliseconds per operation).

A ``CpuMeter`` takes named groups of processes, each a function giving the group's pids now (a PostgreSQL database's
backends come and go with the pools), and reports each group's CPU seconds between ``start()`` and ``stop()``. A pid
that appeared in between counts from zero; one that ended in between loses what it spent (pools keep theirs)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """utime + stime of a process so far, all its threads (fields 14 and 15 of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu(pid: int) -> float:
    """Time on CPU of a single-threaded process so far (first field of /proc/<pid>/schedstat, nanoseconds)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def postgres_backends(database: str) -> list[int]:
    """The server processes of a PostgreSQL on this machine serving ``database`` (their process title names it:
    ``postgres: [cluster: ]user database host(port) state``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith("postgres: ") and f" {database} " in title:
            found.append(int(entry.name))
    return found


Group = tuple[Callable[[], Iterable[int]], Callable[[int], float]]


def _read(groups: dict[str, Group]) -> dict[str, dict[int, float]]:
    taken: dict[str, dict[int, float]] = {}
    for name, (pids, reader) in groups.items():
        taken[name] = {}
        for pid in pids():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # ended since it was listed
                taken[name][pid] = reader(pid)
    return taken


class CpuMeter:
    def __init__(self, groups: dict[str, Group]) -> None:
        self.groups = groups
        self._before: dict[str, dict[int, float]] = {}

    def start(self) -> None:
        self._before = _read(self.groups)

    def stop(self) -> dict[str, float]:
        """CPU seconds of each group since ``start()``."""
        after = _read(self.groups)
        return {
            name: sum(spent - self._before[name].get(pid, 0.0) for pid, spent in now.items())
            for name, now in after.items()
        }
