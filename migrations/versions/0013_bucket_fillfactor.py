"""calibration_buckets pages keep room for the next version of their rows (fillfactor 50)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 09:00:00.000000

PostgreSQL only. Every batch writes a new version of each bucket row it touches. A full page
sends the new version to another page, with a new entry in the primary-key index and a dead
row left behind for vacuum; a page with room keeps it on the page (a heap-only tuple), and the
next visitor of the page prunes the dead versions. New pages are filled to half; existing ones
change as they are rewritten.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


#: table -> fillfactor (percent of each new page the inserts fill).
FILLFACTOR: dict[str, int] = {"calibration_buckets": 50}


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for table, percent in FILLFACTOR.items():
        op.execute(f"ALTER TABLE {table} SET (fillfactor = {percent})")


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for table in FILLFACTOR:
        op.execute(f"ALTER TABLE {table} RESET (fillfactor)")
