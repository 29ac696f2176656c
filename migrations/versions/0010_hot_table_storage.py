"""storage settings for the tables the streams write: autovacuum thresholds, lz4 for bucket blobs

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 09:00:00.000000

PostgreSQL only (SQLite has neither autovacuum nor TOAST). The server-wide defaults wait for 20% of a table to
change before vacuuming it and 10% before analysing it, which for a table of hundreds of millions
of rows means days of dead tuples and stale planner statistics:

- ``calibration_buckets`` is small and rewritten by every batch (each bucket touched gets a new
  row version): vacuumed after 1% of its rows are dead, so the table and its index stay the size
  of the live buckets.
- ``predictions`` and ``labels`` are insert-mostly: analysed after 2% new rows and vacuumed after
  5% inserted (which keeps the visibility map current, so index-only scans and the retention
  deletes' BRIN ranges stay cheap).

Every batch rewrites the statistics blobs of the buckets it touches (a few KB each), and
PostgreSQL's default ``pglz`` compresses each new version at a fraction of ``lz4``'s speed:
``calibration_buckets.stats`` and ``.confidence_counts`` are compressed with ``lz4`` instead
(new row versions only; nothing is rewritten by the migration).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: table -> storage parameters (PostgreSQL ``ALTER TABLE ... SET``).
THRESHOLDS: dict[str, dict[str, str]] = {
    "calibration_buckets": {
        "autovacuum_vacuum_scale_factor": "0.01",
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_analyze_scale_factor": "0.05",
    },
    "predictions": {
        "autovacuum_vacuum_insert_scale_factor": "0.05",
        "autovacuum_analyze_scale_factor": "0.02",
    },
    "labels": {
        "autovacuum_vacuum_scale_factor": "0.05",
        "autovacuum_vacuum_insert_scale_factor": "0.05",
        "autovacuum_analyze_scale_factor": "0.02",
    },
}


#: table -> columns compressed with lz4.
LZ4_COLUMNS: dict[str, tuple[str, ...]] = {"calibration_buckets": ("confidence_counts", "stats")}


def _compression(method: str) -> None:
    for table, columns in LZ4_COLUMNS.items():
        alter = ", ".join(f"ALTER COLUMN {column} SET COMPRESSION {method}" for column in columns)
        op.execute(f"ALTER TABLE {table} {alter}")


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for table, parameters in THRESHOLDS.items():
        settings = ", ".join(f"{name} = {value}" for name, value in parameters.items())
        op.execute(f"ALTER TABLE {table} SET ({settings})")
    _compression("lz4")


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    _compression("default")
    for table, parameters in THRESHOLDS.items():
        op.execute(f"ALTER TABLE {table} RESET ({', '.join(parameters)})")
