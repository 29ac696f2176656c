"""predictions partitioned by day on PostgreSQL; idempotency keys apart; prune history

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 08:00:00.000000

Existing predictions are copied: their keys into ``prediction_keys``, their rows into the new
``predictions`` (on PostgreSQL into daily partitions from the first stored day, or yesterday,
through the last stored day, or a week ahead). Stop ingest while it runs: it rewrites the table.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.types
from service.migrations import daily_partitions

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = service.db.types.UTCDateTime(timezone=True)
_PAYLOAD = "model, ts, id, contract_id, cohort, slices, inputs, received_at"


def _predictions_table(name: str, **kwargs: str) -> None:
    op.create_table(
        name,
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("ts", _TS, nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("contract_id", sa.String(length=36), nullable=False),
        sa.Column("cohort", sa.JSON(), nullable=False),
        sa.Column("slices", sa.Text(), nullable=False),
        sa.Column("inputs", sa.LargeBinary(), nullable=False),
        sa.Column("received_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("model", "ts", "id", name=op.f(f"pk_{name}")),
        **kwargs,
    )


def upgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    op.create_table(
        "prediction_keys",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("ts", _TS, nullable=False),
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("model", "id", name=op.f("pk_prediction_keys")),
    )
    op.execute(
        "INSERT INTO prediction_keys (model, id, ts, digest) SELECT model, id, ts, digest FROM predictions"
    )
    op.create_index("ix_prediction_keys_ts", "prediction_keys", ["ts"], postgresql_using="brin")
    op.create_table(
        "prunes",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("cutoff", _TS, nullable=False),
        sa.Column("pruned_at", _TS, nullable=False),
        sa.Column("partitions_dropped", sa.BigInteger(), nullable=False),
        sa.Column("predictions", sa.BigInteger(), nullable=False),
        sa.Column("labels", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_prunes")),
    )

    op.drop_index("ix_predictions_model_ts", table_name="predictions")
    if postgres:
        op.execute("ALTER TABLE predictions RENAME TO predictions_unpartitioned")
        op.execute("ALTER INDEX pk_predictions RENAME TO pk_predictions_unpartitioned")
        _predictions_table("predictions", postgresql_partition_by="RANGE (ts)")
        first, last = bind.execute(
            sa.text("SELECT min(ts), max(ts) FROM predictions_unpartitioned")
        ).one()
        daily_partitions.create_daily_partitions(bind, *daily_partitions.covering_days(first, last))
        op.execute(
            f"INSERT INTO predictions ({_PAYLOAD}) SELECT {_PAYLOAD} FROM predictions_unpartitioned"
        )
        op.drop_table("predictions_unpartitioned")
        op.execute("ANALYZE predictions")
        op.execute("ANALYZE prediction_keys")
    else:
        op.rename_table("predictions", "predictions_unpartitioned")
        _predictions_table("predictions")
        op.execute(
            f"INSERT INTO predictions ({_PAYLOAD}) SELECT {_PAYLOAD} FROM predictions_unpartitioned"
        )
        op.drop_table("predictions_unpartitioned")


def downgrade() -> None:
    op.rename_table("predictions", "predictions_partitioned")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER INDEX pk_predictions RENAME TO pk_predictions_partitioned")
    op.create_table(
        "predictions",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("contract_id", sa.String(length=36), nullable=False),
        sa.Column("ts", _TS, nullable=False),
        sa.Column("cohort", sa.JSON(), nullable=False),
        sa.Column("slices", sa.Text(), nullable=False),
        sa.Column("inputs", sa.LargeBinary(), nullable=False),
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.Column("received_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("model", "id", name=op.f("pk_predictions")),
    )
    op.execute(
        "INSERT INTO predictions (model, id, contract_id, ts, cohort, slices, inputs, digest,"
        " received_at) SELECT p.model, p.id, p.contract_id, p.ts, p.cohort, p.slices, p.inputs,"
        " k.digest, p.received_at FROM predictions_partitioned p JOIN prediction_keys k"
        " ON k.model = p.model AND k.id = p.id"
    )
    op.drop_table("predictions_partitioned")
    op.create_index("ix_predictions_model_ts", "predictions", ["model", "ts"])
    op.drop_table("prunes")
    op.drop_index("ix_prediction_keys_ts", table_name="prediction_keys", postgresql_using="brin")
    op.drop_table("prediction_keys")
