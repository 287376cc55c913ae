"""Wake files: how long a touch takes to wake a waiter, inotify on the event loop (asyncinotify, the Linux path)
against watchfiles (the path elsewhere), in alternating pairs; and what each watcher costs an idle process.

A thread of this process touches a run's wake file (as a worker's commit does, ``WakeFiles.touch`` of a ``run_file``)
200 times, 5 ms apart, and the watcher's callback on the event loop notes when it came: latency = wake - touch. Then
one second with no touch: the process's CPU in that second (the watcher's thread, for watchfiles, included).
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import anyio

from muster_api.dispatch.wakefiles import WakeFiles, run_file

PAIRS = 6
TOUCHES = 200
GAP_S = 0.005


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_leg(files: WakeFiles, how: str) -> tuple[float, float, float]:
    woken: dict[str, float] = {}
    arrived = anyio.Event()

    def wake(name: str) -> None:
        woken.setdefault(name, time.perf_counter())
        arrived.set()

    watch = files.watch_inotify if how == "asyncinotify" else files.watch_watchfiles
    latencies: list[float] = []
    async with anyio.create_task_group() as group:
        await group.start(lambda task_status: watch(wake, task_status=task_status))
        for index in range(TOUCHES):
            name = run_file(f"r{index:04d}")
            files.follow(name)
            woken.pop(name, None)
            touched: list[float] = []

            def touch(name: str = name, touched: list[float] = touched) -> None:
                touched.append(time.perf_counter())
                files.touch(name)

            thread = threading.Thread(target=touch)
            thread.start()
            with anyio.fail_after(5):
                while name not in woken:
                    await arrived.wait()
                    arrived = anyio.Event()
            thread.join()
            latencies.append((woken[name] - touched[0]) * 1000)
            await anyio.sleep(GAP_S)
        idle_from = time.process_time()
        await anyio.sleep(1.0)
        idle_ms = (time.process_time() - idle_from) * 1000
        group.cancel_scope.cancel()
    return pct(latencies, 0.5), pct(latencies, 0.99), idle_ms


async def main() -> None:
    if sys.platform != "linux":
        print("asyncinotify is the Linux path: nothing to compare here")
        return
    with tempfile.TemporaryDirectory() as tmp:
        files = WakeFiles(Path(tmp) / "bench.db")
        files.directory.mkdir()
        print(f"touch -> wake, {TOUCHES} touches {GAP_S * 1000:.0f} ms apart; idle: the process's CPU in 1 s")
        for pair in range(1, PAIRS + 1):
            line = []
            for how in ("watchfiles", "asyncinotify"):
                p50, p99, idle = await one_leg(files, how)
                line.append(f"{how:<12} p50 {p50:5.2f} ms p99 {p99:5.2f} ms idle {idle:5.1f} ms/s")
            print(f"  pair {pair}: " + " | ".join(line), flush=True)


if __name__ == "__main__":
    anyio.run(main, backend_options={"use_uvloop": True})
