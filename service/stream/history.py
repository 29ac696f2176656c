"""A cohort slice's calibration over time: one reading per step, from the bucket statistics.

Steps are multiples of 5 minutes; a step of whole hours reads the hour buckets, any other the
5-minute ones, and the range is widened to whole steps (the start down, the end up). Each step
is measured against the newest contract version with data in it, exactly as a window reading
is (``monitoring.calibration_reading``), with every number of a step computed in one vectorised
pass per contract version (``service.calibration.series``); no prediction row is read.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from service.calibration import Reading
from service.calibration.drift import DriftPolicy
from service.calibration.packing import without_classwise
from service.calibration.series import series_readings
from service.calibration.vocabulary import Status
from service.common.errors import ErrorDetail, ValidationFailed
from service.common.values import format_timestamp
from service.contracts import store as contracts_store
from service.contracts.model import Contract
from service.contracts.service import current_contract
from service.stream import bucket_store, fold_store
from service.stream.bucketing import layout_of
from service.stream.fold_store import NO_FOLD, FoldStatus, StatesFold
from service.stream.window_status import statuses_of_windows
from service.stream.windows import (
    FINE,
    HOUR,
    MAX_WINDOW,
    RESOLUTION_FINE,
    RESOLUTION_HOUR,
    Window,
    parse_duration,
)

#: At most this many steps per history (30 days at 1 h are 720; 7 days at 5 min 2,016).
MAX_STEPS = 2_100
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class HistoryPoint(StatesFold):
    """The reading of one step ``[start, start + step)``; metrics None without labels.
    ``fold`` is what the history leaves out (the same for each of its points)."""

    start: datetime
    contract_version: int | None
    n_predictions: int
    n_labeled: int
    ece: float | None
    ece_debiased: float | None
    ece_ci: tuple[float, float] | None
    nll: float | None
    brier: float | None
    accuracy: float | None
    refit_temperature: float | None
    refit_temperature_ci: tuple[float, float] | None
    confidence_psi: float | None
    confidence_psi_no_shift: float | None
    status: str
    fold: FoldStatus = NO_FOLD

    @property
    def label_coverage(self) -> float | None:
        """Share of the step's predictions labeled (None without predictions)."""
        return self.n_labeled / self.n_predictions if self.n_predictions else None

    def csv_row(self) -> list[Any]:
        """The point in ``CSV_COLUMNS`` order (empty cells for missing values)."""
        ci = self.ece_ci or (None, None)
        refit_ci = self.refit_temperature_ci or (None, None)
        last_fold = self.last_fold_at
        values = (
            format_timestamp(self.start),
            self.contract_version,
            self.n_predictions,
            self.n_labeled,
            self.label_coverage,
            self.ece,
            self.ece_debiased,
            *ci,
            self.nll,
            self.brier,
            self.accuracy,
            self.refit_temperature,
            *refit_ci,
            self.confidence_psi,
            self.confidence_psi_no_shift,
            self.status,
            self.labels_unfolded,
            None if last_fold is None else format_timestamp(last_fold),
        )
        return ["" if v is None else v for v in values]


#: The CSV columns, in order: a point's fields with the intervals split in two.
CSV_COLUMNS = (
    "start",
    "contract_version",
    "n_predictions",
    "n_labeled",
    "label_coverage",
    "ece",
    "ece_debiased",
    "ece_ci_lower",
    "ece_ci_upper",
    "nll",
    "brier",
    "accuracy",
    "refit_temperature",
    "refit_temperature_ci_lower",
    "refit_temperature_ci_upper",
    "confidence_psi",
    "confidence_psi_no_shift",
    "status",
    "labels_unfolded",
    "last_fold_at",
)


@dataclass(frozen=True)
class History:
    """A slice's readings over ``[start, end)`` in steps of ``step``, oldest first.

    ``contract`` is the model's current contract: its policy and baseline are what a chart draws
    its threshold lines from (each point names the version it was measured against). ``fold``
    says what every point leaves out: the model's labels acknowledged but not yet folded into
    the buckets (``service.stream.fold``), and when the fold last ran for it. ``status_window``
    and ``window_statuses``, when set (``window_statuses``), give per point the status of that
    trailing window at the step's end.
    """

    model: str
    cohort: str
    start: datetime
    end: datetime
    step: timedelta
    contract: Contract
    points: tuple[HistoryPoint, ...]
    fold: FoldStatus = NO_FOLD
    status_window: str | None = None
    window_statuses: tuple[Status, ...] | None = None

    @property
    def step_seconds(self) -> int:
        return int(self.step.total_seconds())

    @property
    def policy(self) -> DriftPolicy:
        """The current contract's policy (a chart's threshold lines)."""
        return self.contract.policy

    @property
    def baseline(self) -> Reading:
        """The current contract's held-out reading (a chart's baseline line)."""
        return self.contract.baseline_reading()

    def csv_rows(self) -> list[list[Any]]:
        """One row per point in ``CSV_COLUMNS`` order (empty cells for missing values)."""
        return [point.csv_row() for point in self.points]


