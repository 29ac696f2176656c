"""labels: retention finds old labels through a BRIN index on ts instead of a b-tree on (model, ts)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 09:00:00.000000

Every label inserted also went into the b-tree ``labels(model, ts)``, which only the retention
prune reads: on PostgreSQL that index cost about a quarter of the label insert. Labels arrive
close to the order of their own time, like predictions, so a BRIN index on ``ts`` (a few pages,
one summary per block range) lets the prune find the block ranges before its cutoff, for every
model in one statement. SQLite has no BRIN: there ``ix_labels_ts`` is a b-tree on ``ts``.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("labels") as batch_op:
        batch_op.drop_index("ix_labels_model_ts")
        batch_op.create_index("ix_labels_ts", ["ts"], unique=False, postgresql_using="brin")


def downgrade() -> None:
    with op.batch_alter_table("labels") as batch_op:
        batch_op.drop_index("ix_labels_ts", postgresql_using="brin")
        batch_op.create_index("ix_labels_model_ts", ["model", "ts"], unique=False)
