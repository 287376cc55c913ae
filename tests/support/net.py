"""Loopback ports for the servers tests start."""

from __future__ import annotations

import socket

# How long a test waits for a server it started to answer ready before it fails. Only a bound for a failure (each
# wait ends as soon as the server answers): generous, because a start on this shared machine can take a minute.
READY_WITHIN = 180.0


def free_port() -> int:
    """A 127.0.0.1 port nobody listens on right now (also the target of the connection-refused scenarios)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
