"""The whole app served over real HTTP on a loopback port, from a background thread: for clients that are not
Python coroutines (a browser, the ``muster`` CLI in its own process)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from tests.support.net import free_port


@contextmanager
def live_server(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` (lifespan included) until the block exits; yields ``http://127.0.0.1:PORT``."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"muster-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the app did not start on port {port}")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
