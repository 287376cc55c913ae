"""The only place that knows which database it talks to. Everything dialect-specific lives here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert


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


def supports_skip_locked(dialect_name: str) -> bool:
    """SQLite serialises writers anyway; PostgreSQL needs FOR UPDATE SKIP LOCKED for concurrent claims."""
    return dialect_name == "postgresql"
