"""Class-wise reliability from the (K, M) tables equals a direct computation on the rows."""

from __future__ import annotations

import numpy as np
import pytest

from service.calibration import TemperatureCalibrator, binary_stats, multiclass_stats, softmax
from service.calibration.binning import assign_bins
from service.calibration.classwise import class_reliability
from service.calibration.errors import CalibrationInputError
from service.calibration.intervals import wilson_interval

EDGES = np.array([0.0, 0.2, 0.5, 0.8, 1.0])


def test_each_class_bins_its_own_probability() -> None:
    rng = np.random.default_rng(4)
    z = rng.normal(size=(500, 4)) * 2
    y = rng.integers(0, 4, size=500)
    stats = multiclass_stats(z, y, EDGES, calibrator=TemperatureCalibrator(1.3))
    p = softmax(z / 1.3)
    classes = class_reliability(stats)
    assert [c.k for c in classes] == [0, 1, 2, 3]
    for k, found in enumerate(classes):
        bins = assign_bins(p[:, k], EDGES)
        occupied = [m for m in range(len(EDGES) - 1) if (bins == m).any()]
        assert [(b.lo, b.hi) for b in found.bins] == [(EDGES[m], EDGES[m + 1]) for m in occupied]
        for b, m in zip(found.bins, occupied, strict=True):
            rows = bins == m
            hits = int((y[rows] == k).sum())
            assert b.n == int(rows.sum())
            assert b.mean_confidence == pytest.approx(p[rows, k].mean(), abs=1e-12)
            assert b.accuracy == hits / b.n
            lo, hi = wilson_interval(hits, b.n)
            assert (b.ci_lower, b.ci_upper) == (float(lo), float(hi))
        gaps = [abs(p[bins == m, k].sum() - (y[bins == m] == k).sum()) for m in occupied]
        assert found.ece == pytest.approx(sum(gaps) / 500, abs=1e-12)
        assert found.support == int((y == k).sum()) and found.n == 500
    assert np.mean([c.ece for c in classes]) == pytest.approx(
        float(np.abs(stats.class_bin_prob_sum - stats.class_bin_label_sum).sum(axis=1).mean()) / 500
    )


def test_no_rows_give_no_bins_and_no_ece() -> None:
    stats = multiclass_stats(np.zeros((0, 3)), np.zeros(0, dtype=int), EDGES)
    assert all(c.bins == () and np.isnan(c.ece) for c in class_reliability(stats))


def test_binary_statistics_have_no_class_tables() -> None:
    with pytest.raises(CalibrationInputError):
        class_reliability(binary_stats([0.2, 0.9], [0, 1], EDGES))
