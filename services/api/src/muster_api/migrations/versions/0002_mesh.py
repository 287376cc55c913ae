"""Mesh: agents (presence leases), messages, inbox entries, idempotency keys.

Revision ID: 0002_mesh
Revises: 0001_foundation
"""

from collections.abc import Sequence

revision: str = "0002_mesh"
down_revision: str | None = "0001_foundation"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
