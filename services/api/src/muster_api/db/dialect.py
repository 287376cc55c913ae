"""The dialect seam: one object per database, chosen once (``Runtime.dialect``), holding everything that differs.

The rest of the service never asks which database it talks to. It asks the dialect object for the thing it needs
(an upsert, a row lock, a JSON containment test) or, where a whole part differs (the mesh store's fast paths, its
notifier), lets the dialect pick that part with ``Dialect.pick``. Only this module and the engine/type plumbing of
``muster_api.db`` look at SQLAlchemy's dialect name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar, TypeVar

from sqlalchemy import JSON, ColumnElement, Select, Table, func, literal, select, true
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection
from sqlalchemy.engine import Dialect as SaDialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import ColumnClause

from muster_api.errors import MigrationError

T = TypeVar("T")

Values = Mapping[str, Any] | list[Mapping[str, Any]]


class Dialect(ABC):
    """What differs between the databases the service runs on."""

    #: SQLAlchemy's name for the dialect (also what ``/readyz`` reports).
    name: ClassVar[str]
    #: ``SELECT … FOR UPDATE`` means something (SQLite has no row locks: every write transaction there holds the
    #: database's write lock from its ``BEGIN IMMEDIATE``).
    row_locks: ClassVar[bool]
    #: Write transactions run one at a time: queueing them in-process beats racing for the database lock.
    serial_writes: ClassVar[bool]
    #: Alembic must copy-and-move a table to alter it (``render_as_batch``).
    batch_migrations: ClassVar[bool]
    #: Datetimes are stored without a zone (as UTC) and get it back on read.
    naive_datetimes: ClassVar[bool]

    @abstractmethod
    def insert(self, table: Table) -> Any:
        """This database's ``INSERT`` construct (the one with ``on_conflict_do_…``)."""

    def upsert(self, table: Table, values: Values, *, conflict: Iterable[str], update: Iterable[str]) -> Insert:
        """INSERT … ON CONFLICT (conflict) DO UPDATE SET update = excluded.update (DO NOTHING without columns)."""
        stmt = self.insert(table).values(values)
        columns = list(update)
        if not columns:
            return stmt.on_conflict_do_nothing(index_elements=list(conflict))  # type: ignore[no-any-return]
        return stmt.on_conflict_do_update(  # type: ignore[no-any-return]
            index_elements=list(conflict), set_={c: stmt.excluded[c] for c in columns}
        )

    def insert_ignore(self, table: Table, values: Mapping[str, Any], *, conflict: Iterable[str]) -> Insert:
        """INSERT … ON CONFLICT DO NOTHING."""
        return self.upsert(table, values, conflict=conflict, update=())

    def lock_rows(self, query: Select[Any]) -> Select[Any]:
        """The selected rows locked for the rest of the transaction (``FOR UPDATE`` where rows can be locked)."""
        return query.with_for_update() if self.row_locks else query

    @abstractmethod
    def lock_claimable(self, query: Select[Any]) -> Select[Any]:
        """The candidate rows of a claim, locked so that concurrent claimers skip each other's rows."""

    @abstractmethod
    def json_array_contains(self, column: ColumnClause[object], value: str | ColumnElement[str]) -> ColumnElement[bool]:
        """``value`` is an element of the JSON array in ``column``."""

    def json_type(self, sa_dialect: SaDialect) -> Any:
        """The column type behind ``JSONDocument``."""
        return sa_dialect.type_descriptor(JSON())

    @abstractmethod
    def pick(self, *, sqlite: T, postgresql: T) -> T:
        """This database's variant of a part that differs as a whole (a store's fast paths, a notifier)."""

    @asynccontextmanager
    async def migrating(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        """A connection in the one transaction the migration chain runs in."""
        async with engine.begin() as conn:
            yield conn


class SqliteDialect(Dialect):
    name = "sqlite"
    row_locks = False
    serial_writes = True
    batch_migrations = True
    naive_datetimes = True

    def insert(self, table: Table) -> Any:
        return sqlite.insert(table)

    def lock_claimable(self, query: Select[Any]) -> Select[Any]:
        # Every write transaction starts with BEGIN IMMEDIATE (one writer at a time): the plain select is enough,
        # and the claim's conditional UPDATE … WHERE re-checks either way.
        return query

    def json_array_contains(self, column: ColumnClause[object], value: str | ColumnElement[str]) -> ColumnElement[bool]:
        element = literal(value) if isinstance(value, str) else value
        each = func.json_each(column).table_valued("value")
        return select(true()).select_from(each).where(each.c.value == element).exists()

    def pick(self, *, sqlite: T, postgresql: T) -> T:
        return sqlite

    @asynccontextmanager
    async def migrating(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        """Foreign keys off while the chain runs, checked before it commits. A batch migration alters a table by
        copying it and dropping the original: with foreign keys on, that DROP cascades (altering ``mesh_agents``
        would empty ``mesh_inbox``). The pragma is a no-op inside a transaction, so it is set on the driver
        connection before the transaction begins, and set back on before the connection returns to the pool."""
        async with engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            await driver.execute("PRAGMA foreign_keys=OFF")
            try:
                async with conn.begin():
                    yield conn
                    broken = (await conn.exec_driver_sql("PRAGMA foreign_key_check")).all()
                    if broken:
                        tables = sorted({str(row[0]) for row in broken})
                        raise MigrationError(
                            f"migrations left {len(broken)} rows breaking a foreign key (in {', '.join(tables)}); "
                            "rolled back"
                        )
            finally:
                await driver.execute("PRAGMA foreign_keys=ON")


class PostgresDialect(Dialect):
    name = "postgresql"
    row_locks = True
    serial_writes = False
    batch_migrations = False
    naive_datetimes = False

    def insert(self, table: Table) -> Any:
        return postgresql.insert(table)

    def lock_claimable(self, query: Select[Any]) -> Select[Any]:
        # Several instances claim at once: a claimer must neither wait for nor double-take a row another is taking.
        return query.with_for_update(skip_locked=True)

    def json_array_contains(self, column: ColumnClause[object], value: str | ColumnElement[str]) -> ColumnElement[bool]:
        # @> on JSONB is index-friendly.
        element = literal(value) if isinstance(value, str) else value
        return column.op("@>")(func.jsonb_build_array(element).cast(JSONB))

    def json_type(self, sa_dialect: SaDialect) -> Any:
        return sa_dialect.type_descriptor(JSONB())

    def pick(self, *, sqlite: T, postgresql: T) -> T:
        return postgresql


SQLITE = SqliteDialect()
POSTGRESQL = PostgresDialect()
_BY_NAME: dict[str, Dialect] = {d.name: d for d in (SQLITE, POSTGRESQL)}


def dialect_of(source: AsyncEngine | AsyncConnection | Connection | SaDialect | str) -> Dialect:
    """The dialect object for an engine, a connection, a SQLAlchemy dialect or a dialect name."""
    if isinstance(source, str):
        name = source
    elif isinstance(source, SaDialect):
        name = source.name
    else:
        name = source.dialect.name
    try:
        return _BY_NAME[name]
    except KeyError:
        raise NotImplementedError(f"no dialect seam for database {name!r}") from None


__all__ = ["POSTGRESQL", "SQLITE", "Dialect", "PostgresDialect", "SqliteDialect", "dialect_of"]
