"""Per-bucket additive statistics: the only state a window reading sums."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy import and_, bindparam, func, or_, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.storage.models import CalibrationBucket, table_of
from service.windows import RESOLUTION_HOUR

#: (slice, resolution, bucket_start, contract_id)
BucketKey = tuple[str, str, datetime, str]


@dataclass
class BucketDelta:
    """What a batch adds to one bucket; ``stats`` is a packed statistics vector, or None."""

    n_predictions: int = 0
    n_labeled: int = 0
    unlabeled_expected_correct: float = 0.0
    stats: np.ndarray | None = None


@dataclass(frozen=True)
class BucketTotals:
    """A bucket's stored totals, as read for a window."""

    contract_id: str
    n_predictions: int
    n_labeled: int
    unlabeled_expected_correct: float
    stats: np.ndarray | None


def _decode(blob: bytes | None) -> np.ndarray | None:
    return None if blob is None else np.frombuffer(blob, dtype="<f8")


def apply_deltas(session: Session, model: str, deltas: Mapping[BucketKey, BucketDelta]) -> None:
    """Add ``deltas`` to their buckets, creating missing ones.

    Keys are applied in sorted order, so concurrent writers lock bucket rows in the same order
    and cannot deadlock; the counters are added by the database (``ON CONFLICT DO UPDATE``) and
    the statistics vectors under the row lock that upsert holds until commit.
    """
    if not deltas:
        return
    keys = sorted(deltas)
    table = table_of(CalibrationBucket)
    insert = (
        postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    )(table)
    session.execute(
        insert.on_conflict_do_update(
            index_elements=["model", "slice", "resolution", "bucket_start", "contract_id"],
            set_={
                "n_predictions": table.c.n_predictions + insert.excluded.n_predictions,
                "n_labeled": table.c.n_labeled + insert.excluded.n_labeled,
                "unlabeled_expected_correct": table.c.unlabeled_expected_correct
                + insert.excluded.unlabeled_expected_correct,
            },
        ),
        [
            {
                "model": model,
                "slice": k[0],
                "resolution": k[1],
                "bucket_start": k[2],
                "contract_id": k[3],
                "n_predictions": deltas[k].n_predictions,
                "n_labeled": deltas[k].n_labeled,
                "unlabeled_expected_correct": deltas[k].unlabeled_expected_correct,
                "stats": None,
            }
            for k in keys
        ],
    )
    with_stats = [k for k in keys if deltas[k].stats is not None]
    if not with_stats:
        return
    pk = tuple_(
        CalibrationBucket.slice,
        CalibrationBucket.resolution,
        CalibrationBucket.bucket_start,
        CalibrationBucket.contract_id,
    )
    current = {
        (r.slice, r.resolution, r.bucket_start, r.contract_id): r.stats
        for r in session.execute(
            select(
                CalibrationBucket.slice,
                CalibrationBucket.resolution,
                CalibrationBucket.bucket_start,
                CalibrationBucket.contract_id,
                CalibrationBucket.stats,
            ).where(CalibrationBucket.model == model, pk.in_(with_stats))
        )
    }
    updates = []
    for k in with_stats:
        added = deltas[k].stats
        assert added is not None
        stored = _decode(current.get(k))
        total = added if stored is None else stored + added
        updates.append(
            {
                "b_slice": k[0],
                "b_resolution": k[1],
                "b_start": k[2],
                "b_contract": k[3],
                "stats": np.ascontiguousarray(total, "<f8").tobytes(),
            }
        )
    session.execute(
        update(table)
        .where(
            table.c.model == model,
            table.c.slice == bindparam("b_slice"),
            table.c.resolution == bindparam("b_resolution"),
            table.c.bucket_start == bindparam("b_start"),
            table.c.contract_id == bindparam("b_contract"),
        )
        .values(stats=bindparam("stats")),
        updates,
    )


def window_totals(
    session: Session, model: str, slice_: str, tiling: Sequence[tuple[str, datetime, datetime]]
) -> list[BucketTotals]:
    """Every bucket of ``slice_`` that tiles a window (see ``service.windows.Window.tiling``)."""
    ranges = or_(
        *(
            and_(
                CalibrationBucket.resolution == res,
                CalibrationBucket.bucket_start >= start,
                CalibrationBucket.bucket_start < end,
            )
            for res, start, end in tiling
        )
    )
    rows = session.execute(
        select(
            CalibrationBucket.contract_id,
            CalibrationBucket.n_predictions,
            CalibrationBucket.n_labeled,
            CalibrationBucket.unlabeled_expected_correct,
            CalibrationBucket.stats,
        ).where(CalibrationBucket.model == model, CalibrationBucket.slice == slice_, ranges)
    )
    return [
        BucketTotals(
            r.contract_id,
            int(r.n_predictions),
            int(r.n_labeled),
            float(r.unlabeled_expected_correct),
            _decode(r.stats),
        )
        for r in rows
    ]


def slice_counts(session: Session, model: str) -> list[tuple[str, int, int]]:
    """``(slice, predictions, labeled)`` over all time, per slice seen for ``model``."""
    rows = session.execute(
        select(
            CalibrationBucket.slice,
            func.sum(CalibrationBucket.n_predictions),
            func.sum(CalibrationBucket.n_labeled),
        )
        .where(CalibrationBucket.model == model, CalibrationBucket.resolution == RESOLUTION_HOUR)
        .group_by(CalibrationBucket.slice)
        .order_by(CalibrationBucket.slice)
    )
    return [(r[0], int(r[1]), int(r[2])) for r in rows]
