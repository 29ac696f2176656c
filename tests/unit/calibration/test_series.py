"""Readings of many windows at once equal the readings of each window alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.calibration import DriftPolicy, assess_drift, reading_from_stats
from service.calibration.binning import default_edges
from service.calibration.packing import StatsLayout, pack, unpack
from service.calibration.probabilities import logit
from service.calibration.refit import grouped_knot_sums
from service.calibration.sequential import BinTables
from service.calibration.series import series_readings
from service.calibration.stats import binary_stats, multiclass_stats
from tests.support.simulation import scenario

EDGES = default_edges(15)
POLICY = DriftPolicy(max_ece=0.05, max_ece_increase=0.02, min_labeled=100)


def window(task: str, level: float, n: int, rng: np.random.Generator):
    population = "k10" if task == "multiclass" else "beta25"
    inputs, labels = scenario(population, "overconfident", level).draw(rng, n)
    if task == "multiclass":
        stats = multiclass_stats(inputs, labels, EDGES)
        knots = grouped_knot_sums(task, inputs, labels, np.zeros(n, int), 1)[0]
    else:
        stats = binary_stats(inputs, labels, EDGES)
        log_odds = logit(inputs)
        knots = grouped_knot_sums(task, log_odds, labels, np.zeros(n, int), 1)[0]
    return np.concatenate([pack(stats), knots.ravel()]), stats


@pytest.mark.parametrize("task", ["multiclass", "binary"])
def test_each_step_equals_its_own_reading(task: str) -> None:
    """Every number of a step is its own reading's; its status is the detectors' after reading
    the steps up to it in order (a history is one sequential run)."""
    rng = np.random.default_rng(4)
    layout = StatsLayout(task, tuple(EDGES), 10 if task == "multiclass" else 2, refit=True)
    baseline = reading_from_stats(window(task, 0.0, 3000, rng)[1])
    cells = [(0.0, 50), (0.0, 400), (1.0, 2000), (2.0, 4000), (2.0, 3000), (0.0, 0)]
    vectors, counts, alone = [], [], []
    for target, n in cells:
        if n == 0:
            vectors.append(np.zeros(layout.size))
            counts.append(np.zeros(15))
            alone.append(None)
            continue
        vector, stats = window(task, target, n, rng)
        vectors.append(vector)
        counts.append(stats.bin_count * 2.0)
        alone.append(unpack(vector, layout))
    got = series_readings(layout, np.array(vectors), np.array(counts), baseline, POLICY)
    seen = []
    for i, stats in enumerate(alone):
        if stats is not None:
            seen.append(stats)
        if stats is None:
            assert got.labeled[i] == 0 and math.isnan(got.ece[i])
            assert got.status[i] == "insufficient_data" and not got.refit.found[i]
            continue
        one = reading_from_stats(stats)
        steps = BinTables(
            np.array([s.bin_count for s in seen], dtype=float),
            np.array([s.bin_confidence_sum for s in seen]),
            np.array([s.bin_correct_sum for s in seen], dtype=float),
            EDGES,
            task == "binary",
            "steps",
        )
        drift = assess_drift(
            one,
            baseline,
            POLICY,
            edges=EDGES,
            confidence_counts=counts[i],
            views=[(steps, 0)],
        )
        assert got.labeled[i] == one.n
        for name, value in (("ece", one.ece), ("nll", one.nll), ("brier", one.brier)):
            assert getattr(got, name)[i] == pytest.approx(value, rel=1e-12), name
        assert got.accuracy[i] == pytest.approx(one.accuracy, rel=1e-12)
        assert got.inference.debiased[i] == pytest.approx(one.ece_debiased, abs=1e-12)
        assert got.inference.lower[i] == pytest.approx(one.ece_ci[0], abs=1e-12)
        assert got.inference.upper[i] == pytest.approx(one.ece_ci[1], abs=1e-12)
        assert got.status[i] == drift.status
        assert drift.confidence_shift is not None
        assert got.confidence_psi[i] == pytest.approx(drift.confidence_shift.psi, rel=1e-9)
        assert got.confidence_psi_no_shift[i] == pytest.approx(
            drift.confidence_shift.no_shift, rel=1e-12
        )
    assert set(got.status) >= {"insufficient_data", "alert"}
