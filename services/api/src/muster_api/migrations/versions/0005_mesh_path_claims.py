"""Mesh: path claims (bound to their holder's presence lease) and the per-repository row a grant locks.

Revision ID: 0005_mesh_path_claims
Revises: 0004_dispatch
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from muster_api.db.schema import UTCDateTime

revision: str = "0005_mesh_path_claims"
down_revision: str | None = "0004_dispatch"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mesh_claims",
        sa.Column("claim_id", sa.String(32), nullable=False),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("pattern", sa.String(256), nullable=False),
        sa.Column("exclusive", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.String(280), nullable=True),
        sa.Column("since", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["holder"], ["mesh_agents.agent_id"], name="fk_mesh_claims_holder_mesh_agents", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("claim_id", name="pk_mesh_claims"),
        sa.UniqueConstraint("repo", "holder", "pattern", name="uq_mesh_claims_repo"),
    )
    op.create_index("ix_mesh_claims_holder", "mesh_claims", ["holder"])
    op.create_table(
        "mesh_claim_repos",
        sa.Column("repo", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("repo", name="pk_mesh_claim_repos"),
    )


def downgrade() -> None:
    op.drop_table("mesh_claim_repos")
    op.drop_index("ix_mesh_claims_holder", table_name="mesh_claims")
    op.drop_table("mesh_claims")
