"""``muster serve`` and ``muster worker`` as real processes on one database, for the multi-process run tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.net import READY_WITHIN, free_port

ROOT = Path(__file__).resolve().parents[2]
MUSTER = Path(sys.executable).with_name("muster")

# A deadline for a failure, never waited out when all is well: a loaded 2-core machine took 55 s to start a worker.


KEPT = ("MUSTER_CLI_CACHE", "MUSTER_HOST_HOME")  # the cache of the pinned CLIs; the fake host home of the logins


def process_env(db_url: str, config: Path, tmp_path: Path, name: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_") or k in KEPT}
    env.update(
        MUSTER_DATABASE_URL=db_url,
        MUSTER_CONFIG=str(config),
        MUSTER_WORKSPACES_ROOT=str(tmp_path / "workspaces"),
        MUSTER_DISPATCH_HOMES=str(tmp_path / f"homes-{name}"),
        PYTHONPATH=str(ROOT),  # the custom agents of the tests import as tests.runs.agents
    )
    env.update(extra)
    return env


@contextmanager
def worker(env: Mapping[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen([str(MUSTER), "worker"], env=dict(env), cwd=ROOT, stdout=out, stderr=out)
        try:
            _wait_for(log, "worker(s) ready", proc)
            yield proc
        finally:
            _stop(proc)


@contextmanager
def api(env: Mapping[str, str], log: Path, *, cwd: Path = ROOT) -> Iterator[str]:
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(MUSTER), "serve", "--port", str(port)], env=dict(env), cwd=cwd, stdout=out, stderr=out
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + READY_WITHIN
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"muster serve did not start:\n{log.read_text()}")
                try:
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            yield url
        finally:
            _stop(proc)


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_WITHIN
    while text not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"process did not get ready:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
