"""initial schema: tokens, models, contracts, retirements, audit

Revision ID: 0001
Revises:
Create Date: 2026-11-30 04:45:38.411126
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.types

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=100), nullable=False),
        sa.Column("revoked_at", service.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "role IN ('reader', 'ingest', 'admin')", name=op.f("ck_api_tokens_role")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_api_tokens_name")),
        sa.UniqueConstraint("token_sha256", name=op.f("uq_api_tokens_token_sha256")),
    )
    op.create_table(
        "audit_events",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("ts", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=100), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("contract_id", sa.String(length=36), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_audit_events")),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index("ix_audit_events_model_seq", ["model", "seq"], unique=False)
        batch_op.create_index("ix_audit_events_type_seq", ["type", "seq"], unique=False)

    op.create_table(
        "models",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("latest_version", sa.Integer(), nullable=False),
        sa.Column("created_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_models")),
    )
    op.create_table(
        "contracts",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("checkpoint", sa.String(length=200), nullable=False),
        sa.Column("task", sa.String(length=16), nullable=False),
        sa.Column("classes", sa.JSON(), nullable=False),
        sa.Column("calibrator", sa.JSON(), nullable=False),
        sa.Column("objective", sa.String(length=32), nullable=False),
        sa.Column("population", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("data_window", sa.JSON(), nullable=False),
        sa.Column("split", sa.JSON(), nullable=False),
        sa.Column("bin_edges", sa.JSON(), nullable=False),
        sa.Column("baseline", sa.JSON(), nullable=False),
        sa.Column("policy", sa.JSON(), nullable=False),
        sa.Column("created_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=100), nullable=False),
        sa.Column("content_sha256", sa.String(length=64), nullable=False),
        sa.CheckConstraint("task IN ('multiclass', 'binary')", name=op.f("ck_contracts_task")),
        sa.CheckConstraint("version >= 1", name=op.f("ck_contracts_version_positive")),
        sa.ForeignKeyConstraint(["model"], ["models.name"], name=op.f("fk_contracts_model_models")),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_contracts")),
        sa.UniqueConstraint("id", name=op.f("uq_contracts_id")),
        sa.UniqueConstraint("model", "version", name=op.f("uq_contracts_model_version")),
    )
    with op.batch_alter_table("contracts", schema=None) as batch_op:
        batch_op.create_index(
            "ix_contracts_model_created_at", ["model", "created_at"], unique=False
        )

    op.create_table(
        "contract_retirements",
        sa.Column("contract_id", sa.String(length=36), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("retired_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("retired_by", sa.String(length=100), nullable=False),
        sa.ForeignKeyConstraint(
            ["contract_id"],
            ["contracts.id"],
            name=op.f("fk_contract_retirements_contract_id_contracts"),
        ),
        sa.PrimaryKeyConstraint("contract_id", name=op.f("pk_contract_retirements")),
    )


def downgrade() -> None:
    op.drop_table("contract_retirements")
    with op.batch_alter_table("contracts", schema=None) as batch_op:
        batch_op.drop_index("ix_contracts_model_created_at")

    op.drop_table("contracts")
    op.drop_table("models")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_events_type_seq")
        batch_op.drop_index("ix_audit_events_model_seq")

    op.drop_table("audit_events")
    op.drop_table("api_tokens")
