"""PostgreSQL databases for tests: created fresh, dropped afterwards, named so that strays can be swept."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import uuid

import asyncpg

PREFIX = f"muster_t{os.getpid()}_"


class PostgresServer:
    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url.replace("postgresql+asyncpg://", "postgresql://")
        base, _, _ = self.admin_url.rpartition("/")
        self._base = base
        self._created: set[str] = set()

    def url_for(self, name: str) -> str:
        return f"{self._base}/{name}"

    def _admin(self, sql: str) -> None:
        async def run() -> None:
            conn = await asyncpg.connect(self.admin_url)
            try:
                await conn.execute(sql)
            finally:
                await conn.close()

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(run())
            return
        # A loop already runs in this thread (Playwright's sync API keeps one for the browser tests' session), and
        # asyncio.run refuses to nest: run on a thread of its own.
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(asyncio.run, run()).result()

    def create(self) -> str:
        name = PREFIX + uuid.uuid4().hex[:12]
        self._admin(f'CREATE DATABASE "{name}"')
        self._created.add(name)
        return self.url_for(name)

    def drop(self, url: str) -> None:
        name = url.rpartition("/")[2]
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._created.discard(name)

    def drop_all(self) -> None:
        for name in list(self._created):
            self.drop(self.url_for(name))
