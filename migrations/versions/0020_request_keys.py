"""request_keys: the Idempotency-Key of each audited write that came with one

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03 12:30:00.000000

- ``request_keys``: one row per key, naming the operation, the SHA-256 of the request body and
  the id of what the write made (a contract, a gate decision), so a retried registration,
  fit, retirement or gate request returns the first one's result.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.types

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "request_keys",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("operation", sa.String(length=64), nullable=False),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("result_id", sa.String(length=36), nullable=False),
        sa.Column("created_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_request_keys")),
    )


def downgrade() -> None:
    op.drop_table("request_keys")
