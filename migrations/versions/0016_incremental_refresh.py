"""change markers, per-model refresh states and reading expiry for the incremental refresh

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 09:00:00.000000

- ``bucket_changes``: one row per (model, slice) whose buckets were written since the refresher
  last read them; every bucket write bumps ``token`` in its own transaction, and the refresher
  deletes a row only while it still holds the token it read.
- ``refresh_states``: per model, what its stored readings were computed from (contracts,
  windows, series budget), which slices are exported, its worst status and its rendered
  exposition fragment.
- ``stored_readings.stale_at``: when the reading's trailing window will have moved past a
  bucket holding data; indexed, so the refresher finds the due readings of the whole fleet in
  one range scan.
- ``stored_expositions.model_times``: the models of the exposition and, for those whose
  readings are older than the exposition, since when they are current; ``body_sha256``: the
  digest of its text, so a scrape can tell whether the text it read before is still the one
  stored without reading it again.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.types

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bucket_changes",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("slice", sa.String(length=200), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("model", "slice", name=op.f("pk_bucket_changes")),
    )
    op.create_table(
        "refresh_states",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("inputs_key", sa.Text(), nullable=False),
        sa.Column("exported", sa.JSON(), nullable=False),
        sa.Column("unexported", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=True),
        sa.Column("severity", sa.SmallInteger(), nullable=False),
        sa.Column("fragment", sa.JSON(), nullable=False),
        sa.Column("rendered_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model", name=op.f("pk_refresh_states")),
    )
    with op.batch_alter_table("stored_readings", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("stale_at", service.db.types.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.create_index("ix_stored_readings_stale_at", ["stale_at"], unique=False)
    with op.batch_alter_table("stored_expositions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("model_times", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("body_sha256", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("stored_expositions", schema=None) as batch_op:
        batch_op.drop_column("body_sha256")
        batch_op.drop_column("model_times")
    with op.batch_alter_table("stored_readings", schema=None) as batch_op:
        batch_op.drop_index("ix_stored_readings_stale_at")
        batch_op.drop_column("stale_at")
    op.drop_table("refresh_states")
    op.drop_table("bucket_changes")
