"""buckets keep all-prediction confidence counts, unlabeled squares and refit knot sums

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 12:00:00.000000

The packed statistics of a bucket gain the refit-temperature knot sums, so every stored
bucket vector changes length: the buckets and the readings derived from them are cleared and
a ``rebuild_buckets`` maintenance task is recorded, which ``calmon migrate`` runs right after
the upgrade with the application's code (predictions and labels are untouched: the buckets are
derived from them). The service reports not ready until it has run. A downgrade clears the
buckets too: the older code can neither read the new vectors nor rebuild them.
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

import service.db.types

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = service.db.types.UTCDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "maintenance_tasks",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("requested_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_maintenance_tasks")),
    )
    with op.batch_alter_table("calibration_buckets", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("unlabeled_expected_square", sa.Float(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("confidence_counts", sa.LargeBinary(), nullable=True))
    bind = op.get_bind()
    if bind.scalar(sa.text("SELECT count(*) FROM calibration_buckets")):
        op.execute("DELETE FROM calibration_buckets")
        op.execute("DELETE FROM stored_readings")
        op.execute("DELETE FROM stored_expositions")
        bind.execute(
            sa.text("INSERT INTO maintenance_tasks (name, requested_at) VALUES (:name, :at)"),
            {"name": "rebuild_buckets", "at": datetime.now(UTC)},
        )


def downgrade() -> None:
    # The older bucket layout cannot hold the new vectors, and older code cannot rebuild them.
    op.execute("DELETE FROM calibration_buckets")
    op.execute("DELETE FROM stored_readings")
    op.execute("DELETE FROM stored_expositions")
    with op.batch_alter_table("calibration_buckets", schema=None) as batch_op:
        batch_op.drop_column("confidence_counts")
        batch_op.drop_column("unlabeled_expected_square")
    op.drop_table("maintenance_tasks")
