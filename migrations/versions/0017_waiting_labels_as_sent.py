"""labels keep the class name they were sent with

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 09:00:00.000000

- ``labels.label_name``: the class name a label was sent with, NULL for a label sent as a class
  index. A label means a class of the contract its prediction is bound to; a label waiting for
  its prediction is judged by that contract's classes when the prediction arrives, by its name
  as sent.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.add_column(sa.Column("label_name", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.drop_column("label_name")
