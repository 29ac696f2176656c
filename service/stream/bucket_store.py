"""Per-bucket additive statistics: the only state a window reading sums."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import and_, bindparam, delete, func, or_, select, tuple_, update
from sqlalchemy.orm import Session

from service.db.backend import backend_of
from service.db.models import CalibrationBucket, table_of
from service.stream.windows import RESOLUTION_HOUR

#: (slice, resolution, bucket_start, contract_id)
BucketKey = tuple[str, str, datetime, str]


#: The float64 vectors a bucket keeps as blobs, added element-wise.
VECTORS = ("confidence_counts", "stats")


@dataclass
class BucketDelta:
    """What a batch adds to one bucket; ``stats`` is a packed statistics vector and
    ``confidence_counts`` the (M,) counts of new predictions per confidence bin, or None."""

    n_predictions: int = 0
    n_labeled: int = 0
    unlabeled_expected_correct: float = 0.0
    unlabeled_expected_square: float = 0.0
    confidence_counts: np.ndarray | None = None
    stats: np.ndarray | None = None


@dataclass(frozen=True)
class BucketTotals:
    """A bucket's stored totals, as read for a window (``bucket_start`` its UTC start)."""

    bucket_start: datetime
    contract_id: str
    n_predictions: int
    n_labeled: int
    unlabeled_expected_correct: float
    unlabeled_expected_square: float
    confidence_counts: np.ndarray | None
    stats: np.ndarray | None


def _decode(blob: bytes | None) -> np.ndarray | None:
    return None if blob is None else np.frombuffer(blob, dtype="<f8")


def apply_deltas(session: Session, model: str, deltas: Mapping[BucketKey, BucketDelta]) -> None:
    """Add ``deltas`` to their buckets, creating missing ones.

    Keys are applied in sorted order, so concurrent writers lock bucket rows in the same order
    and cannot deadlock; the counters are added by the database (``ON CONFLICT DO UPDATE``) and
    the vectors (``VECTORS``) under the row lock that upsert holds until commit.
    """
    if not deltas:
        return
    for delta in deltas.values():
        for name in VECTORS:
            vector = getattr(delta, name)
            if vector is not None and not np.isfinite(vector).all():
                raise ValueError(f"refusing a non-finite {name} vector: the bucket would be lost")
    keys = sorted(deltas)
    table = table_of(CalibrationBucket)
    insert = backend_of(session).insert(table)
    session.execute(
        insert.on_conflict_do_update(
            index_elements=["model", "slice", "resolution", "bucket_start", "contract_id"],
            set_={
                "n_predictions": table.c.n_predictions + insert.excluded.n_predictions,
                "n_labeled": table.c.n_labeled + insert.excluded.n_labeled,
                "unlabeled_expected_correct": table.c.unlabeled_expected_correct
                + insert.excluded.unlabeled_expected_correct,
                "unlabeled_expected_square": table.c.unlabeled_expected_square
                + insert.excluded.unlabeled_expected_square,
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
                "unlabeled_expected_square": deltas[k].unlabeled_expected_square,
                "confidence_counts": None,
                "stats": None,
            }
            for k in keys
        ],
    )
    with_vectors = [k for k in keys if any(getattr(deltas[k], v) is not None for v in VECTORS)]
    if not with_vectors:
        return
    pk = tuple_(
        CalibrationBucket.slice,
        CalibrationBucket.resolution,
        CalibrationBucket.bucket_start,
        CalibrationBucket.contract_id,
    )
    current = {
        (r.slice, r.resolution, r.bucket_start, r.contract_id): r
        for r in session.execute(
            select(
                CalibrationBucket.slice,
                CalibrationBucket.resolution,
                CalibrationBucket.bucket_start,
                CalibrationBucket.contract_id,
                CalibrationBucket.confidence_counts,
                CalibrationBucket.stats,
            ).where(CalibrationBucket.model == model, pk.in_(with_vectors))
        )
    }
    updates = []
    for k in with_vectors:
        row: dict[str, Any] = {"b_slice": k[0], "b_resolution": k[1], "b_start": k[2]}
        row["b_contract"] = k[3]
        for name in VECTORS:
            stored = _decode(getattr(current[k], name))
            added = getattr(deltas[k], name)
            total = stored if added is None else added if stored is None else stored + added
            row[name] = None if total is None else np.ascontiguousarray(total, "<f8").tobytes()
        updates.append(row)
    session.execute(
        update(table)
        .where(
            table.c.model == model,
            table.c.slice == bindparam("b_slice"),
            table.c.resolution == bindparam("b_resolution"),
            table.c.bucket_start == bindparam("b_start"),
            table.c.contract_id == bindparam("b_contract"),
        )
        .values({name: bindparam(name) for name in VECTORS}),
        updates,
    )


def window_totals(
    session: Session, model: str, slice_: str, tiling: Sequence[tuple[str, datetime, datetime]]
) -> list[BucketTotals]:
    """Every bucket of ``slice_`` that tiles a window (``service.stream.windows.Window.tiling``)."""
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
            CalibrationBucket.bucket_start,
            CalibrationBucket.contract_id,
            CalibrationBucket.n_predictions,
            CalibrationBucket.n_labeled,
            CalibrationBucket.unlabeled_expected_correct,
            CalibrationBucket.unlabeled_expected_square,
            CalibrationBucket.confidence_counts,
            CalibrationBucket.stats,
        ).where(CalibrationBucket.model == model, CalibrationBucket.slice == slice_, ranges)
    )
    return [
        BucketTotals(
            r.bucket_start,
            r.contract_id,
            int(r.n_predictions),
            int(r.n_labeled),
            float(r.unlabeled_expected_correct),
            float(r.unlabeled_expected_square),
            _decode(r.confidence_counts),
            _decode(r.stats),
        )
        for r in rows
    ]


def delete_model_buckets(session: Session, model: str) -> None:
    """Remove every bucket of ``model`` (before rebuilding them from stored rows)."""
    session.execute(delete(CalibrationBucket).where(CalibrationBucket.model == model))


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
