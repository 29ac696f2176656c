"""predictions, labels, cohorts and calibration buckets

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 05:16:36.462791
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.types

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "calibration_buckets",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("slice", sa.String(length=200), nullable=False),
        sa.Column("resolution", sa.String(length=2), nullable=False),
        sa.Column("bucket_start", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("contract_id", sa.String(length=36), nullable=False),
        sa.Column("n_predictions", sa.BigInteger(), nullable=False),
        sa.Column("n_labeled", sa.BigInteger(), nullable=False),
        sa.Column("unlabeled_expected_correct", sa.Float(), nullable=False),
        sa.Column("stats", sa.LargeBinary(), nullable=True),
        sa.CheckConstraint(
            "resolution IN ('5m', '1h')", name=op.f("ck_calibration_buckets_resolution")
        ),
        sa.PrimaryKeyConstraint(
            "model",
            "slice",
            "resolution",
            "bucket_start",
            "contract_id",
            name=op.f("pk_calibration_buckets"),
        ),
    )
    op.create_table(
        "cohort_values",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("model", "key", "value", name=op.f("pk_cohort_values")),
    )
    op.create_table(
        "labels",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("label", sa.SmallInteger(), nullable=False),
        sa.Column("ts", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("received_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("joined", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("model", "id", name=op.f("pk_labels")),
    )
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.create_index(
            "ix_labels_waiting",
            ["model"],
            unique=False,
            postgresql_where=sa.text("NOT joined"),
            sqlite_where=sa.text("NOT joined"),
        )

    op.create_table(
        "predictions",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("contract_id", sa.String(length=36), nullable=False),
        sa.Column("ts", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("cohort", sa.JSON(), nullable=False),
        sa.Column("slices", sa.Text(), nullable=False),
        sa.Column("inputs", sa.LargeBinary(), nullable=False),
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.Column("received_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model", "id", name=op.f("pk_predictions")),
    )
    with op.batch_alter_table("predictions", schema=None) as batch_op:
        batch_op.create_index("ix_predictions_model_ts", ["model", "ts"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("predictions", schema=None) as batch_op:
        batch_op.drop_index("ix_predictions_model_ts")

    op.drop_table("predictions")
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_labels_waiting",
            postgresql_where=sa.text("NOT joined"),
            sqlite_where=sa.text("NOT joined"),
        )

    op.drop_table("labels")
    op.drop_table("cohort_values")
    op.drop_table("calibration_buckets")
