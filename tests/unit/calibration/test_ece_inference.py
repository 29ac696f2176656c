"""The debiased ECE, its interval and the calibration test, from per-bin statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from service.calibration import CalibrationInputError, infer_ece, multiclass_reading
from service.calibration.binning import default_edges
from service.calibration.ece_inference import EXACT_ROWS, _absolute_moments, infer_ece_many
from service.calibration.simulation import SCENARIOS
from service.calibration.stats import binary_stats, multiclass_stats


def stats_of(task: str, true_ece: float, n: int, rng: np.random.Generator):
    inputs, labels = SCENARIOS[(task, true_ece)].draw(rng, n)
    edges = default_edges(15)
    if task == "binary":
        return binary_stats(inputs, labels, edges)
    return multiclass_stats(inputs, labels, edges, classwise=False)


def infer(stats):
    return infer_ece(stats.bin_count, stats.bin_confidence_sum, stats.bin_correct_sum)


def test_perfectly_matching_bins_show_no_error():
    got = infer_ece([100, 0, 100], [20.0, 0.0, 80.0], [20, 0, 80])
    assert got.ece == 0.0 and got.debiased == 0.0 and got.lower == 0.0 and got.gap == 0.0
    assert 0.0 < got.upper < 0.1
    assert got.p_value == 1.0


def test_a_large_gap_is_found_and_bracketed():
    got = infer_ece([1000, 1000], [300.0, 800.0], [200, 700])
    assert got.ece == pytest.approx(0.1)
    assert got.lower < got.debiased <= got.ece < got.upper
    assert got.debiased == pytest.approx(0.1, abs=0.01)
    assert got.lower > 0.07 and got.upper < 0.13
    assert got.gap == pytest.approx(0.1) and got.p_value < 1e-12


def test_no_rows_gives_nan():
    for got in (infer_ece([0, 0], [0.0, 0.0], [0, 0]), infer_ece([], [], [])):
        values = (got.ece, got.debiased, got.lower, got.upper, got.p_value)
        assert all(math.isnan(v) for v in values)


@pytest.mark.parametrize(
    ("counts", "sums", "hits"),
    [
        ([1, 2], [0.5, 1.0], [2, 2]),
        ([1, -1], [0.5, 0.0], [0, 0]),
        ([1, 2], [0.5], [0, 1]),
        ([1, 2], [0.5, float("nan")], [0, 1]),
        ([1, 2], [1.5, 1.0], [0, 1]),
    ],
)
def test_bad_bins_are_refused(counts, sums, hits):
    with pytest.raises(CalibrationInputError) as info:
        infer_ece(counts, sums, hits)
    assert info.value.field == "counts"


def test_the_level_is_validated():
    with pytest.raises(CalibrationInputError):
        infer_ece([10], [5.0], [5], level=1.0)


def test_deterministic_and_narrower_with_more_data():
    rng = np.random.default_rng(4)
    small = infer(stats_of("binary", 0.05, 400, rng))
    assert infer(stats_of("binary", 0.05, 400, np.random.default_rng(4))) == small
    large = infer(stats_of("binary", 0.05, 40_000, rng))
    assert large.upper - large.lower < 0.25 * (small.upper - small.lower)


def test_readings_carry_the_inference():
    rng = np.random.default_rng(3)
    z, y = SCENARIOS[("multiclass", 0.05)].draw(rng, 2000)
    reading = multiclass_reading(z, y, default_edges())
    got = infer(multiclass_stats(z, y, default_edges()))
    assert reading.ece_ci == got.interval
    assert (reading.ece_debiased, reading.calibration_p_value) == (got.debiased, got.p_value)


@pytest.mark.parametrize("rows", [1, 2, 7, EXACT_ROWS])
def test_small_bins_use_exact_binomial_moments(rows):
    c = np.array([0.93, 0.5, 0.07])
    p = np.array([0.9, 0.5, 0.2])
    m1, m2, m3 = _absolute_moments(c[None, :], p[None, :], np.full(3, float(rows)))
    k = np.arange(rows + 1)[:, None]
    pmf = binom.pmf(k, rows, p[None, :])
    dev = np.abs(c[None, :] - k / rows)
    for got, power in ((m1, 1), (m2, 2), (m3, 3)):
        assert got[0] == pytest.approx((pmf * dev**power).sum(axis=0), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("rows", [101, 200, 5000])
def test_large_bins_match_the_binomial_moments_closely(rows):
    """Above EXACT_ROWS the folded-normal limit stands in for the exact binomial sums."""
    c = np.array([0.95, 0.5, 0.3, 0.6])
    p = np.array([0.9, 0.5, 0.3, 0.45])
    m1, m2, _ = _absolute_moments(c[None, :], p[None, :], np.full(4, float(rows)))
    k = np.arange(rows + 1)[:, None]
    pmf = binom.pmf(k, rows, p[None, :])
    dev = np.abs(c[None, :] - k / rows)
    assert m1[0] == pytest.approx((pmf * dev).sum(axis=0), rel=0.03)
    assert m2[0] == pytest.approx((pmf * dev**2).sum(axis=0), rel=1e-9)


CELLS = [
    (task, ece, n)
    for task in ("binary", "multiclass")
    for ece in (0.0, 0.05, 0.1)
    for n in (300, 3000)
]


def test_interval_coverage_by_seeded_simulation():
    """A small version of bench/statistics.py: the same targets, 50 runs per cell.

    Fails if the interval regresses toward the old bootstrap (47-60% coverage at true ECE 0).
    """
    covered = below = runs = 0
    for task, ece, n in CELLS:
        rng = np.random.default_rng(hash((task, ece, n)) % 2**32)
        truth = SCENARIOS[(task, ece)].true_ece
        cell_covered = 0
        for _ in range(50):
            got = infer(stats_of(task, ece, n, rng))
            cell_covered += got.lower <= truth <= got.upper
            below += got.upper < truth
        assert cell_covered >= 43, (task, ece, n, cell_covered)
        covered += cell_covered
        runs += 50
    assert covered / runs >= 0.93
    assert below / runs <= 0.035


def test_the_calibration_test_holds_its_level_on_calibrated_data():
    rejected = runs = 0
    for task in ("binary", "multiclass"):
        rng = np.random.default_rng(7)
        for n in (200, 1000):
            for _ in range(150):
                rejected += infer(stats_of(task, 0.0, n, rng)).p_value < 0.05
                runs += 1
    assert rejected / runs <= 0.08


bins = st.integers(min_value=1, max_value=12).flatmap(
    lambda m: st.tuples(
        st.lists(st.integers(0, 400), min_size=m, max_size=m),
        st.lists(st.floats(0.0, 1.0), min_size=m, max_size=m),
        st.lists(st.floats(0.0, 1.0), min_size=m, max_size=m),
    )
)


@settings(max_examples=150, deadline=None)
@given(bins)
def test_ordering_and_ranges(data):
    counts, confidence, frequency = (np.array(x) for x in data)
    if counts.sum() == 0:
        return
    hits = np.floor(frequency * counts)
    got = infer_ece(counts, confidence * counts, hits)
    assert 0.0 <= got.lower <= got.debiased <= got.ece + 1e-12
    assert got.debiased <= got.upper <= 1.0
    assert 0.0 <= got.p_value <= 1.0
    order = np.arange(counts.size)[::-1]
    flipped = infer_ece(counts[order], (confidence * counts)[order], hits[order])
    assert flipped.debiased == pytest.approx(got.debiased, abs=1e-9)
    assert flipped.interval == pytest.approx(got.interval, abs=1e-9)


def test_many_tables_at_once_equal_one_at_a_time():
    rng = np.random.default_rng(12)
    tables = [stats_of(task, ece, n, rng) for task, ece, n in CELLS[:8]]
    counts = np.array([t.bin_count for t in tables], dtype=float)
    sums = np.array([t.bin_confidence_sum for t in tables])
    hits = np.array([t.bin_correct_sum for t in tables], dtype=float)
    counts[3] = sums[3] = hits[3] = 0.0
    many = infer_ece_many(counts, sums, hits)
    assert math.isnan(many.ece[3]) and math.isnan(many[3].upper)
    for i in (0, 1, 2, 4, 5, 6, 7):
        one = infer_ece(counts[i], sums[i], hits[i])
        assert abs(many.upper[i] - one.upper) < 1e-12 and abs(many.lower[i] - one.lower) < 1e-12


@settings(max_examples=60, deadline=None)
@given(
    occupancy=st.lists(st.integers(0, 15), min_size=2, max_size=6),
    seed=st.integers(0, 2**32 - 1),
)
def test_sparse_tables_beside_full_ones_read_as_they_do_alone(occupancy, seed):
    """Tables that use few of their bins are cut to the bins the fullest table in the batch
    occupies; each must still read as it does alone (its empty bins weigh nothing)."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((len(occupancy), 15))
    for row, used in enumerate(occupancy):
        counts[row, rng.choice(15, size=used, replace=False)] = rng.integers(1, 400, size=used)
    confidence = np.round(rng.uniform(0.05, 0.95, counts.shape), 4)
    sums = confidence * counts
    hits = rng.binomial(counts.astype(np.int64), np.clip(confidence + 0.1, 0.0, 1.0)).astype(float)
    many = infer_ece_many(counts, sums, hits)
    for row, used in enumerate(occupancy):
        one = infer_ece(counts[row], sums[row], hits[row])
        if not used:
            assert math.isnan(many.ece[row]) and math.isnan(one.ece)
            continue
        for field in ("ece", "debiased", "lower", "upper", "gap", "p_value"):
            assert getattr(many, field)[row] == pytest.approx(getattr(one, field), abs=1e-9), field
