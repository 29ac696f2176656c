"""Per-bucket additive statistics: the only state a window reading sums."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import and_, delete, func, or_, select, text
from sqlalchemy.orm import Session

from service.db.backend import backend_of
from service.db.models import CalibrationBucket
from service.stream.sql import for_session, staging
from service.stream.windows import RESOLUTION_FINE, RESOLUTION_HOUR

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


_KEY_ORDER = "s.slice, s.resolution, s.bucket_start, s.contract_id"


def apply_deltas(session: Session, model: str, deltas: Mapping[BucketKey, BucketDelta]) -> None:
    """Add ``deltas`` to their buckets, creating missing ones, in three to five set-based
    statements.

    The deltas are staged (one row each, ``k`` their index in key order); the touched buckets
    are locked in key order, one primary-key probe each, and the vectors (``VECTORS``) that the
    deltas change are read with them; only if that probe misses some are the missing buckets
    inserted empty (in key order) and locked in turn. The sums are formed here and written back
    with the counters in one ``UPDATE ... FROM`` that finds each row by its physical row id,
    one new row version per bucket. The ids are also passed as a list the rows must be in, so
    that a planner whose statistics undercount the model's buckets still fetches the rows by
    id rather than hashing every bucket row of the model. A vector no delta changes is neither
    read nor written (it keeps its stored value, TOAST pointer and all). Neither the
    statements' size nor their cost grows with the number of buckets a model has, only with
    the number a batch touches; a batch whose buckets all exist (every label batch: its
    predictions made them) inserts nothing.

    Concurrent writers cannot deadlock: the existing rows are locked in key order before any
    insert, and an insert waits only on another writer's insert of the same key, made after
    that writer holds every existing row it needs.
    """
    if not deltas:
        return
    keys = sorted(deltas)
    staging.load(
        session,
        "stage_bucket_deltas",
        (
            (
                k,
                *key,
                deltas[key].n_predictions,
                deltas[key].n_labeled,
                deltas[key].unlabeled_expected_correct,
                deltas[key].unlabeled_expected_square,
            )
            for k, key in enumerate(keys)
        ),
    )
    sql = for_session(session)
    params = {"model": model}
    changed = tuple(
        name for name in VECTORS if any(getattr(d, name) is not None for d in deltas.values())
    )
    locked = sql.locked_bucket_rows(session, params, changed)
    if len(locked) < len(keys):
        missing = sorted(set(range(len(keys))) - {row[0] for row in locked})
        _insert_missing(session, model)
        locked += sql.locked_bucket_rows(session, {**params, "only": missing}, changed)
    vectors = _summed_vectors(deltas, keys, locked, changed)
    staging.load(session, "stage_bucket_vectors", vectors)
    session.execute(
        text(
            "UPDATE calibration_buckets AS b SET n_predictions = b.n_predictions + s.n_predictions,"
            " n_labeled = b.n_labeled + s.n_labeled,"
            " unlabeled_expected_correct = b.unlabeled_expected_correct"
            " + s.unlabeled_expected_correct,"
            " unlabeled_expected_square = b.unlabeled_expected_square"
            " + s.unlabeled_expected_square,"
            " confidence_counts = COALESCE(v.confidence_counts, b.confidence_counts),"
            " stats = COALESCE(v.stats, b.stats)"
            " FROM stage_bucket_vectors v JOIN stage_bucket_deltas s ON s.k = v.k"
            f" WHERE b.model = :model AND {sql.row_id_match}"
        ),
        {**params, "row_ids": sql.row_ids([row[1] for row in vectors])},
    )
    _mark_changed(session, model)


#: The slice of a change marker that stands for every slice of its model.
EVERY_SLICE = "*"

_MARK = (
    "INSERT INTO bucket_changes (model, slice, token) {rows}"
    " ON CONFLICT (model, slice) DO UPDATE SET token = bucket_changes.token + 1"
)


def _stamp() -> int:
    """A new marker's token: microseconds since the epoch, so a marker deleted and written
    again does not come back with the token a late reader of the old one holds."""
    return int(datetime.now(UTC).timestamp() * 1_000_000)


def _mark_changed(session: Session, model: str) -> None:
    """Mark the staged deltas' slices changed, in slice order (after every bucket lock, so
    writers meet on the markers in one order): one upsert, in the bucket write's transaction."""
    session.execute(
        text(
            _MARK.format(
                rows="SELECT DISTINCT CAST(:model AS VARCHAR), slice, :stamp"
                " FROM stage_bucket_deltas WHERE true ORDER BY 2"
            )
        ),
        {"model": model, "stamp": _stamp()},
    )


