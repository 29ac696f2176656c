"""Readings of the production stream: a window and cohort slice measured against the contract."""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy.orm import Session

from service.calibration import (
    Drift,
    ExpectedAccuracy,
    Reading,
    RefitEstimate,
    ReliabilityBin,
    assess_drift,
    reading_from_stats,
    refit_from_knot_sums,
)
from service.calibration.drift import DriftPolicy
from service.calibration.packing import StatsLayout, unpack, unpack_fields, unpack_knots
from service.calibration.sequential import BinTables
from service.calibration.series import step_views
from service.calibration.vocabulary import Task
from service.common.errors import NotFound
from service.contracts import store as contracts_store
from service.contracts.model import Contract
from service.contracts.service import current_contract
from service.stream import bucket_store, fold_store
from service.stream.bucketing import classwise_note, layout_of
from service.stream.fold_store import NO_FOLD, FoldStatus, StatesFold
from service.stream.windows import Window

#: Event time before a window whose buckets set its first blocks' variance bound and learned
#: signs (``service.calibration.sequential``): at most this much is read.
LOOKBACK = timedelta(hours=24)


@dataclass(frozen=True)
class ContractShare:
    """How much of a window a contract version accounts for."""

    contract_id: str
    version: int
    n_predictions: int
    n_labeled: int


def _json_number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


@dataclass(frozen=True)
class WindowReading(StatesFold):
    """A window and cohort slice measured against its contract.

    ``reading`` holds the labeled predictions' metrics and bins, ``baseline`` the contract's
    held-out eval reading, ``drift`` the assessment of one against the other; ``shares`` says how
    the window splits between contract versions (newest first) and ``notes`` what a reader
    should know about it; ``fold`` what it leaves out: the model's labels acknowledged but not
    yet folded into the buckets (``service.stream.fold``).
    """

    model: str
    contract: Contract
    shares: tuple[ContractShare, ...]
    window: Window
    cohort: str
    n_predictions: int
    reading: Reading
    baseline: Reading
    drift: Drift
    notes: tuple[str, ...] = ()
    fold: FoldStatus = NO_FOLD

    @property
    def n_labeled(self) -> int:
        return self.reading.n

    @property
    def label_coverage(self) -> float | None:
        """Share of the window's predictions labeled (None without predictions)."""
        if not self.n_predictions:
            return None
        return _json_number(self.n_labeled / self.n_predictions)

    @property
    def contracts_in_window(self) -> list[ContractShare]:
        return list(self.shares)

    @property
    def metrics(self) -> Reading:
        """The labeled predictions' reading (its measures; ``bins`` are listed apart)."""
        return self.reading

    @property
    def bins(self) -> tuple[ReliabilityBin, ...]:
        return self.reading.bins

    @property
    def policy(self) -> DriftPolicy:
        return self.contract.policy

    @property
    def threshold(self) -> float | None:
        """Binary: the score above which the cost-minimising decision is positive; None for
        multiclass."""
        return self.contract.threshold if self.contract.spec.task == Task.BINARY else None


def calibration_reading(
    session: Session, model: str, window: Window, slice_: str, now: datetime
) -> WindowReading:
    """The window's reading for one slice, its bins, the baseline and the drift assessment.

    Buckets are grouped by contract version; a window spanning several versions is measured
    against the newest one that has data in it (each contract has its own calibrator and bins),
    and ``shares`` says how the window splits. A window without data is measured against the
    model's current contract (``current_contract``).
    """
    return calibration_readings(session, model, [(slice_, window)], now)[0]


def calibration_readings(
    session: Session, model: str, wanted: Sequence[tuple[str, Window]], now: datetime
) -> list[WindowReading]:
    """``calibration_reading`` of each (slice, window) of ``wanted``, in order: the model's
    contracts and fold status are read once for all."""
    if not contracts_store.model_exists(session, model):
        raise NotFound(f"unknown model {model!r}")
    fold = fold_store.fold_status(session, model)
    contracts: dict[str, Contract | None] = {}
    current: list[Contract] = []

    def contract(contract_id: str) -> Contract | None:
        if contract_id not in contracts:
            contracts[contract_id] = contracts_store.get_contract(session, contract_id)
        return contracts[contract_id]

    out = []
    for slice_, window in wanted:
        before = Window.between(window.start - LOOKBACK, window.start)
        tiling = window.tiling() + before.tiling()
        fetched = bucket_store.window_totals(session, model, slice_, tiling)
        by_contract: dict[str, list[bucket_store.BucketTotals]] = defaultdict(list)
        for t in fetched:
            if t.bucket_start >= window.start:
                by_contract[t.contract_id].append(t)
        shares = sorted(
            (
                ContractShare(
                    cid,
                    c.version,
                    sum(t.n_predictions for t in rows),
                    sum(t.n_labeled for t in rows),
                )
                for cid, rows in by_contract.items()
                if (c := contract(cid)) is not None
            ),
            key=lambda s: s.version,
            reverse=True,
        )
        measured = contract(shares[0].contract_id) if shares else None
        if measured is None:
            current = current or [current_contract(session, model, now)]
            measured = current[0]
        lookback = [
            t for t in fetched if t.bucket_start < window.start and t.contract_id == measured.id
        ]
        rows = by_contract.get(measured.id, [])
        out.append(_measured(model, measured, window, slice_, tuple(shares), rows, lookback, fold))
    return out


