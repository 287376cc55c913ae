"""The mesh's message search in SQL: SQLite FTS5 and PostgreSQL ``tsvector`` with a GIN index.

Neither store writes the index in its own statements. On SQLite, ``mesh_messages_fts`` is an external-content FTS5
table over ``mesh_messages`` (keyed by its rowid): a trigger on INSERT queues the new rowid in
``mesh_messages_fts_pending`` in the sending statement, and ``index_pending`` moves the queue into the index in one
transaction, before every search and after every so many writes of the mesh store (FTS5 writes a segment per commit,
which cost a send more than its own rows did); triggers on UPDATE and DELETE take a message out of the index, or out
of the queue if it never got in. On PostgreSQL, ``mesh_messages.search_doc`` is a generated column (indexed by GIN),
written in the statement that writes the row. Both cut words alike (runs of letters and digits, case-folded,
diacritics kept), as ``muster_mesh.search`` does; the schema is made by the migrations ``0007_mesh_search`` and
``0014_mesh_search_batched``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, ClassVar, NamedTuple

from sqlalchemy import Float, String, TextualSelect, text
from sqlalchemy.engine import Dialect as SaDialect
from sqlalchemy.ext.asyncio import AsyncEngine

from muster_api.db.dialect import Dialect
from muster_api.db.driver_pool import DriverPool
from muster_api.db.schema import UTCDateTime
from muster_api.db.sqlite_driver import in_transaction
from muster_api.mesh.sqlite_driver import NAMED, on_driver_thread
from muster_api.mesh.store import stored_time
from muster_mesh.search import MARK_CLOSE, MARK_OPEN, SNIPPET_WORDS, SearchQuery, SearchRow, plain_snippet

# The database objects that stand beside the service's MetaData (what autogenerate must not compare): the FTS5 table
# and the shadow tables it owns on SQLite, the generated column and its index on PostgreSQL.
SEARCH_TABLE_PREFIX = "mesh_messages_fts"
SEARCH_COLUMN = "search_doc"
SEARCH_INDEX = "ix_mesh_messages_search_doc"

_VISIBLE = (
    " AND (m.sender = :viewer OR m.message_id IN (SELECT i.message_id FROM mesh_inbox i WHERE i.recipient = :viewer))"
)
_ORDER = " ORDER BY score DESC, sent_at DESC, message_id"


def outside_metadata(name: str | None, type_: str, parent_names: Any) -> bool:
    """False for the search index's objects (an Alembic ``include_name`` hook), True for everything else."""
    if name is None:
        return True
    if type_ == "table":
        return not name.startswith(SEARCH_TABLE_PREFIX)
    return name not in (SEARCH_COLUMN, SEARCH_INDEX)


def _typed(sql: str) -> TextualSelect:
    return text(sql).columns(
        message_id=String, sender=String, thread_id=String, sent_at=UTCDateTime, snippet=String, score=Float
    )


class SqlMessageSearch:
    """``muster_mesh.search.SearchStore`` on one database: two statements built once, for an agent and for all."""

    statement_for_viewer: ClassVar[TextualSelect]
    statement_for_all: ClassVar[TextualSelect]

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @staticmethod
    def match(terms: tuple[str, ...]) -> str:
        raise NotImplementedError

    @staticmethod
    def snippet(row: Any, terms: tuple[str, ...]) -> str:
        return str(row.snippet or "")

    async def search_messages(self, query: SearchQuery) -> list[SearchRow]:
        params: dict[str, Any] = {"match": self.match(query.terms), "limit": query.limit, "offset": query.offset}
        stmt = self.statement_for_all
        if query.viewer is not None:
            stmt = self.statement_for_viewer
            params["viewer"] = query.viewer
        return [
            SearchRow(r.message_id, r.sender, r.thread_id, r.sent_at, self.snippet(r, query.terms), float(r.score))
            for r in await self.rows(stmt, params)
        ]

    async def rows(self, stmt: TextualSelect, params: dict[str, Any]) -> Sequence[Any]:
        """The statement's rows, each with its columns as attributes."""
        async with self.engine.connect() as conn:
            return (await conn.execute(stmt, params)).all()


