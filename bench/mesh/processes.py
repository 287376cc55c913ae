"""Start the benchmark server (``server.py``) in its own process on a free loopback port, wait until it is ready,
and stop it afterwards: what every mesh benchmark leg does around its clients."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    base: str
    pid: int


@contextmanager
def serve(db_url: str) -> Iterator[Server]:
    port = free_port()
    env = {**os.environ, "MUSTER_LOG_LEVEL": "WARNING"}
    process = subprocess.Popen([sys.executable, str(HERE / "server.py"), db_url, str(port)], env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"bench server exited with {process.returncode}")
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("bench server not ready within 60 s")
            time.sleep(0.05)
        yield Server(base, process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
