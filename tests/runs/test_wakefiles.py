"""Wake files: a touch of a kind or of a run's file wakes the watcher with that name, through inotify on the event
loop (Linux: only the files followed) and through watchfiles (every other platform: the whole directory); a file of
no kind wakes nobody."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from muster_api.dispatch.wakefiles import BUCKETS, KINDS, RUN_PREFIX, WakeFiles, run_file

pytestmark = pytest.mark.anyio

LINUX = pytest.mark.skipif(sys.platform != "linux", reason="the inotify watcher is Linux's")
WATCHERS = ["watchfiles", pytest.param("inotify", marks=LINUX)]


class Woken:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.arrived = anyio.Event()

    def __call__(self, name: str) -> None:
        self.names.append(name)
        self.arrived.set()

    async def until(self, name: str) -> None:
        with anyio.fail_after(10):
            while name not in self.names:
                await self.arrived.wait()
                self.arrived = anyio.Event()


@pytest.mark.parametrize("watcher", WATCHERS)
async def test_a_touch_wakes_the_watcher_with_its_name(tmp_path: Path, watcher: str) -> None:
    files = WakeFiles(tmp_path / "muster.db")
    woken = Woken()
    watch: Callable[..., object] = getattr(files, f"watch_{watcher}")
    files.follow(run_file("r1"))  # before the watch starts: set up with it
    async with anyio.create_task_group() as group:
        await group.start(lambda task_status: watch(woken, task_status=task_status))
        files.follow("queued")  # while it runs: at once
        (files.directory / "unrelated").write_bytes(b"x")
        for name in (run_file("r1"), "queued"):
            files.touch(name)
            await woken.until(name)
        group.cancel_scope.cancel()
    assert "unrelated" not in woken.names


def test_a_run_s_file_is_one_of_a_fixed_few() -> None:
    names = {run_file(f"run-{index}") for index in range(5000)}
    assert len(names) == BUCKETS and all(name.startswith(RUN_PREFIX) for name in names)
    assert run_file("run-1") == run_file("run-1")


@LINUX
async def test_the_inotify_watcher_hears_only_the_files_it_follows(tmp_path: Path) -> None:
    """An instance that followed no run hears no run's writes, and a worker no run's rows: only the files followed
    wake the watcher, each from the moment it is followed."""
    files, writer = WakeFiles(tmp_path / "muster.db"), WakeFiles(tmp_path / "muster.db")
    woken = Woken()
    followed, other = run_file("run-1"), run_file("run-2")
    assert followed != other
    async with anyio.create_task_group() as group:
        await group.start(lambda task_status: files.watch_inotify(woken, task_status=task_status))
        files.follow(followed)
        files.follow(followed)  # one watch, one wake-up a touch
        for name in (other, *KINDS, followed):
            writer.touch(name)
        await woken.until(followed)
        files.follow("controls")
        writer.touch("controls")  # touched after the others: heard after them, if they were heard
        await woken.until("controls")
        group.cancel_scope.cancel()
    assert woken.names == [followed, "controls"]