def _sqlite(visible: str) -> TextualSelect:
    # Built from this module's constants only, once: every value the caller gives is a bound parameter. The page is
    # ranked first, on the index alone for the overseer (bm25 is computed only for the rows that pass the visibility
    # test, and no message row is read but the page's); only then are its rows read. Equal scores: the newest row
    # first (rowids grow with each insert), a total order for paging.
    join = " JOIN mesh_messages m ON m.rowid = f.rowid" if visible else ""
    return text(
        "WITH page AS (SELECT f.rowid AS r, -bm25(mesh_messages_fts) AS score FROM mesh_messages_fts f"  # noqa: S608
        f"{join} WHERE mesh_messages_fts MATCH :match{visible} ORDER BY score DESC, f.rowid DESC "
        "LIMIT :limit OFFSET :offset) "
        "SELECT m.message_id AS message_id, m.sender AS sender, m.thread_id AS thread_id, m.sent_at AS sent_at, "
        "m.body AS body, page.score AS score FROM page JOIN mesh_messages m ON m.rowid = page.r "
        "ORDER BY page.score DESC, page.r DESC"
    ).columns(message_id=String, sender=String, thread_id=String, sent_at=UTCDateTime, body=String, score=Float)


@lru_cache(maxsize=4)
def _named(stmt: TextualSelect) -> str:
    return str(stmt.compile(dialect=NAMED))


class _SqliteHit(NamedTuple):
    message_id: str
    sender: str
    thread_id: str | None
    sent_at: datetime
    body: str
    score: float


# Runs a call on the mesh store's held connection, between its transactions (``SqliteMeshStore.on_held``).
HeldCall = Callable[[Callable[[sqlite3.Connection], list[Any]]], Awaitable[list[Any]]]

_ANY_PENDING = "SELECT EXISTS (SELECT 1 FROM mesh_messages_fts_pending)"
_INDEX_PENDING = (
    "INSERT INTO mesh_messages_fts(rowid, body) SELECT m.rowid, m.body FROM mesh_messages_fts_pending p "
    "JOIN mesh_messages m ON m.rowid = p.message_rowid"
)


def index_pending(conn: sqlite3.Connection) -> bool:
    """Move the messages queued by their sends into the FTS5 index, in one transaction of its own (FTS5 writes a
    segment per commit: in batches a message costs an eighth of what it did alone); False when none was queued.
    ``conn``: a sqlite3 connection outside a transaction (the held connection between the store's transactions)."""
    if not conn.execute(_ANY_PENDING).fetchone()[0]:
        return False

    def index(conn: sqlite3.Connection) -> bool:
        conn.execute(_INDEX_PENDING)
        conn.execute("DELETE FROM mesh_messages_fts_pending")
        return True

    return bool(in_transaction(conn, index))


def _searched(sql: str, params: dict[str, Any]) -> Callable[[sqlite3.Connection], list[Any]]:
    def run(conn: sqlite3.Connection) -> list[Any]:
        index_pending(conn)  # a search sees every message committed before it
        return conn.execute(sql, params).fetchall()

    return run


