"""Session tokens: random, shown once, stored only as a hash."""

from __future__ import annotations

import hashlib
import secrets

PREFIX = "mst_"


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    # A fast hash is enough: the token carries 256 random bits, so there is nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()
