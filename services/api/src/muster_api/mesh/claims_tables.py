"""SQL table of path claims (on the one service MetaData). A claim's life is its holder's lease: reads join
mesh_agents and keep the rows whose holder is live; there is no expiry column to forget."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, ForeignKey, Index, String, Table, UniqueConstraint

from muster_api.db.schema import UTCDateTime, metadata

claims = Table(
    "mesh_claims",
    metadata,
    Column("claim_id", String(32), primary_key=True),
    Column("repo", String(200), nullable=False),
    Column("holder", String(64), ForeignKey("mesh_agents.agent_id", ondelete="CASCADE"), nullable=False),
    Column("pattern", String(256), nullable=False),
    Column("exclusive", Boolean, nullable=False),
    Column("reason", String(280), nullable=True),
    Column("since", UTCDateTime, nullable=False),
    UniqueConstraint("repo", "holder", "pattern"),
    Index("ix_mesh_claims_holder", "holder"),
)

# One row per repository that ever had a claim: locked by a grant, so that two grants in one repo are serial.
claim_repos = Table("mesh_claim_repos", metadata, Column("repo", String(200), primary_key=True))

__all__ = ["claim_repos", "claims"]
