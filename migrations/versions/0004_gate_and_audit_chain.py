"""gate decisions and the audit hash chain

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 05:37:57.108051
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.types

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gate_decisions",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("contract_id", sa.String(length=36), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("decided_at", service.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("decided_by", sa.String(length=100), nullable=False),
        sa.Column("decision", sa.String(length=8), nullable=False),
        sa.Column("policy", sa.JSON(), nullable=False),
        sa.Column("checks", sa.JSON(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("policy_sha256", sa.String(length=64), nullable=False),
        sa.Column("evidence_sha256", sa.String(length=64), nullable=False),
        sa.CheckConstraint("decision IN ('pass', 'fail')", name=op.f("ck_gate_decisions_decision")),
        sa.ForeignKeyConstraint(
            ["contract_id"], ["contracts.id"], name=op.f("fk_gate_decisions_contract_id_contracts")
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_gate_decisions")),
        sa.UniqueConstraint("id", name=op.f("uq_gate_decisions_id")),
    )
    with op.batch_alter_table("gate_decisions", schema=None) as batch_op:
        batch_op.create_index("ix_gate_decisions_contract_id", ["contract_id"], unique=False)
        batch_op.create_index(
            "ix_gate_decisions_model_decided_at", ["model", "decided_at"], unique=False
        )

    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prev_sha256", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("sha256", sa.String(length=64), nullable=True))
    _chain_existing_events()
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.alter_column("prev_sha256", existing_type=sa.String(length=64), nullable=False)
        batch_op.alter_column("sha256", existing_type=sa.String(length=64), nullable=False)


def _chain_existing_events() -> None:
    """Hash-chain the events recorded before the chain existed, in append order."""
    from service.audit.chain import GENESIS, event_digest

    events = sa.table(
        "audit_events",
        sa.column("seq", sa.BigInteger()),
        sa.column("ts", service.db.types.UTCDateTime()),
        sa.column("type", sa.String()),
        sa.column("actor", sa.String()),
        sa.column("model", sa.String()),
        sa.column("contract_id", sa.String()),
        sa.column("details", sa.JSON()),
        sa.column("prev_sha256", sa.String()),
        sa.column("sha256", sa.String()),
    )
    connection = op.get_bind()
    prev = GENESIS
    for row in connection.execute(sa.select(events).order_by(events.c.seq)).mappings().all():
        digest = event_digest(
            prev,
            ts=row["ts"],
            type=row["type"],
            actor=row["actor"],
            model=row["model"],
            contract_id=row["contract_id"],
            details=row["details"],
        )
        connection.execute(
            events.update()
            .where(events.c.seq == row["seq"])
            .values(prev_sha256=prev, sha256=digest)
        )
        prev = digest


def downgrade() -> None:
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_column("sha256")
        batch_op.drop_column("prev_sha256")

    with op.batch_alter_table("gate_decisions", schema=None) as batch_op:
        batch_op.drop_index("ix_gate_decisions_model_decided_at")
        batch_op.drop_index("ix_gate_decisions_contract_id")

    op.drop_table("gate_decisions")
