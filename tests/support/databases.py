"""Databases for tests: created fresh, dropped afterwards, named so that strays can be swept.

Migrating costs more than most tests: the chain runs once per session into a template (a PostgreSQL template
database, a SQLite file), and every test's database starts as a copy of it (``CREATE DATABASE … TEMPLATE``, a file
copy). A test that needs a database the chain never ran on asks for an empty one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import asyncpg

from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.db.url import normalise_database_url

PREFIX = f"muster_t{os.getpid()}_"


def _run(coroutine: Coroutine[Any, Any, None]) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coroutine)
        return
    # A loop already runs in this thread (Playwright's sync API keeps one for the browser tests' session), and
    # asyncio.run refuses to nest: run on a thread of its own.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, coroutine).result()


async def _migrate(url: str) -> None:
    engine = create_engine(normalise_database_url(url))
    try:
        await upgrade(engine)
    finally:
        await engine.dispose()  # a template must have no connection left when it is copied


def migrated_sqlite(template: Path) -> Path:
    """The SQLite template file, migrated to head."""
    _run(_migrate(f"sqlite:///{template}"))
    return template


def sqlite_copy(template: Path, target: Path) -> str:
    shutil.copyfile(template, target)
    return f"sqlite:///{target}"


class PostgresServer:
    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url.replace("postgresql+asyncpg://", "postgresql://")
        base, _, _ = self.admin_url.rpartition("/")
        self._base = base
        self._created: set[str] = set()
        self._template: str | None = None

    def url_for(self, name: str) -> str:
        return f"{self._base}/{name}"

    def _admin(self, sql: str) -> None:
        async def run() -> None:
            conn = await asyncpg.connect(self.admin_url)
            try:
                await conn.execute(sql)
            finally:
                await conn.close()

        _run(run())

    def create(self, *, migrated: bool = False) -> str:
        """A new database: empty, or (``migrated``) a copy of the session's template at the migration head."""
        name = PREFIX + uuid.uuid4().hex[:12]
        template = f' TEMPLATE "{self._migrated_template()}"' if migrated else ""
        self._admin(f'CREATE DATABASE "{name}"{template}')
        self._created.add(name)
        return self.url_for(name)

    def _migrated_template(self) -> str:
        if self._template is None:
            name = PREFIX + "template"
            self._admin(f'CREATE DATABASE "{name}"')
            self._created.add(name)
            _run(_migrate(self.url_for(name)))
            self._template = name
        return self._template

    def drop(self, url: str) -> None:
        name = url.rpartition("/")[2]
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._created.discard(name)

    def drop_all(self) -> None:
        for name in list(self._created):
            self.drop(self.url_for(name))
