"""hot tables' keys compare byte by byte: COLLATE "C" on PostgreSQL

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 10:00:00.000000

The key columns of ``predictions``, ``labels`` and ``calibration_buckets`` took the database's
collation, so every primary-key probe, index insert and sort on them called the locale's
``strcoll`` (about a sixth of PostgreSQL's CPU during the label join). They are only compared
for equality and walked in order, so they move to ``COLLATE "C"``: UTF-8 byte order, the same
order as Python's ``sorted`` and as SQLite's ``BINARY`` collation, which SQLite already uses
(nothing changes there).

PostgreSQL rebuilds the primary-key indexes of the three tables (the tables themselves are not
rewritten); on a large database that takes minutes and holds an exclusive lock meanwhile.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: table -> (column, VARCHAR length)
KEYS: dict[str, tuple[tuple[str, int], ...]] = {
    "predictions": (("model", 200), ("id", 200)),
    "labels": (("model", 200), ("id", 200)),
    "calibration_buckets": (("model", 200), ("slice", 200), ("resolution", 2), ("contract_id", 36)),
}


def _collate(collation: str) -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for table, columns in KEYS.items():
        alter = ", ".join(
            f"ALTER COLUMN {column} TYPE varchar({length}) COLLATE {collation}"
            for column, length in columns
        )
        op.execute(f"ALTER TABLE {table} {alter}")


def upgrade() -> None:
    _collate('"C"')


def downgrade() -> None:
    _collate('"default"')
