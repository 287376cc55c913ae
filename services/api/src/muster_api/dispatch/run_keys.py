"""The key a dispatched agent's MCP server holds on a service with ``MUSTER_API_KEYS``: minted for one run, good
only for that agent's own mesh calls, and dead once the run is.

The model can read its private home, so whatever the MCP server is given there the model has too: never one of the
service's keys. A run key is honoured (``Edge``'s scoped-key hook) only

- on ``/mesh/…``: the agent's messages, inbox, claims and tasks, never dispatch, A2A, config or admin routes;
- with the session token it was minted with as the request's Bearer (another agent's session, or a new check-in,
  is refused), or with no Bearer on a read (the roster, the claims and tasks lists: what any agent may read);
- never for the overseer's view (``view=all``), nor for a check-out (the run's end checks the agent out);
- while its run is running: a worker that dies stops renewing the run's lease, the sweep interrupts the run, and
  the key dies with it; the run's end deletes it.

The database keeps SHA-256 digests only, of the key and of the token.
"""

from __future__ import annotations

import hashlib
import secrets
from urllib.parse import parse_qs

from sqlalchemy import and_, delete, select
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import Scope

from muster_api.dispatch.tables import run_keys, runs

PREFIX = "mrk_"  # tells a run key from a service key at a glance (and in a leaked-secret scan)
MESH = "/mesh/"
REFUSED_PATHS = frozenset({"/mesh/checkout"})
READS = frozenset({"GET", "HEAD"})


def digest(secret: str | bytes) -> str:
    return hashlib.sha256(secret if isinstance(secret, bytes) else secret.encode()).hexdigest()


def _bearer(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, credential = value.partition(b" ")
            return credential.strip() if scheme.lower() == b"bearer" else b""
    return None


def _asks_overseer(scope: Scope) -> bool:
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return "all" in query.get("view", [])


class RunKeys:
    """Minting, checking and revoking run keys, in the dispatch tables (shared by every instance)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def mint(self, run_id: str, agent_id: str, token: str) -> str:
        key = PREFIX + secrets.token_urlsafe(32)
        values = {"key_hash": digest(key), "run_id": run_id, "agent_id": agent_id, "token_hash": digest(token)}
        async with self.engine.begin() as conn:
            await conn.execute(run_keys.insert().values(**values))
        return key

    async def revoke(self, run_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(delete(run_keys).where(run_keys.c.run_id == run_id))

    async def admits(self, key: bytes, scope: Scope) -> bool:
        """Whether ``key`` is a live run key good for this request (see the module's docstring)."""
        path: str = scope["path"]
        if not key.startswith(PREFIX.encode()) or not path.startswith(MESH) or path in REFUSED_PATHS:
            return False
        if _asks_overseer(scope):
            return False
        bearer = _bearer(scope)
        if bearer is None and scope["method"] not in READS:
            return False
        query = (
            select(run_keys.c.token_hash)
            .join(runs, runs.c.id == run_keys.c.run_id)
            .where(and_(run_keys.c.key_hash == digest(key), runs.c.status == "running"))
        )
        async with self.engine.connect() as conn:
            token_hash = await conn.scalar(query)
        if token_hash is None:
            return False
        return bearer is None or secrets.compare_digest(str(token_hash), digest(bearer))
