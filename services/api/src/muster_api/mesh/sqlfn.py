"""Dialect-specific SQL the mesh needs beyond ``muster_api.db.dialect`` (which this belongs in; kept here because
that module is shared)."""

from __future__ import annotations

from sqlalchemy import ColumnElement, func, literal, select, true
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.elements import ColumnClause


def json_array_contains(
    dialect_name: str, column: ColumnClause[object], value: str | ColumnElement[str]
) -> ColumnElement[bool]:
    """``value`` is an element of the JSON array in ``column``: ``@>`` on PostgreSQL (JSONB), ``json_each`` on
    SQLite."""
    element = literal(value) if isinstance(value, str) else value
    if dialect_name == "postgresql":
        return column.op("@>")(func.jsonb_build_array(element).cast(JSONB))
    if dialect_name == "sqlite":
        each = func.json_each(column).table_valued("value")
        return select(true()).select_from(each).where(each.c.value == element).exists()
    raise NotImplementedError(f"no JSON array containment for dialect {dialect_name!r}")
