"""one predictions table keyed by (model, id): no daily partitions, no idempotency keys apart

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 09:00:00.000000

``predictions`` becomes one table with primary key ``(model, id)`` (the label probe and the
idempotency key in one index) and a BRIN index on ``ts`` (retention deletes by event time). The
stored rows are copied over; ``prediction_keys``, the content digests, the daily partitions and
the default partition are dropped, and so is ``prunes.partitions_dropped``. Stop ingest while it
runs: it rewrites the table.

The downgrade rebuilds the 0008 layout: ``prediction_keys`` with each content digest recomputed
as revision 0006's code computed it, and on PostgreSQL ``predictions`` partitioned by UTC day
(partitions from the first stored day, or yesterday, through the last, or a week ahead, and the
default partition).
"""

import hashlib
from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

import service.db.types
from service.migrations import daily_partitions

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = service.db.types.UTCDateTime(timezone=True)
_COLUMNS = "model, id, contract_id, ts, cohort, slices, inputs, received_at"
#: Rows read per round trip when the downgrade recomputes the content digests.
_PAGE = 10_000


def _payload_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("contract_id", sa.String(length=36), nullable=False),
        sa.Column("cohort", sa.JSON(), nullable=False),
        sa.Column("slices", sa.Text(), nullable=False),
        sa.Column("inputs", sa.LargeBinary(), nullable=False),
        sa.Column("received_at", _TS, nullable=False),
    ]


def _rename_predictions(to: str) -> None:
    op.rename_table("predictions", to)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER INDEX pk_predictions RENAME TO pk_{to}")


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    _rename_predictions("predictions_partitioned")
    op.create_table(
        "predictions",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("ts", _TS, nullable=False),
        *_payload_columns(),
        sa.PrimaryKeyConstraint("model", "id", name=op.f("pk_predictions")),
    )
    op.execute(
        f"INSERT INTO predictions ({_COLUMNS}) SELECT p.model, p.id, p.contract_id, p.ts,"
        " p.cohort, p.slices, p.inputs, p.received_at FROM predictions_partitioned p"
        " JOIN prediction_keys k ON k.model = p.model AND k.id = p.id AND k.ts = p.ts"
    )
    # Dropping the partitioned parent drops its daily partitions and the default one.
    op.drop_table("predictions_partitioned")
    op.drop_index("ix_prediction_keys_ts", table_name="prediction_keys", postgresql_using="brin")
    op.drop_table("prediction_keys")
    op.create_index("ix_predictions_ts", "predictions", ["ts"], postgresql_using="brin")
    with op.batch_alter_table("prunes", schema=None) as batch_op:
        batch_op.drop_column("partitions_dropped")
    if postgres:
        op.execute("ANALYZE predictions")


def content_digest(ts: datetime, cohort: str, inputs: bytes) -> bytes:
    """The content digest revision 0006's code stored: SHA-256 of the event time (UTC ISO 8601),
    the cohort's canonical JSON (as stored) and the float64 bytes of the logits or score."""
    return hashlib.sha256(b"%s|%s|%s" % (ts.isoformat().encode(), cohort.encode(), inputs)).digest()


def _restore_keys(bind: sa.Connection) -> None:
    """Fill ``prediction_keys`` from ``predictions_flat``, page by page in key order."""
    keys = sa.table(
        "prediction_keys",
        sa.column("model", sa.String()),
        sa.column("id", sa.String()),
        sa.column("ts", _TS),
        sa.column("digest", sa.LargeBinary()),
    )
    page = sa.text(
        "SELECT model, id, ts, CAST(cohort AS TEXT), inputs FROM predictions_flat"
        " WHERE model > :model OR (model = :model AND id > :id) ORDER BY model, id LIMIT :limit"
    ).columns(sa.column("model"), sa.column("id"), sa.column("ts", _TS))
    after = {"model": "", "id": ""}
    while True:
        rows = bind.execute(page, {**after, "limit": _PAGE}).all()
        if not rows:
            return
        bind.execute(
            sa.insert(keys),
            [
                {
                    "model": model,
                    "id": ident,
                    "ts": ts,
                    "digest": content_digest(ts, cohort, bytes(inputs)),
                }
                for model, ident, ts, cohort, inputs in rows
            ],
        )
        after = {"model": rows[-1][0], "id": rows[-1][1]}


def downgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    with op.batch_alter_table("prunes", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("partitions_dropped", sa.BigInteger(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("prunes", schema=None) as batch_op:
        batch_op.alter_column("partitions_dropped", server_default=None)
    op.drop_index("ix_predictions_ts", table_name="predictions", postgresql_using="brin")
    _rename_predictions("predictions_flat")
    op.create_table(
        "prediction_keys",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("ts", _TS, nullable=False),
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("model", "id", name=op.f("pk_prediction_keys")),
    )
    _restore_keys(bind)
    op.create_index("ix_prediction_keys_ts", "prediction_keys", ["ts"], postgresql_using="brin")
    op.create_table(
        "predictions",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("ts", _TS, nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        *_payload_columns(),
        sa.PrimaryKeyConstraint("model", "ts", "id", name=op.f("pk_predictions")),
        **({"postgresql_partition_by": "RANGE (ts)"} if postgres else {}),
    )
    if postgres:
        first, last = bind.execute(sa.text("SELECT min(ts), max(ts) FROM predictions_flat")).one()
        daily_partitions.create_daily_partitions(bind, *daily_partitions.covering_days(first, last))
    op.execute(f"INSERT INTO predictions ({_COLUMNS}) SELECT {_COLUMNS} FROM predictions_flat")
    op.drop_table("predictions_flat")
    if postgres:
        op.execute("ANALYZE predictions")
        op.execute("ANALYZE prediction_keys")
