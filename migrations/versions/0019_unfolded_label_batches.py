"""the label fold's queue holds one row per label request, with what the fold counts

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 10:30:00.000000

- ``unfolded_label_batches`` replaces ``unfolded_labels``: one row per label request that left
  labels for the fold, holding their count and, as one Arrow IPC stream (``payload``), each
  label with what its buckets need of its prediction, so the fold reads no prediction.
- Labels queued in the old table at upgrade are marked waiting again (``labels.joined`` false):
  the refresher's sweep of waiting labels whose prediction is stored joins and counts them once.
- A downgrade moves the batches' labels back to ``unfolded_labels`` one row each.

On PostgreSQL the batches' payload is compressed with lz4, and the table and its TOAST table are
vacuumed soon after folds delete their rows (``QUEUE_STORAGE``).
"""

from collections.abc import Sequence

import pyarrow as pa
import sqlalchemy as sa
from alembic import op

import service.db.types

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: PostgreSQL storage parameters of the new queue: vacuumed after every 50 folded batches, its
#: TOAST table (where the payloads live) after every 20,000 deleted chunks of 2 KB.
QUEUE_STORAGE = {
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "50",
    "toast.autovacuum_vacuum_scale_factor": "0",
    "toast.autovacuum_vacuum_threshold": "20000",
}


def _key(length: int) -> sa.String:
    return sa.String(length=length).with_variant(
        sa.String(length=length, collation="C"), "postgresql"
    )


def upgrade() -> None:
    op.create_table(
        "unfolded_label_batches",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("model", _key(200), nullable=False),
        sa.Column("queued_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("labels", sa.Integer(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_unfolded_label_batches")),
    )
    op.create_index("ix_unfolded_label_batches_model", "unfolded_label_batches", ["model", "seq"])
    if op.get_bind().dialect.name == "postgresql":
        settings = ", ".join(f"{k} = {v}" for k, v in QUEUE_STORAGE.items())
        op.execute(f"ALTER TABLE unfolded_label_batches SET ({settings})")
        op.execute("ALTER TABLE unfolded_label_batches ALTER COLUMN payload SET COMPRESSION lz4")
    op.execute(
        "UPDATE labels SET joined = false WHERE EXISTS (SELECT 1 FROM unfolded_labels u"
        " WHERE u.model = labels.model AND u.id = labels.id)"
    )
    op.drop_table("unfolded_labels")


def downgrade() -> None:
    op.create_table(
        "unfolded_labels",
        sa.Column("model", _key(200), nullable=False),
        sa.Column("id", _key(200), nullable=False),
        sa.Column("label", sa.SmallInteger(), nullable=False),
        sa.Column("queued_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model", "id", name=op.f("pk_unfolded_labels")),
    )
    bind = op.get_bind()
    queue = sa.table(
        "unfolded_labels",
        sa.column("model"),
        sa.column("id"),
        sa.column("label"),
        sa.column("queued_at", service.db.types.UTCDateTime(timezone=True)),
    )
    stored = sa.table(
        "unfolded_label_batches",
        sa.column("seq"),
        sa.column("model"),
        sa.column("queued_at", service.db.types.UTCDateTime(timezone=True)),
        sa.column("payload", sa.LargeBinary()),
    )
    batches = bind.execute(
        sa.select(stored.c.model, stored.c.queued_at, stored.c.payload).order_by(stored.c.seq)
    )
    for model, queued_at, payload in batches.all():
        table = pa.ipc.open_stream(bytes(payload)).read_all()
        rows = [
            {"model": model, "id": ident, "label": label, "queued_at": queued_at}
            for ident, label in zip(
                table.column("id").to_pylist(), table.column("label").to_pylist(), strict=True
            )
        ]
        if rows:
            bind.execute(queue.insert(), rows)
    op.drop_index("ix_unfolded_label_batches_model", table_name="unfolded_label_batches")
    op.drop_table("unfolded_label_batches")
