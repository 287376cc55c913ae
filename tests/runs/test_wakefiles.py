"""Wake files: a touch of a kind or of a run wakes the watcher with that name, through inotify on the event loop
(Linux) and through watchfiles (every other platform); a file of no kind wakes nobody."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from muster_api.dispatch.wakefiles import WakeFiles

pytestmark = pytest.mark.anyio

WATCHERS = ["watchfiles", pytest.param("inotify", marks=pytest.mark.skipif(sys.platform != "linux", reason="Linux"))]


@pytest.mark.parametrize("watcher", WATCHERS)
async def test_a_touch_wakes_the_watcher_with_its_name(tmp_path: Path, watcher: str) -> None:
    files = WakeFiles(tmp_path / "muster.db")
    woken: list[str] = []
    arrived = anyio.Event()

    def wake(name: str) -> None:
        woken.append(name)
        arrived.set()

    watch: Callable[..., object] = getattr(files, f"watch_{watcher}")
    async with anyio.create_task_group() as group:
        await group.start(lambda task_status: watch(wake, task_status=task_status))
        (files.directory / "unrelated").write_bytes(b"x")
        for touch, name in ((lambda: files.touch_run("r1"), "run.r1"), (lambda: files.touch("queued"), "queued")):
            touch()
            with anyio.fail_after(10):
                while name not in woken:
                    await arrived.wait()
                    arrived = anyio.Event()
        group.cancel_scope.cancel()
    assert "unrelated" not in woken
    assert not (files.directory / "run.r1").exists()  # a run's file is removed once written
