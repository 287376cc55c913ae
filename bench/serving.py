"""What every benchmark that starts a server process needs: a free loopback port, and a wait until the server
answers ``/readyz`` (or has died, or took too long)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

READY_WITHIN = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_ready(
    base: str,
    process: subprocess.Popen[bytes],
    name: str,
    log: Callable[[], str] = lambda: "",
    within: float = READY_WITHIN,
) -> None:
    """Return once ``base`` answers ``/readyz`` with 200; raise, with what ``log`` reads then (the process's output),
    if it exits first or is not ready within ``within`` seconds (a minute)."""
    deadline = time.monotonic() + within
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} before it was ready{log()}")
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} not ready within {within:.0f} s{log()}")
        time.sleep(0.05)


@contextmanager
def mesh_bench_server(server: Path, db_url: str, env: Mapping[str, str], name: str) -> Iterator[str]:
    """``bench/mesh/server.py`` (or another tree's copy) on a free port, until exit: its base URL once ready."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(server), db_url, str(port)], env=dict(env))
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, process, name)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
