"""The fake model servers run in a thread (see ``tests.support.live``): the server keeps answering while a test blocks
on the CLI's subprocess, and sync fixtures and async tests can share one server."""

from tests.support.live import serve_in_thread

__all__ = ["serve_in_thread"]
