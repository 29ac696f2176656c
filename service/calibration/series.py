"""Readings of many windows at once (a history's steps), from their packed bucket statistics.

Every number is the one a single window's reading gives (``readings.reading_from_stats``,
``drift.assess_drift``), computed for S windows in one vectorised pass: the plug-in and debiased
ECE with its interval (``ece_inference.infer_ece_many``), NLL, Brier, accuracy, the refit
temperature (``refit.refit_many``), the confidence PSI against the baseline with its no-shift
level, and the drift status (``drift.decide_statuses``). Windows without labeled rows have NaN
metrics and status ``insufficient_data``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from service.calibration._checks import FloatArray
from service.calibration.drift import (
    PSI_EPSILON,
    DriftPolicy,
    StatusEvidence,
    decide_statuses,
)
from service.calibration.ece_inference import EceInferences, infer_ece_many
from service.calibration.packing import StatsLayout, unpack_fields, unpack_knots_many
from service.calibration.readings import Reading, bins_inference
from service.calibration.refit import RefitEstimates, refit_many


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
    base = bins_inference(baseline.bins)
    decided = decide_statuses(
        StatusEvidence(
            labeled=labeled,
            lower=inference.lower,
            upper=inference.upper,
            debiased=inference.debiased,
            p_value=inference.p_value,
        ),
        base,
        policy,
    )
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
        status=decided.status,
    )


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
