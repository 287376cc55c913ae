"""Run an ASGI app with uvicorn on a free 127.0.0.1 port in a background thread.

A thread (not the test's event loop) so that the server keeps answering while a test blocks on a subprocess, and so
that sync fixtures and async tests can share one server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from tests.support.net import free_port


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Serve ``app`` until the block exits; yields its base URL ``http://127.0.0.1:PORT``."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", ws="none")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"fake-model-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"fake model server did not start on port {port}")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
