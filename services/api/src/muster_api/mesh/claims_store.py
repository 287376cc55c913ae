"""The path claims' statements of a SQL mesh transaction (``muster_mesh.claims.ClaimTx``), mixed into
``SqlMeshTx`` so that the caller's renewal and its claims commit together."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import bindparam, delete, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from muster_api.db.dialect import Dialect
from muster_api.mesh.claims_tables import claim_repos, claims
from muster_api.mesh.tables import agents
from muster_api.mesh.tasks_tables import tasks
from muster_mesh.claims import ClaimRecord


class HasDialect(Protocol):
    """What these statements need of the store they run in (the store itself mixes them into its transaction, so
    naming the store here would make a cycle)."""

    @property
    def dialect(self) -> Dialect: ...


LIVE = (
    select(claims)
    .join(agents, agents.c.agent_id == claims.c.holder)
    .where(agents.c.expires_at > bindparam("p_now"))
    .order_by(claims.c.repo, claims.c.holder, claims.c.pattern)
)


# The statements of each filter, built once: a check runs one per call, and building it again costs more than
# running it.
_LIVE_BY: dict[tuple[bool, bool], Any] = {
    (by_repo, by_holder): LIVE.where(
        *([claims.c.repo == bindparam("p_repo")] if by_repo else []),
        *([claims.c.holder == bindparam("p_holder")] if by_holder else []),
    )
    for by_repo in (False, True)
    for by_holder in (False, True)
}


def live_statement(by_repo: bool, by_holder: bool) -> Any:
    """The live claims, narrowed to ``p_repo`` and/or ``p_holder``."""
    return _LIVE_BY[by_repo, by_holder]


# What a check matches against: the live exclusive claims of ``p_repo`` held by agents other than ``p_me``.
OTHERS_EXCLUSIVE = live_statement(True, False).where(claims.c.exclusive == true(), claims.c.holder != bindparam("p_me"))

# The same on PostgreSQL after the caller's renewal, in one statement on ``DriverPool``: $1 now, $2 the new expiry,
# $3 the token hash, $4 the TTL the expiry was computed for, $5 the repo. One row per claim (its columns in
# ``ClaimRecord``'s order), or one with NULL claim columns; none when the token or TTL does not qualify.
# The renewal is all this statement writes, and it commits without waiting for its WAL flush (``synchronous_commit``
# off for this transaction alone, set by the row's own condition, so no renewal is written without it): the flush was
# most of a check's wall time. A crash may lose the last such extensions, which only shortens a lease; any later
# commit that waits flushes them with it (the WAL is written in order).
RENEW_AND_CLAIMS_PG = """
WITH a AS (
    UPDATE mesh_agents SET last_seen_at = $1, expires_at = $2
    WHERE token_hash = $3 AND expires_at > $1 AND ttl_seconds = $4
      AND set_config('synchronous_commit', 'off', true) = 'off'
    RETURNING agent_id
)
SELECT c.claim_id, c.repo, c.holder, c.pattern, c.exclusive, c.reason, c.since
FROM a LEFT JOIN LATERAL (
    SELECT k.* FROM mesh_claims AS k JOIN mesh_agents AS h ON h.agent_id = k.holder
    WHERE h.expires_at > $1 AND k.repo = $5 AND k.exclusive AND k.holder <> a.agent_id
) AS c ON true
ORDER BY c.repo, c.holder, c.pattern
"""


def _record(m: object) -> ClaimRecord:
    return claim_record(getattr(m, "_mapping"))  # noqa: B009 - a Row's mapping


def claim_record(row: Mapping[str, Any]) -> ClaimRecord:
    return ClaimRecord(
        claim_id=row["claim_id"],
        repo=row["repo"],
        holder=row["holder"],
        pattern=row["pattern"],
        exclusive=bool(row["exclusive"]),
        reason=row["reason"],
        since=row["since"],
    )


class SqlClaims:
    """Path claims on ``mesh_claims``; a grant locks its repository's row of ``mesh_claim_repos`` first."""

    _conn: AsyncConnection
    _store: HasDialect

    async def lock_repo_claims(self, repo: str) -> None:
        dialect = self._store.dialect
        await self._conn.execute(dialect.insert_ignore(claim_repos, {"repo": repo}, conflict=["repo"]))
        await self._conn.execute(dialect.lock_rows(select(claim_repos.c.repo).where(claim_repos.c.repo == repo)))

    async def live_claims(self, live_at: datetime, *, repo: str | None, holder: str | None) -> list[ClaimRecord]:
        stmt = live_statement(repo is not None, holder is not None)
        params = {"p_now": live_at, "p_repo": repo, "p_holder": holder}
        return [_record(r) for r in (await self._conn.execute(stmt, params)).all()]

    async def put_claims(self, records: Sequence[ClaimRecord]) -> None:
        rows: list[Mapping[str, Any]] = [
            {
                "claim_id": r.claim_id,
                "repo": r.repo,
                "holder": r.holder,
                "pattern": r.pattern,
                "exclusive": r.exclusive,
                "reason": r.reason,
                "since": r.since,
            }
            for r in records
        ]
        stmt = self._store.dialect.upsert(
            claims, rows, conflict=["repo", "holder", "pattern"], update=["exclusive", "reason"]
        )
        await self._conn.execute(stmt)

    async def delete_claims(self, holder: str, ids: Sequence[str]) -> None:
        await self._conn.execute(delete(claims).where(claims.c.holder == holder, claims.c.claim_id.in_(list(ids))))

    async def end_holdings(self, agent_id: str) -> None:
        await self._conn.execute(delete(claims).where(claims.c.holder == agent_id))
        await self._conn.execute(
            update(tasks).where(tasks.c.holder == agent_id, tasks.c.state == "claimed").values(holder=None)
        )


__all__ = ["OTHERS_EXCLUSIVE", "RENEW_AND_CLAIMS_PG", "SqlClaims", "claim_record", "live_statement"]
