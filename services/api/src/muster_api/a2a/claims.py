"""The dialect-specific part of claiming calls (belongs in ``muster_api.db.dialect``, which this capability does not
own: move it there when that file is next opened).

PostgreSQL: several instances claim at once, so the candidate rows are locked with ``FOR UPDATE SKIP LOCKED`` — a
claimer skips the rows another one is taking instead of waiting for them or taking them twice. SQLite: the engine
opens every write transaction with ``BEGIN IMMEDIATE`` (one writer at a time), so the plain select is enough; the
conditional ``UPDATE … WHERE`` that follows re-checks the lease either way.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select

from muster_api.db.dialect import supports_skip_locked


def lock_claimable(dialect_name: str, query: Select[Any]) -> Select[Any]:
    """``query`` (the candidate rows of a claim) with the row locks a concurrent claim needs on this database."""
    if supports_skip_locked(dialect_name):
        return query.with_for_update(skip_locked=True)
    return query
