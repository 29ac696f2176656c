"""``mce`` is the standard maximum calibration error; ``mce_supported`` the variant over
well-filled bins only, and a reading stored when ``mce`` named that variant reads back right."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from service.calibration import (
    Reading,
    TemperatureCalibrator,
    binary_reading,
    default_edges,
    multiclass_reading,
    softmax,
)
from service.calibration.readings import MCE_MIN_ROWS


def bucketize_mce(confidences, targets, n_bins):
    """The MCE as torchmetrics computes it (``norm="max"``): equal-width boundaries, each value
    in the bin ``bucketize(right=True) - 1`` clamped to the last, per-bin accuracy and
    confidence with empty bins at 0, then the largest absolute difference."""
    boundaries = np.linspace(0.0, 1.0, n_bins + 1)
    index = np.searchsorted(boundaries, confidences, side="right") - 1
    index = np.clip(index, 0, n_bins - 1)
    count = np.bincount(index, minlength=n_bins).astype(float)
    conf = np.bincount(index, weights=confidences, minlength=n_bins)
    acc = np.bincount(index, weights=targets, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = np.nan_to_num(np.abs(acc / count - conf / count))
    return float(gap.max())


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("n_bins", [5, 15, 40])
def test_multiclass_mce_matches_the_bucketize_reference(seed, n_bins):
    rng = np.random.default_rng(seed)
    N, K = int(rng.integers(20, 400)), int(rng.integers(2, 6))
    logits = rng.normal(scale=rng.uniform(0.5, 4.0), size=(N, K))
    labels = rng.integers(0, K, size=N)
    reading = multiclass_reading(logits, labels, default_edges(n_bins), TemperatureCalibrator(1.3))
    p = softmax(logits, 1.3)
    top = logits.argmax(axis=1)
    want = bucketize_mce(p.max(axis=1), (top == labels).astype(float), n_bins)
    assert reading.mce == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_binary_mce_matches_the_bucketize_reference(seed):
    rng = np.random.default_rng(50 + seed)
    N = int(rng.integers(20, 400))
    scores = rng.beta(0.8, 1.2, size=N)
    labels = (rng.random(N) < scores**1.5).astype(int)
    labels[:2] = [0, 1]
    reading = binary_reading(scores, labels, default_edges(10))
    assert reading.mce == pytest.approx(bucketize_mce(scores, labels, 10), abs=1e-12)


def test_thin_bins_count_in_mce_but_not_in_mce_supported():
    # 200 well calibrated rows at 0.5 and 3 rows at 0.95 that are all wrong.
    scores = np.r_[np.full(200, 0.5), np.full(3, 0.95)]
    labels = np.r_[np.tile([0, 1], 100), np.zeros(3, dtype=int)]
    r = binary_reading(scores, labels, default_edges(10))
    assert r.mce == pytest.approx(0.95) and r.mce_n == 3
    assert r.mce_supported == pytest.approx(0.0, abs=1e-15) and r.mce_supported_n == 200
    assert r.mce_min_rows == MCE_MIN_ROWS
    d = r.to_dict()
    assert (d["mce"], d["mce_supported"], d["mce_min_rows"]) == (r.mce, 0.0, MCE_MIN_ROWS)
    assert Reading.from_dict(json.loads(json.dumps(d))) == r


def test_a_reading_stored_when_mce_named_the_supported_variant_reads_back_with_both():
    scores = np.r_[np.full(200, 0.5), np.full(3, 0.95)]
    labels = np.r_[np.tile([0, 1], 100), np.zeros(3, dtype=int)]
    r = binary_reading(scores, labels, default_edges(10))
    stored = r.to_dict()
    for key in ("mce_supported", "mce_supported_n", "mce_min_rows"):
        del stored[key]
    stored["mce"], stored["mce_n"] = r.mce_supported, r.mce_supported_n
    again = Reading.from_dict(stored)
    assert again.mce_supported == r.mce_supported and again.mce_supported_n == 200
    assert again.mce == pytest.approx(r.mce, abs=1e-12) and again.mce_n == 3
    assert again.mce_min_rows == MCE_MIN_ROWS


def test_no_rows_have_no_mce():
    r = binary_reading(np.zeros(0), np.zeros(0, dtype=int), default_edges(10))
    assert math.isnan(r.mce) and r.mce_n is None and math.isnan(r.mce_supported)
