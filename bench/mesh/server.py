"""The server a mesh benchmark talks to, in its own process: the Muster app, plus one bare ASGI endpoint as the
check-in baseline.

``POST /bench/upsert`` is what a check-in renewal is at its core, with nothing else: parse a JSON body, one
INSERT … ON CONFLICT DO UPDATE of the agent's lease row on the same database (same table, same engine settings),
answer a small JSON document. It bypasses FastAPI, the middleware, authentication and the mesh's rules.

Usage: python bench/mesh/server.py DATABASE_URL PORT
"""

from __future__ import annotations

import contextlib
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import uvicorn
from starlette.types import Receive, Scope, Send

from muster_api.app import create_app
from muster_api.db.dialect import dialect_of
from muster_api.db.engine import create_engine
from muster_api.mesh.tables import agents
from muster_api.settings import Settings


def build(database_url: str) -> Any:
    settings = Settings(database_url=database_url, log_level="WARNING")
    app = create_app(settings, freeze_after_start=True)
    engine = create_engine(settings.database_url)
    dialect = dialect_of(engine)
    serial: Any = anyio.Lock() if dialect.serial_writes else contextlib.nullcontext()

    async def upsert_endpoint(receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body)
        now = datetime.now(UTC)
        values = {
            "agent_id": request["agent_id"],
            "token_hash": f"bench-{request['agent_id']}",
            "role": None,
            "repo": None,
            "caps": [],
            "status": request.get("status", ""),
            "ttl_seconds": 3600,
            "last_seen_at": now,
            "status_since": now,
            "expires_at": now + timedelta(seconds=3600),
            "last_seq": 0,
            "read_cursor": 0,
            "floor_seq": 0,
        }
        stmt = dialect.upsert(agents, values, conflict=["agent_id"], update=["last_seen_at", "expires_at", "status"])
        # Same queueing as the mesh's SQL store on SQLite (see SqlMeshStore.transaction), so that the baseline is
        # not slowed by SQLite's sleeping busy handler.
        async with serial, engine.begin() as conn:
            await conn.execute(stmt)
        out = json.dumps({"agent_id": request["agent_id"], "expires_at": values["expires_at"].isoformat()}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    async def bench_app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/bench/upsert":
            await upsert_endpoint(receive, send)
            return
        await app(scope, receive, send)

    return bench_app


def main() -> None:
    url, port = sys.argv[1], int(sys.argv[2])
    uvicorn.run(build(url), host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on")


if __name__ == "__main__":
    main()
