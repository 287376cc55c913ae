"""Where the service is and how to be let in: ``MUSTER_URL`` and ``MUSTER_API_KEY``, read when a client is built."""

from __future__ import annotations

import os

DEFAULT_URL = "http://127.0.0.1:8000"
URL_VAR = "MUSTER_URL"
API_KEY_VAR = "MUSTER_API_KEY"
DEFAULT_TIMEOUT = 30.0


def service_url(url: str | None = None) -> str:
    """``url``, else ``MUSTER_URL``, else the default; without a trailing slash."""
    return (url or os.environ.get(URL_VAR) or DEFAULT_URL).rstrip("/")


def api_key(key: str | None = None) -> str | None:
    return key or os.environ.get(API_KEY_VAR) or None
