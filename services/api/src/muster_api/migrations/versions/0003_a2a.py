"""A2A: remote call handles.

Revision ID: 0003_a2a
Revises: 0002_mesh
"""

from collections.abc import Sequence

revision: str = "0003_a2a"
down_revision: str | None = "0002_mesh"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
