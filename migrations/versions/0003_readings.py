"""stored readings, their exposition and refresh leases

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 05:32:32.951777
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.types

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "refresh_leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("expires_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_refresh_leases")),
    )
    op.create_table(
        "stored_expositions",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("computed_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_stored_expositions")),
    )
    op.create_table(
        "stored_readings",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("cohort", sa.String(length=200), nullable=False),
        sa.Column("window", sa.String(length=16), nullable=False),
        sa.Column("contract_id", sa.String(length=36), nullable=False),
        sa.Column("contract_version", sa.Integer(), nullable=False),
        sa.Column("computed_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("model", "cohort", "window", name=op.f("pk_stored_readings")),
    )


def downgrade() -> None:
    op.drop_table("stored_readings")
    op.drop_table("stored_expositions")
    op.drop_table("refresh_leases")
