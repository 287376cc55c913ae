"""The only place that knows which database it talks to. Everything dialect-specific lives here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, func, literal, select, true
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import ColumnClause


def upsert(
    dialect_name: str,
    table: Table,
    values: Mapping[str, Any] | list[Mapping[str, Any]],
    *,
    conflict: Iterable[str],
    update: Iterable[str],
) -> Insert:
    """INSERT … ON CONFLICT (conflict) DO UPDATE SET update = excluded.update, on SQLite and PostgreSQL."""
    module: Any = postgresql if dialect_name == "postgresql" else sqlite
    if dialect_name not in ("postgresql", "sqlite"):
        raise NotImplementedError(f"no upsert for dialect {dialect_name!r}")
    stmt = module.insert(table).values(values)
    columns = list(update)
    if not columns:
        return stmt.on_conflict_do_nothing(index_elements=list(conflict))  # type: ignore[no-any-return]
    return stmt.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=list(conflict), set_={c: stmt.excluded[c] for c in columns}
    )


def insert_ignore(dialect_name: str, table: Table, values: Mapping[str, Any], *, conflict: Iterable[str]) -> Insert:
    """INSERT … ON CONFLICT DO NOTHING."""
    return upsert(dialect_name, table, values, conflict=conflict, update=())


def lock_claimable(dialect_name: str, query: Select[Any]) -> Select[Any]:
    """The candidate rows of a claim, locked so that concurrent claimers skip each other's rows.

    PostgreSQL: ``FOR UPDATE SKIP LOCKED`` (several instances claim at once; a claimer must neither wait for nor
    double-take a row another is taking). SQLite: every write transaction starts with ``BEGIN IMMEDIATE`` (one writer
    at a time), so the plain select is enough. The conditional ``UPDATE … WHERE`` of a claim re-checks either way.
    """
    if dialect_name == "postgresql":
        return query.with_for_update(skip_locked=True)
    return query


def json_array_contains(
    dialect_name: str, column: ColumnClause[object], value: str | ColumnElement[str]
) -> ColumnElement[bool]:
    """``value`` is an element of the JSON array in ``column``: ``@>`` on PostgreSQL (JSONB, index-friendly),
    ``json_each`` on SQLite."""
    element = literal(value) if isinstance(value, str) else value
    if dialect_name == "postgresql":
        return column.op("@>")(func.jsonb_build_array(element).cast(JSONB))
    if dialect_name == "sqlite":
        each = func.json_each(column).table_valued("value")
        return select(true()).select_from(each).where(each.c.value == element).exists()
    raise NotImplementedError(f"no JSON array containment for dialect {dialect_name!r}")
