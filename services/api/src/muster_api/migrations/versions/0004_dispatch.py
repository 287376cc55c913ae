"""Dispatch: runs and their journals.

Revision ID: 0004_dispatch
Revises: 0003_a2a
"""

from collections.abc import Sequence

revision: str = "0004_dispatch"
down_revision: str | None = "0003_a2a"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
