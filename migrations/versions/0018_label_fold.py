"""labels acknowledged before they are counted: the label fold's queue and marks

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01 22:40:00.000000

- ``unfolded_labels``: joined labels not yet added to their buckets, one row each, keyed like
  ``labels`` (``COLLATE "C"`` on PostgreSQL); the fold deletes a row in the transaction that
  counts it.
- ``label_fold_marks``: per model, when the fold last counted its labels.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.types

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _key(length: int) -> sa.String:
    return sa.String(length=length).with_variant(
        sa.String(length=length, collation="C"), "postgresql"
    )


def upgrade() -> None:
    op.create_table(
        "unfolded_labels",
        sa.Column("model", _key(200), nullable=False),
        sa.Column("id", _key(200), nullable=False),
        sa.Column("label", sa.SmallInteger(), nullable=False),
        sa.Column("queued_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model", "id", name=op.f("pk_unfolded_labels")),
    )
    op.create_table(
        "label_fold_marks",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("folded_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model", name=op.f("pk_label_fold_marks")),
    )


def downgrade() -> None:
    """Drop the queue. Labels still in it are joined but not in any bucket; a downgrade run
    while labels wait is followed by ``calmon migrate``'s bucket rebuild, or loses them from the
    statistics (the rows themselves stay in ``labels``)."""
    op.drop_table("label_fold_marks")
    op.drop_table("unfolded_labels")
