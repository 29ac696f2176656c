"""index labels by model and time

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 06:12:15.316856
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.create_index("ix_labels_model_ts", ["model", "ts"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.drop_index("ix_labels_model_ts")