def reading_without_data(
    contract: Contract, model: str, window: Window, slice_: str, fold: FoldStatus = NO_FOLD
) -> WindowReading:
    """What ``calibration_reading`` gives for a window and slice of a model that holds no bucket
    at all (no prediction anywhere in time), measured against ``contract``, the model's current
    one at the time of the reading, with ``fold`` as its fold status: no statement runs."""
    return _measured(model, contract, window, slice_, (), [], [], fold)


@functools.lru_cache(maxsize=64)
def _unlabeled(
    layout: StatsLayout, costs: tuple[float, float] | None
) -> tuple[Reading, RefitEstimate | None]:
    """The reading and the refit temperature of no labeled prediction under ``layout`` (and
    ``costs``): what every window without labeled buckets sums to, so computed once."""
    vector = np.zeros(layout.size)
    stats = unpack(vector, layout)
    reading = reading_from_stats(stats, costs=costs)
    return reading, refit_from_knot_sums(unpack_knots(vector, layout), stats.n)


def _measured(
    model: str,
    contract: Contract,
    window: Window,
    slice_: str,
    shares: tuple[ContractShare, ...],
    rows: list[bucket_store.BucketTotals],
    lookback: list[bucket_store.BucketTotals],
    fold: FoldStatus,
) -> WindowReading:
    """The reading of ``rows`` (the window's buckets of ``contract``) against ``contract``, the
    status detectors also looking at ``lookback`` (its buckets before the window)."""
    layout = layout_of(contract)
    labeled = [t.stats for t in rows if t.stats is not None]
    if labeled:
        vector = np.zeros(layout.size)
        for stats_vector in labeled:
            vector += stats_vector
        stats = unpack(vector, layout)
        reading = reading_from_stats(stats, costs=contract.spec.costs)
        refit = refit_from_knot_sums(unpack_knots(vector, layout), stats.n)
    else:
        reading, refit = _unlabeled(layout, contract.spec.costs)
    n_predictions = sum(t.n_predictions for t in rows)
    n_unlabeled = n_predictions - reading.n
    expected = (
        ExpectedAccuracy.of(
            n_unlabeled,
            sum(t.unlabeled_expected_correct for t in rows),
            sum(t.unlabeled_expected_square for t in rows),
        )
        if n_unlabeled > 0
        else None
    )
    seen = [t.confidence_counts for t in rows if t.confidence_counts is not None]
    baseline = contract.baseline_reading()
    views = _status_views(lookback, rows, layout)
    drift = assess_drift(
        reading,
        baseline,
        contract.policy,
        edges=contract.spec.bin_edges,
        confidence_counts=np.sum(seen, axis=0) if seen else None,
        refit_temperature=refit,
        expected_accuracy=expected,
        views=views,
    )
    notes: tuple[str, ...] = ()
    if len(shares) > 1:
        notes = (
            f"the window holds predictions of {len(shares)} contract versions; it is "
            f"measured against the newest, version {contract.version}",
        )
    if (note := classwise_note(contract)) is not None:
        notes = (*notes, note)
    return WindowReading(
        model=model,
        contract=contract,
        shares=shares,
        window=window,
        cohort=slice_,
        n_predictions=n_predictions,
        reading=reading,
        baseline=baseline,
        drift=drift,
        notes=notes,
        fold=fold,
    )


def _status_views(
    lookback: list[bucket_store.BucketTotals],
    window: list[bucket_store.BucketTotals],
    layout: StatsLayout,
) -> list[tuple[BinTables, int]] | None:
    """The buckets before and in the window in time order, as the status detectors' views,
    each with its count of lookback blocks; None without labeled buckets."""
    before = sorted((t for t in lookback if t.stats is not None), key=lambda t: t.bucket_start)
    inside = sorted((t for t in window if t.stats is not None), key=lambda t: t.bucket_start)
    if not inside:
        return None
    matrix = np.stack([t.stats for t in (*before, *inside) if t.stats is not None])
    fields = unpack_fields(matrix, layout)
    return [(view, len(before)) for view in step_views(fields, layout)]


@dataclass(frozen=True)
class SliceCounts:
    """A cohort slice seen for a model (``all`` or ``key=value``) and its counts, all time."""

    cohort: str
    n_predictions: int
    n_labeled: int


def cohort_slices(session: Session, model: str) -> list[SliceCounts]:
    """Every slice seen for the model with its prediction and label counts (all time)."""
    if not contracts_store.model_exists(session, model):
        raise NotFound(f"unknown model {model!r}")
    return [SliceCounts(*row) for row in bucket_store.slice_counts(session, model)]
