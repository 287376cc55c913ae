"""Databases for tests: created fresh, dropped afterwards, named so that strays can be swept.

Migrating costs more than most tests: the chain runs once per session into a template (a PostgreSQL template
database, a SQLite file), and every test's database starts as a copy of it (``CREATE DATABASE … TEMPLATE``, a file
copy). A test that needs a database the chain never ran on asks for an empty one.

On PostgreSQL, creating and dropping a database costs about half a second (the drop waits for a checkpoint), more
than most tests. A migrated database a test is done with is emptied instead (every table truncated, identities
restarted) and handed to the next test, unless its schema is no longer the template's: then it is dropped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.db.url import normalise_database_url

PREFIX = f"muster_t{os.getpid()}_"
_T = TypeVar("_T")

# What a migration decides, as one text: tables and columns, indexes, constraints, functions, triggers and the
# migration revision. A database whose schema text differs from the template's is not handed on.
SCHEMA_TEXT = """
SELECT concat_ws(E'\\n',
  (SELECT string_agg(concat_ws(' ', table_name, column_name, data_type, is_nullable, column_default), ','
                     ORDER BY table_name, column_name)
     FROM information_schema.columns WHERE table_schema = 'public'),
  (SELECT string_agg(indexdef, ',' ORDER BY indexdef) FROM pg_indexes WHERE schemaname = 'public'),
  (SELECT string_agg(conname || ' ' || pg_get_constraintdef(oid), ',' ORDER BY conname)
     FROM pg_constraint WHERE connamespace = 'public'::regnamespace),
  (SELECT string_agg(proname, ',' ORDER BY proname) FROM pg_proc WHERE pronamespace = 'public'::regnamespace),
  (SELECT string_agg(tgname, ',' ORDER BY tgname) FROM pg_trigger WHERE NOT tgisinternal),
  (SELECT string_agg(version_num, ',') FROM alembic_version))
"""
TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
OTHER_SESSIONS = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # A loop already runs in this thread (Playwright's sync API keeps one for the browser tests' session), and
    # asyncio.run refuses to nest: run on a thread of its own.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _schema_text(url: str) -> str:
    conn = await asyncpg.connect(url)
    try:
        return str(await conn.fetchval(SCHEMA_TEXT))
    finally:
        await conn.close()


async def _emptied(url: str, expected_schema: str) -> bool:
    """Empty the database for the next test; False when it cannot be handed on (its schema changed, or a session
    left behind holds a lock the truncation would wait for)."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(OTHER_SESSIONS)  # what a test left connected, as DROP … WITH (FORCE) would end it
        if await conn.fetchval(SCHEMA_TEXT) != expected_schema:
            return False
        tables = ", ".join(f'"{row[0]}"' for row in await conn.fetch(TABLES))
        await conn.execute("SET lock_timeout = '5s'")
        await conn.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
        return True
    except asyncpg.PostgresError:
        return False
    finally:
        await conn.close()


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
        self._template_schema = ""
        self._emptied: list[str] = []

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
        """A new database: empty, or (``migrated``) at the migration head with no rows (a copy of the session's
        template, or a database an earlier test left and ``release`` emptied)."""
        if migrated and self._emptied:
            return self.url_for(self._emptied.pop())
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
            self._template_schema = _run(_schema_text(self.url_for(name)))
            self._template = name
        return self._template

    def release(self, url: str) -> None:
        """A migrated database a test is done with: emptied for the next one, or dropped."""
        if _run(_emptied(url, self._template_schema)):
            self._emptied.append(url.rpartition("/")[2])
        else:
            self.drop(url)

    def drop(self, url: str) -> None:
        name = url.rpartition("/")[2]
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._created.discard(name)

    def drop_all(self) -> None:
        for name in list(self._created):
            self.drop(self.url_for(name))
