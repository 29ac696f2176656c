"""Readings of many windows at once (a history's steps), from their packed bucket statistics.

Every number is the one a single window's reading gives (``readings.reading_from_stats``,
``drift.assess_drift``), computed for S windows in one vectorised pass: the plug-in and debiased
ECE with its interval (``ece_inference.infer_ece_many``), NLL, Brier, accuracy, the refit
temperature (``refit.refit_many``), the confidence PSI against the baseline with its no-shift
level, and the drift status (``drift.decide_statuses``), whose sequential detectors run over the
windows in the given (time) order: a history's status at a step is the detectors' state after
it. Windows without labeled rows have NaN metrics and status ``insufficient_data``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from service.calibration._checks import FloatArray
from service.calibration.drift import DriftPolicy, StatusLevels, decide_statuses
from service.calibration.ece_inference import EceInferences, infer_ece_many
from service.calibration.packing import StatsLayout, unpack_fields, unpack_knots_many
from service.calibration.readings import Reading, bins_inference
from service.calibration.refit import RefitEstimates, refit_many
from service.calibration.sequential import BinTables, detection_paths
from service.calibration.shift import PSI_EPSILON
from service.calibration.vocabulary import Task


@dataclass(frozen=True)
class SeriesReadings:
    """Readings of S windows, field by field as (S,) arrays; ``status`` holds strings."""

    labeled: np.ndarray
    ece: FloatArray
    inference: EceInferences
    nll: FloatArray
    brier: FloatArray
    accuracy: FloatArray
    refit: RefitEstimates
    confidence_psi: FloatArray
    confidence_psi_no_shift: FloatArray
    status: np.ndarray


def series_readings(
    layout: StatsLayout,
    vectors: Any,
    confidence_counts: Any,
    baseline: Reading,
    policy: DriftPolicy,
) -> SeriesReadings:
    """Readings of S windows from their summed packed vectors (S, L) and their (S, M) counts of
    every prediction per confidence bin, against the contract's baseline reading and policy."""
    matrix = np.asarray(vectors, dtype=np.float64)
    fields = unpack_fields(matrix, layout)
    labeled = fields["n"].astype(np.int64)
    per_row = np.where(labeled > 0, labeled, np.nan)
    gaps = np.abs(fields["bin_confidence_sum"] - fields["bin_correct_sum"]).sum(axis=1)
    inference = infer_ece_many(
        fields["bin_count"], fields["bin_confidence_sum"], fields["bin_correct_sum"]
    )
    refit = refit_many(unpack_knots_many(matrix, layout), labeled)
    levels = StatusLevels.of(policy, bins_inference(baseline.bins))
    views = step_views(fields, layout)
    upper = inference.upper
    for view in views[1:]:
        upper = np.fmax(
            upper, infer_ece_many(view.counts, view.confidence_sums, view.successes).upper
        )
    alert = np.max([detection_paths(v, 0, levels.alert_design) for v in views], axis=0)
    warn = np.max([detection_paths(v, 0, levels.warn_design) for v in views], axis=0)
    status = decide_statuses(labeled, upper, alert, warn, levels, policy)
    psi, no_shift = _psi_many(_baseline_counts(baseline, layout), confidence_counts)
    return SeriesReadings(
        labeled=labeled,
        ece=gaps / per_row,
        inference=inference,
        nll=fields["nll_sum"] / per_row,
        brier=fields["brier_sum"] / per_row,
        accuracy=fields["correct_sum"] / per_row,
        refit=refit,
        confidence_psi=psi,
        confidence_psi_no_shift=no_shift,
        status=status,
    )


def step_views(fields: dict[str, np.ndarray], layout: StatsLayout) -> list[BinTables]:
    """The per-step (S, M) reliability tables the status detectors read: the top-label (or
    binary) view, and for a two-class multiclass layout with class-wise tables the positive
    class's view. ``fields`` are ``packing.unpack_fields`` output in time order."""
    edges = np.asarray(layout.edges, dtype=np.float64)
    binary = layout.task == Task.BINARY
    views = [
        BinTables(
            fields["bin_count"],
            fields["bin_confidence_sum"],
            fields["bin_correct_sum"],
            edges,
            binary,
            "positive" if binary else "top-label",
        )
    ]
    if not binary and layout.n_classes == 2 and "class_bin_count" in fields:
        views.append(
            BinTables(
                fields["class_bin_count"][:, 1, :],
                fields["class_bin_prob_sum"][:, 1, :],
                fields["class_bin_label_sum"][:, 1, :],
                edges,
                True,
                "positive-class",
            )
        )
    return views


def _baseline_counts(baseline: Reading, layout: StatsLayout) -> FloatArray:
    index = {lo: m for m, lo in enumerate(layout.edges[:-1])}
    counts = np.zeros(len(layout.edges) - 1)
    for b in baseline.bins:
        counts[index[b.lo]] += b.n
    return counts


def _psi_many(baseline: FloatArray, windows: Any) -> tuple[FloatArray, FloatArray]:
    """``population_stability_index(baseline, window)`` and its no-shift level per window."""
    counts = np.asarray(windows, dtype=np.float64)
    totals = counts.sum(axis=1)
    empty = (totals == 0) | (baseline.sum() == 0)
    M = baseline.size
    scale = 1.0 + M * PSI_EPSILON
    e = (baseline / max(baseline.sum(), 1.0) + PSI_EPSILON) / scale
    a = (counts / np.where(empty, 1.0, totals)[:, None] + PSI_EPSILON) / scale
    psi = ((a - e) * np.log(a / e)).sum(axis=1)
    occupied = ((counts + baseline) > 0).sum(axis=1)
    no_shift = (occupied - 1) * (1.0 / max(baseline.sum(), 1.0) + 1.0 / np.where(empty, 1, totals))
    return np.where(empty, np.nan, psi), np.where(empty, np.nan, no_shift)
