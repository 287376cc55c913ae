"""Start the benchmark server (``server.py``) in its own process on a free loopback port, wait until it is ready,
and stop it afterwards: what every mesh benchmark leg does around its clients."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from serving import free_port, wait_ready  # noqa: E402


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
        wait_ready(base, process, "bench server")
        yield Server(base, process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
