"""Conditional GETs: an ``ETag`` computed from what an answer says, and ``304 Not Modified`` when a poller already
holds it, so that many open dashboards polling every two seconds cost a hash each, not a body each.

The tag is weak (``W/``): it covers what changed in the data, not every byte of the body. The directory's ages, for
one, are computed from the clock at each request and are left out of the tag: a client holding the previous body
computes them itself from the timestamps beside them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from fastapi import Request
from fastapi.responses import Response

# The answer's validators are what the body depends on: a cache must ask again every time.
CACHE_CONTROL = "no-cache"


def weak_etag(fingerprint: bytes) -> str:
    return f'W/"{hashlib.blake2b(fingerprint, digest_size=16).hexdigest()}"'


def _held(if_none_match: str | None, tag: str) -> bool:
    """RFC 9110 §13.1.2: weak comparison, a list of tags, or ``*``."""
    if not if_none_match:
        return False
    opaque = tag.removeprefix("W/")
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == opaque:
            return True
    return False


def conditional(request: Request, fingerprint: bytes, body: Callable[[], bytes] | None = None) -> Response:
    """A JSON answer tagged from ``fingerprint``, or a bodiless 304 when the request's ``If-None-Match`` holds that
    tag. The fingerprint is the body itself unless ``body`` makes another one (called only for a 200)."""
    tag = weak_etag(fingerprint)
    headers = {"ETag": tag, "Cache-Control": CACHE_CONTROL}
    if _held(request.headers.get("if-none-match"), tag):
        return Response(status_code=304, headers=headers)
    return Response(fingerprint if body is None else body(), media_type="application/json", headers=headers)