def steps_of(start: datetime, end: datetime, step: timedelta) -> tuple[datetime, datetime, str]:
    """The range widened to whole steps and the bucket resolution that tiles the steps.

    Raises ``ValidationFailed`` naming ``step``, ``start`` or ``end`` when the step is not a
    multiple of 5 minutes, the range is empty or too long, or it has more than ``MAX_STEPS``.
    """
    if step < FINE or step % FINE:
        raise _invalid("step", "must be a whole number of 5-minute periods, e.g. 5m, 1h, 1d")
    if end <= start:
        raise _invalid("end", "must be after start")
    if end - start > MAX_WINDOW:
        raise _invalid("start", "histories longer than 400 days are not kept")
    first = _EPOCH + ((start - _EPOCH) // step) * step
    last = _EPOCH + -((_EPOCH - end) // step) * step
    if (last - first) // step > MAX_STEPS:
        raise _invalid("step", f"gives more than {MAX_STEPS} steps: take a longer step")
    resolution = RESOLUTION_HOUR if step % HOUR == timedelta(0) else RESOLUTION_FINE
    return first, last, resolution


#: The steps a fitted history is drawn in, finest first, and the most steps it aims for.
FIT_STEPS = tuple(timedelta(minutes=m) for m in (5, 10, 15, 30, 60))
FIT_TARGET_STEPS = 50
#: A fitted history covers at least this much (a model seen for a few minutes still gets a chart).
FIT_SHORTEST = timedelta(hours=1)


def fitted_range(
    session: Session, model: str, slice_: str, end: datetime, longest: timedelta
) -> tuple[datetime, timedelta]:
    """The start and step of a history ending at ``end`` that spans the slice's data.

    The start is the slice's first 5-minute bucket within the ``longest`` before ``end`` (at
    least ``FIT_SHORTEST`` before ``end``); the step is the finest of ``FIT_STEPS`` that draws the
    span in at most ``FIT_TARGET_STEPS`` steps, 1 hour for longer spans. A slice with data
    before ``end - longest``, or none at all, gets ``(end - longest, 1 hour)``. One probe of the
    bucket primary key.
    """
    earliest = end - longest
    ever, first = bucket_store.first_buckets_from(session, model, slice_, [_EPOCH, earliest])
    if ever is None or ever < earliest or first is None or first >= end:
        return earliest, HOUR
    span = max(end - first, FIT_SHORTEST)
    step = next((s for s in FIT_STEPS if span / s <= FIT_TARGET_STEPS), HOUR)
    return max(end - span, earliest), step


def first_data(session: Session, model: str, slice_: str) -> datetime | None:
    """The start of the slice's earliest 5-minute bucket (None: no data at all)."""
    return bucket_store.first_buckets_from(session, model, slice_, [_EPOCH])[0]


def _invalid(field: str, message: str) -> ValidationFailed:
    return ValidationFailed("invalid history", [ErrorDetail(field, message)])


def model_history(
    session: Session,
    model: str,
    slice_: str,
    start: datetime,
    end: datetime,
    step: timedelta,
    now: datetime,
) -> History:
    """The slice's reading per step over ``[start, end)`` (widened to whole steps)."""
    current = current_contract(session, model, now)
    first, last, resolution = steps_of(start, end, step)
    n_steps = (last - first) // step
    rows = bucket_store.window_totals(session, model, slice_, [(resolution, first, last)])
    contracts: dict[str, Contract | None] = {current.id: current}
    for cid in {r.contract_id for r in rows} - {current.id}:
        contracts[cid] = contracts_store.get_contract(session, cid)
    by_step: dict[int, dict[str, list[bucket_store.BucketTotals]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in rows:
        by_step[(r.bucket_start - first) // step][r.contract_id].append(r)
    chosen: dict[str, list[int]] = defaultdict(list)
    for index, per_contract in by_step.items():
        newest = max(per_contract, key=lambda cid: _version(contracts[cid]))
        chosen[newest].append(index)
    points: dict[int, HistoryPoint] = {}
    for contract_id, indices in chosen.items():
        contract = contracts[contract_id]
        assert contract is not None
        groups = [by_step[i][contract_id] for i in indices]
        points.update(zip(indices, _points(contract, first, step, indices, groups), strict=True))
    empty = [_empty_point(first + i * step) for i in range(n_steps) if i not in points]
    fold = fold_store.fold_status(session, model)
    ordered = sorted([*points.values(), *empty], key=lambda p: p.start)
    return History(
        model=model,
        cohort=slice_,
        start=first,
        end=last,
        step=step,
        contract=current,
        points=tuple(replace(point, fold=fold) for point in ordered),
        fold=fold,
    )


def window_statuses(
    session: Session, history: History, window: str, now: datetime
) -> tuple[Status, ...]:
    """Per step of ``history``, the drift status of the trailing ``window`` (``24h``) ending at
    the step's end: what a window reading gave, or would have given, then
    (``window_status.statuses_of_windows``, its detectors over that window's buckets). A step
    ending after ``now`` gets the reading of ``now`` (``Window.trailing``). A window holding no
    step with predictions, and not reaching before the history, is ``insufficient_data``
    without a read.
    """
    duration = parse_duration(window)
    points, step = history.points, history.step
    with_data = [i for i, p in enumerate(points) if p.n_predictions]
    wanted: list[tuple[int, Window]] = []
    for i in range(len(points)):
        end = history.start + (i + 1) * step
        start = end - duration
        reaches_before = start < history.start
        holds_data = any(history.start + j * step + step > start for j in with_data if j <= i)
        if not (reaches_before or holds_data):
            continue
        at = Window.trailing(window, now) if end > now else Window.between(start, end)
        wanted.append((i, at))
    statuses = [Status.INSUFFICIENT_DATA] * len(points)
    found = statuses_of_windows(session, history.model, history.cohort, [at for _, at in wanted])
    for (i, _), status in zip(wanted, found, strict=True):
        statuses[i] = status
    return tuple(statuses)


def _version(contract: Contract | None) -> int:
    return -1 if contract is None else contract.version


def _points(
    contract: Contract,
    first: datetime,
    step: timedelta,
    indices: list[int],
    groups: list[list[bucket_store.BucketTotals]],
) -> list[HistoryPoint]:
    layout, columns = without_classwise(layout_of(contract))
    n_bins = len(contract.spec.bin_edges) - 1
    owner = np.repeat(np.arange(len(groups)), [len(buckets) for buckets in groups])
    buckets = [b for group in groups for b in group]
    vectors = _summed(owner, len(groups), [b.stats for b in buckets], columns)
    counts = _summed(owner, len(groups), [b.confidence_counts for b in buckets], np.arange(n_bins))
    predictions = np.bincount(
        owner, weights=[b.n_predictions for b in buckets], minlength=len(groups)
    ).astype(np.int64)
    s = series_readings(layout, vectors, counts, contract.baseline_reading(), contract.policy)
    inference, refit = s.inference, s.refit
    per_point = zip(
        indices,
        predictions.tolist(),
        s.labeled.tolist(),
        _numbers(s.ece),
        _numbers(inference.debiased),
        inference.lower.tolist(),
        inference.upper.tolist(),
        _numbers(s.nll),
        _numbers(s.brier),
        _numbers(s.accuracy),
        refit.temperature.tolist(),
        refit.lower.tolist(),
        refit.upper.tolist(),
        _numbers(s.confidence_psi),
        _numbers(s.confidence_psi_no_shift),
        refit.found.tolist(),
        s.status.tolist(),
        strict=True,
    )
    return [
        HistoryPoint(
            start=first + i * step,
            contract_version=contract.version,
            n_predictions=n_predictions,
            n_labeled=labeled,
            ece=ece,
            ece_debiased=debiased,
            ece_ci=(lower, upper) if labeled else None,
            nll=nll,
            brier=brier,
            accuracy=accuracy,
            refit_temperature=temperature if found else None,
            refit_temperature_ci=(t_lower, t_upper) if found else None,
            confidence_psi=psi,
            confidence_psi_no_shift=psi_no_shift,
            status=str(status),
        )
        for (
            i,
            n_predictions,
            labeled,
            ece,
            debiased,
            lower,
            upper,
            nll,
            brier,
            accuracy,
            temperature,
            t_lower,
            t_upper,
            psi,
            psi_no_shift,
            found,
            status,
        ) in per_point
    ]


def _summed(
    owner: np.ndarray, n_groups: int, vectors: list[np.ndarray | None], columns: np.ndarray
) -> np.ndarray:
    """(G, C) sums of the ``columns`` of ``vectors`` by their group ``owner`` (ascending), each
    group's in order; None counts as zeros."""
    total = np.zeros((n_groups, columns.size))
    present = [(i, v) for i, v in enumerate(vectors) if v is not None]
    if present:
        rows, stored = zip(*present, strict=True)
        owners, matrix = owner[list(rows)], np.stack(stored)[:, columns]
        _, starts, sizes = np.unique(owners, return_index=True, return_counts=True)
        rank = np.arange(owners.size) - np.repeat(starts, sizes)
        for r in range(int(sizes.max())):
            layer = rank == r
            total[owners[layer]] += matrix[layer]
    return total


def _numbers(values: np.ndarray) -> list[float | None]:
    """JSON numbers: floats, None where not finite."""
    return [v if math.isfinite(v) else None for v in values.tolist()]


def _empty_point(start: datetime) -> HistoryPoint:
    return HistoryPoint(
        start=start,
        contract_version=None,
        n_predictions=0,
        n_labeled=0,
        ece=None,
        ece_debiased=None,
        ece_ci=None,
        nll=None,
        brier=None,
        accuracy=None,
        refit_temperature=None,
        refit_temperature_ci=None,
        confidence_psi=None,
        confidence_psi_no_shift=None,
        status=Status.INSUFFICIENT_DATA,
    )
