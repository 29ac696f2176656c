"""the gate role and server-side review-page sessions

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 09:00:00.000000

``api_tokens.role`` may be ``gate`` (read and ask the gate). ``ui_sessions`` holds the review
page's sign-ins: the cookie carries a random session id, the table only its SHA-256. Sign-ins
made before this revision kept the token itself in the cookie; that cookie is no longer read,
so those browsers sign in again. A downgrade makes every gate token a reader token first (the
older constraint cannot hold them; reading is the part of ``gate`` the older roles have) and
drops the sessions.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.types

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = service.db.types.UTCDateTime(timezone=True)
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _role_constraint(roles: str) -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_api_tokens_role"), type_="check")
        batch_op.create_check_constraint(op.f("ck_api_tokens_role"), f"role IN ({roles})")


def upgrade() -> None:
    _role_constraint("'reader', 'ingest', 'gate', 'admin'")
    op.create_table(
        "ui_sessions",
        sa.Column("id_sha256", sa.String(length=64), nullable=False),
        sa.Column("token_id", _ID, nullable=True),
        sa.Column("token_binding", sa.String(length=64), nullable=False),
        sa.Column("principal", sa.String(length=100), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("expires_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_tokens.id"],
            name=op.f("fk_ui_sessions_token_id_api_tokens"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id_sha256", name=op.f("pk_ui_sessions")),
    )
    with op.batch_alter_table("ui_sessions", schema=None) as batch_op:
        batch_op.create_index("ix_ui_sessions_expires_at", ["expires_at"], unique=False)
        batch_op.create_index("ix_ui_sessions_token_id", ["token_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ui_sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_ui_sessions_token_id")
        batch_op.drop_index("ix_ui_sessions_expires_at")
    op.drop_table("ui_sessions")
    op.execute("UPDATE api_tokens SET role = 'reader' WHERE role = 'gate'")
    _role_constraint("'reader', 'ingest', 'admin'")