class SqliteMessageSearch(SqlMessageSearch):
    statement_for_viewer = _sqlite(_VISIBLE)
    statement_for_all = _sqlite("")

    def __init__(self, engine: AsyncEngine, held: HeldCall | None = None) -> None:
        super().__init__(engine)
        self.held = held

    async def rows(self, stmt: TextualSelect, params: dict[str, Any]) -> Sequence[Any]:
        # One trip to aiosqlite's thread, where SQLAlchemy's cursor adapter takes four (open, execute, fetch,
        # close), and no result processing but the one datetime. On the store's held connection when there is
        # one: an agent's search follows its own lease renewal, a write, after which a pooled connection would read
        # every page of the ~700 matches anew (see SqliteMeshStore.on_held).
        search = _searched(_named(stmt), params)
        if self.held is not None:
            found = await self.held(search)
        else:
            async with self.engine.connect() as conn:
                found = await on_driver_thread((await conn.get_raw_connection()).driver_connection, search)
        return [_SqliteHit(i, s, t, stored_time(at), b, score) for i, s, t, at, b, score in found]

    @staticmethod
    def match(terms: tuple[str, ...]) -> str:
        # Each word a quoted FTS5 string (words hold letters and digits only): side by side, all must match.
        return " ".join(f'"{t}"' for t in terms)

    @staticmethod
    def snippet(row: Any, terms: tuple[str, ...]) -> str:
        # Made for the page's rows only, the way every store makes it (FTS5's snippet() would be computed for each
        # match before the sort).
        return plain_snippet(str(row.body), terms)


_HEADLINE = f"StartSel={MARK_OPEN}, StopSel={MARK_CLOSE}, MaxWords={SNIPPET_WORDS}, MinWords=5, ShortWord=0"


def _postgres(visible: str) -> TextualSelect:
    # The page is chosen first and only its rows are given a headline (ts_headline re-parses the whole body).
    return _typed(
        "WITH q AS (SELECT to_tsquery('simple', :match) AS q), page AS ("  # noqa: S608
        "SELECT m.message_id, m.sender, m.thread_id, m.sent_at, m.body, ts_rank_cd(m.search_doc, q.q) AS score "
        f"FROM mesh_messages m, q WHERE m.search_doc @@ q.q{visible}{_ORDER} LIMIT :limit OFFSET :offset) "
        "SELECT page.message_id AS message_id, page.sender AS sender, page.thread_id AS thread_id, "
        f"page.sent_at AS sent_at, ts_headline('simple', page.body, q.q, '{_HEADLINE}') AS snippet, "
        f"page.score AS score FROM page, q{_ORDER}"
    )


class _PostgresHit(NamedTuple):
    message_id: str
    sender: str
    thread_id: str | None
    sent_at: datetime
    snippet: str
    score: float


class PostgresMessageSearch(SqlMessageSearch):
    statement_for_viewer = _postgres(_VISIBLE)
    statement_for_all = _postgres("")

    def __init__(self, engine: AsyncEngine, driver: DriverPool | None = None) -> None:
        super().__init__(engine)
        self.driver = driver

    async def rows(self, stmt: TextualSelect, params: dict[str, Any]) -> Sequence[Any]:
        # On ``DriverPool``, as the mesh's hot statements are: SQLAlchemy's pool checkout, statement and result
        # machinery cost more CPU than the round trip.
        if self.driver is None:
            return await super().rows(stmt, params)
        sql, names = _positional(stmt, self.engine.dialect)
        return [_PostgresHit(*r) for r in await self.driver.fetch(sql, *(params[n] for n in names))]

    @staticmethod
    def match(terms: tuple[str, ...]) -> str:
        return " & ".join(f"'{t}'" for t in terms)


@lru_cache(maxsize=4)
def _positional(stmt: TextualSelect, dialect: SaDialect) -> tuple[str, tuple[str, ...]]:
    compiled = stmt.compile(dialect=dialect)
    return str(compiled), tuple(compiled.positiontup or ())


def make_search(
    engine: AsyncEngine, dialect: Dialect, driver: DriverPool | None = None, held: HeldCall | None = None
) -> SqlMessageSearch:
    """The search of this database; ``driver``: the mesh store's ``DriverPool``, for PostgreSQL's statements;
    ``held``: runs a call on the SQLite mesh store's held connection."""
    made: Callable[[], SqlMessageSearch] = dialect.pick(
        sqlite=lambda: SqliteMessageSearch(engine, held), postgresql=lambda: PostgresMessageSearch(engine, driver)
    )
    return made()


__all__ = [
    "PostgresMessageSearch",
    "SqlMessageSearch",
    "SqliteMessageSearch",
    "index_pending",
    "make_search",
    "outside_metadata",
]
