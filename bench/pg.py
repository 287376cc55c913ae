"""A throw-away PostgreSQL database for a benchmark run (created from the admin URL, dropped afterwards)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


@asynccontextmanager
async def fresh_postgres(admin_url: str, prefix: str) -> AsyncIterator[str]:
    import asyncpg  # type: ignore[import-untyped]

    name = f"{prefix}_{os.getpid()}"
    base = admin_url.rpartition("/")[0]
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"{base}/{name}"
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
