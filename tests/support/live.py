"""An ASGI app served over real HTTP on a loopback port, from a background thread: for clients that are not the
test's own coroutines (a browser, the ``muster`` CLI in its own process, a coding-agent CLI calling a fake model), and
so that the server keeps answering while a test blocks on a subprocess."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal

import uvicorn

from tests.support.net import READY_WITHIN, free_port


@contextmanager
def serve_in_thread(app: Any, *, lifespan: Literal["on", "off"] = "off", port: int | None = None) -> Iterator[str]:
    """Serve ``app`` until the block exits (on ``port``, else a free one); yields ``http://127.0.0.1:PORT``."""
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none", lifespan=lifespan)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"served-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + READY_WITHIN
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the app did not start on port {port}")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def live_server(app: Any, port: int | None = None) -> AbstractContextManager[str]:
    """The whole service app, its lifespan (migrations, workers) included."""
    return serve_in_thread(app, lifespan="on", port=port)
