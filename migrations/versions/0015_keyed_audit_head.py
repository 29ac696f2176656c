"""the keyed head of the audit log

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 09:00:00.000000

``audit_head`` holds one row under ``CALMON_AUDIT_KEY``: the number of audit events, the last
one's ``seq`` and ``sha256``, the key id and an HMAC-SHA256 over them. Every keyed append
advances it, so events deleted from the end of a keyed log (or all of them) no longer match it.
The migration runs without the key and writes no row: ``calmon migrate`` writes it when it
first puts a log under the key, ``calmon audit reseal --i-know`` over a log keyed before. A
downgrade drops the table.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_head",
        sa.Column("id", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("mac", sa.String(length=64), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_audit_head_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_head")),
    )


def downgrade() -> None:
    op.drop_table("audit_head")