def _summed_vectors(
    deltas: Mapping[BucketKey, BucketDelta],
    keys: Sequence[BucketKey],
    locked: Sequence[Sequence[Any]],
    changed: Sequence[str],
) -> list[list[Any]]:
    """The ``stage_bucket_vectors`` rows of the ``locked`` buckets (``k``, row id, then the
    stored blob of each ``changed`` vector): each vector a delta changes becomes the stored one
    plus the delta as a ``<f8`` blob, the others None (kept as stored).

    Every sum is checked at once before any is returned: a non-finite delta, or a sum that
    overflows, is refused (the bucket would be lost)."""
    slots = [2 + VECTORS.index(name) for name in changed]
    rows: list[list[Any]] = []
    sums: list[np.ndarray] = []
    with np.errstate(over="ignore", invalid="ignore"):
        for k, row_id, *blobs in locked:
            delta = deltas[keys[k]]
            row: list[Any] = [k, row_id, *(None for _ in VECTORS)]
            for slot, name, blob in zip(slots, changed, blobs, strict=True):
                added = getattr(delta, name)
                if added is not None:
                    total = added if blob is None else np.frombuffer(blob, "<f8") + added
                    row[slot] = total
                    sums.append(total)
            rows.append(row)
    if sums and not np.isfinite(np.concatenate(sums)).all():
        raise ValueError("refusing a non-finite bucket vector: the bucket would be lost")
    for row in rows:
        for slot in slots:
            if row[slot] is not None:
                row[slot] = row[slot].astype("<f8", copy=False).tobytes()
    return rows


def _insert_missing(session: Session, model: str) -> None:
    """Insert an empty bucket for every staged delta without a stored one, in key order; a
    bucket a concurrent writer has just inserted is left to it. Each staged key is one probe of
    the primary key (fenced from the planner), whatever the number of buckets stored."""
    fence = for_session(session).probe_fence
    session.execute(
        text(
            "INSERT INTO calibration_buckets (model, slice, resolution, bucket_start,"
            " contract_id, n_predictions, n_labeled, unlabeled_expected_correct,"
            " unlabeled_expected_square) SELECT CAST(:model AS VARCHAR), s.slice, s.resolution,"
            " s.bucket_start, s.contract_id, 0, 0, 0, 0 FROM stage_bucket_deltas s WHERE NOT"
            " EXISTS (SELECT 1 FROM calibration_buckets b"
            " WHERE b.model = CAST(:model AS VARCHAR) AND b.slice = s.slice"
            " AND b.resolution = s.resolution AND b.bucket_start = s.bucket_start"
            f" AND b.contract_id = s.contract_id{fence}) ORDER BY {_KEY_ORDER}"
            " ON CONFLICT DO NOTHING"
        ),
        {"model": model},
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
    statement = select(
        CalibrationBucket.bucket_start,
        CalibrationBucket.contract_id,
        CalibrationBucket.n_predictions,
        CalibrationBucket.n_labeled,
        CalibrationBucket.unlabeled_expected_correct,
        CalibrationBucket.unlabeled_expected_square,
        CalibrationBucket.confidence_counts,
        CalibrationBucket.stats,
    ).where(CalibrationBucket.model == model, CalibrationBucket.slice == slice_, ranges)
    return [
        BucketTotals(
            start.astimezone(UTC),
            contract_id,
            int(n_predictions),
            int(n_labeled),
            float(expected_correct),
            float(expected_square),
            _decode(counts),
            _decode(stats),
        )
        for (
            start,
            contract_id,
            n_predictions,
            n_labeled,
            expected_correct,
            expected_square,
            counts,
            stats,
        ) in backend_of(session).fetch_rows(session, statement)
    ]


def delete_model_buckets(session: Session, model: str) -> None:
    """Remove every bucket of ``model`` (before rebuilding them from stored rows)."""
    session.execute(delete(CalibrationBucket).where(CalibrationBucket.model == model))
    session.execute(
        text(_MARK.format(rows="VALUES (:model, :slice, :stamp)")),
        {"model": model, "slice": EVERY_SLICE, "stamp": _stamp()},
    )


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


def models_with_buckets(session: Session, models: Sequence[str]) -> set[str]:
    """Those of ``models`` that hold at least one bucket: one probe of the primary key each,
    100 to a statement."""
    names = sorted(set(models))
    found: set[str] = set()
    for i in range(0, len(names), 100):
        probes = [
            select(CalibrationBucket.model)
            .where(CalibrationBucket.model == name)
            .limit(1)
            .scalar_subquery()
            for name in names[i : i + 100]
        ]
        found.update(name for name in session.execute(select(*probes)).one() if name is not None)
    return found


def first_buckets_from(
    session: Session, model: str, slice_: str, times: Sequence[datetime]
) -> list[datetime | None]:
    """For each of ``times``, the start of the earliest 5-minute bucket of ``slice_`` at or
    after it (UTC; None when there is none): one probe of the primary key each, in one
    statement."""
    if not times:
        return []
    probes = [
        select(func.min(CalibrationBucket.bucket_start))
        .where(
            CalibrationBucket.model == model,
            CalibrationBucket.slice == slice_,
            CalibrationBucket.resolution == RESOLUTION_FINE,
            CalibrationBucket.bucket_start >= at,
        )
        .scalar_subquery()
        for at in times
    ]
    row = session.execute(select(*probes)).one()
    return [None if found is None else _as_utc(found) for found in row]


def _as_utc(value: datetime | str) -> datetime:
    """A bucket start read through a subquery (SQLite returns its text) as an aware UTC time."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
