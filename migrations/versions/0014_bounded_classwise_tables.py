"""bucket statistics keep class-wise tables only up to 1,500 cells (classes times bins)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 09:00:00.000000

A multiclass bucket's packed statistics (``service.calibration.packing``) are, in order, 5
scalars, 3 M bin sums, K label counts, the 3 K M values of the class-wise tables and 111 refit
knot sums (K classes, M bins). The class-wise tables made a bucket row 2.4 MB at K = 1,000 and
M = 100; from this revision bucket statistics keep them only when K M <= 1,500 (K = 100 at the
default 15 bins). The upgrade rewrites the ``stats`` vector of every bucket of a multiclass
contract with K M > 1,500 without those 3 K M values. Every other value is kept bit for bit, so
every reading those buckets still give is unchanged and nothing needs rebuilding (a rebuild
could not restore buckets whose predictions retention has deleted). Vectors of any other length
(already rewritten) are left alone. It reads and writes one bucket row at a time. Ingest for
such models must wait for the new code: older code would write the old layout again.

The downgrade gives those vectors back their old length with the class-wise tables as zeros:
older code then reads them, but its class-wise reliability of such a contract counts only the
rows added after the downgrade (its ``classwise_ece`` over older buckets is 0, not a measure).
"""

from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The class-wise limit this revision applies, in cells K M (``packing.CLASSWISE_MAX_CELLS``).
MAX_CELLS = 1500
#: Scalars before the bin sums, and refit knot sums after the statistics, of a packed vector.
SCALARS = 5
KNOT_SUMS = 3 * 37

_CONTRACTS = sa.table(
    "contracts",
    sa.column("id", sa.String),
    sa.column("model", sa.String),
    sa.column("task", sa.String),
    sa.column("classes", sa.JSON),
    sa.column("bin_edges", sa.JSON),
)
_KEY = "model = :model AND slice = :slice AND resolution = :resolution AND bucket_start = :start"


def tables_span(n_classes: int, n_bins: int) -> tuple[int, int]:
    """Where the class-wise tables sit in a packed multiclass vector: ``(first value, number of
    values)``; the vector holds ``SCALARS + 3 M + K + 3 K M + KNOT_SUMS`` values with them."""
    return SCALARS + 3 * n_bins + n_classes, 3 * n_classes * n_bins


def _large_contracts(bind: sa.Connection) -> list[tuple[str, str, int, int]]:
    """``(id, model, K, M)`` of every multiclass contract of more than ``MAX_CELLS`` cells."""
    rows = bind.execute(
        sa.select(_CONTRACTS.c.id, _CONTRACTS.c.model, _CONTRACTS.c.classes, _CONTRACTS.c.bin_edges)
        .where(_CONTRACTS.c.task == "multiclass")
        .order_by(_CONTRACTS.c.id)
    )
    return [
        (cid, model, len(classes), len(edges) - 1)
        for cid, model, classes, edges in rows
        if len(classes) * (len(edges) - 1) > MAX_CELLS
    ]


def _rewrite_vectors(dropping: bool) -> None:
    """Drop (upgrade) or restore as zeros (downgrade) the class-wise tables of the buckets of
    every contract of more than ``MAX_CELLS`` cells."""
    bind = op.get_bind()
    for cid, model, n_classes, n_bins in _large_contracts(bind):
        start, size = tables_span(n_classes, n_bins)
        full = start + size + KNOT_SUMS
        length = full if dropping else full - size
        keys = bind.execute(
            sa.text(
                "SELECT slice, resolution, bucket_start FROM calibration_buckets"
                " WHERE model = :model AND contract_id = :cid AND length(stats) = :bytes"
            ),
            {"model": model, "cid": cid, "bytes": 8 * length},
        ).all()
        for slice_, resolution, bucket_start in keys:
            key = {"model": model, "slice": slice_, "resolution": resolution, "start": bucket_start}
            blob = bind.scalar(
                sa.text(
                    f"SELECT stats FROM calibration_buckets WHERE {_KEY} AND contract_id = :cid"
                ),
                {**key, "cid": cid},
            )
            vector = np.frombuffer(blob, dtype="<f8")
            if dropping:
                rewritten = np.concatenate([vector[:start], vector[start + size :]])
            else:
                rewritten = np.concatenate([vector[:start], np.zeros(size), vector[start:]])
            bind.execute(
                sa.text(
                    f"UPDATE calibration_buckets SET stats = :stats WHERE {_KEY}"
                    " AND contract_id = :cid"
                ),
                {**key, "cid": cid, "stats": rewritten.astype("<f8").tobytes()},
            )


def upgrade() -> None:
    _rewrite_vectors(dropping=True)


def downgrade() -> None:
    _rewrite_vectors(dropping=False)
