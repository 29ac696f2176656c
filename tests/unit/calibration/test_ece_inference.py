"""The ECE interval, the tests and the bias-reduced estimate, from per-bin statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from service.calibration import CalibrationInputError, infer_ece, multiclass_reading
from service.calibration.binning import default_edges
from service.calibration.ece_debiased import EXACT_ROWS, _absolute_moments
from service.calibration.ece_inference import (
    SPAN,
    infer_ece_many,
    noise_moments,
    upper_quantile,
    upper_tail,
)
from service.calibration.stats import multiclass_stats
from tests.support.simulation import RowPool, scenario


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


def test_gaps_that_cancel_in_the_large_are_overwhelming_evidence():
    """Over-confidence on both sides of 1/2: the signed gaps cancel, the ECE does not."""
    got = infer_ece([1500, 1500], [150, 1350], [300, 1200])
    assert got.ece == pytest.approx(0.1) and got.gap == pytest.approx(0.0, abs=1e-12)
    assert got.p_value < 1e-6
    assert 0.07 < got.lower < 0.1 < got.upper < 0.13
    assert got.exceedance_p_value(0.05) < 1e-6 and got.lower_bound(0.05) > 0.05


def test_no_rows_gives_nan():
    for got in (infer_ece([0, 0], [0.0, 0.0], [0, 0]), infer_ece([], [], [])):
        values = (got.ece, got.debiased, got.lower, got.upper, got.p_value)
        assert all(math.isnan(v) for v in values)
        assert math.isnan(got.exceedance_p_value(0.05))


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


def test_the_level_and_alpha_are_validated():
    with pytest.raises(CalibrationInputError):
        infer_ece([10], [5.0], [5], level=1.0)
    with pytest.raises(CalibrationInputError):
        infer_ece([10], [5.0], [5]).lower_bound(0.0)


def test_deterministic_and_narrower_with_more_data():
    pool = RowPool(scenario("beta25", "overconfident", 1.0), np.random.default_rng(1), 200_000)
    small = pool.tables(np.random.default_rng(4), 1, 400)
    again = pool.tables(np.random.default_rng(4), 1, 400)
    assert infer_ece_many(*small)[0] == infer_ece_many(*again)[0]
    one, many = (
        infer_ece_many(*small)[0],
        infer_ece_many(*pool.tables(np.random.default_rng(5), 1, 40_000))[0],
    )
    assert many.upper - many.lower < 0.25 * (one.upper - one.lower)


def test_readings_carry_the_inference():
    rng = np.random.default_rng(3)
    z, y = scenario("k10", "overconfident", 1.0).draw(rng, 2000)
    reading = multiclass_reading(z, y, default_edges())
    stats = multiclass_stats(z, y, default_edges())
    got = infer_ece(stats.bin_count, stats.bin_confidence_sum, stats.bin_correct_sum)
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


@pytest.mark.parametrize(
    ("p", "n"), [(0.5, 1.0), (0.3, 40.0), (0.004, 5000.0), (0.999, 20_000.0), (1.0, 9.0), (0.0, 3)]
)
def test_noise_moments_are_exact_binomial_sums_where_few_counts_are_plausible(p, n):
    """Bins whose binomial has few plausible counts (small, or p near 0 or 1) are summed
    exactly: the imbalanced cells a normal limit gets wrong."""
    k = np.arange(int(n) + 1)
    pmf = binom.pmf(k, n, p)
    dev = np.abs(p - k / n)
    got = noise_moments(np.array([p]), np.array([n]))
    for moment, power in zip(got, (1, 2, 3), strict=True):
        assert moment[0] == pytest.approx((pmf * dev**power).sum(), rel=1e-9, abs=1e-15)


def test_wide_binomials_use_the_normal_limit():
    n, p = 200_000.0, 0.5
    assert math.sqrt(n * p * (1 - p)) * 18 > SPAN
    m1, m2, _ = noise_moments(np.array([p]), np.array([n]))
    sd = math.sqrt(p * (1 - p) / n)
    assert m1[0] == pytest.approx(sd * math.sqrt(2 / math.pi)) and m2[0] == pytest.approx(sd**2)


tails = st.tuples(
    st.floats(-1.0, 1.0), st.floats(1e-8, 1.0), st.floats(-3.0, 3.0), st.floats(-5.0, 5.0)
)


@settings(max_examples=300, deadline=None)
@given(tails, st.floats(0.0, 1.0))
def test_the_tail_is_monotone_and_its_quantile_its_inverse(params, step):
    mean, sd, skew, t = params
    third = skew * sd**3
    x = mean + t * sd
    tail = upper_tail(x, mean, sd * sd, third)
    assert 0.0 <= tail <= 1.0
    assert upper_tail(x + step * sd, mean, sd * sd, third) <= tail + 1e-15
    if 1e-12 < tail < 1.0 - 1e-12:
        back = upper_quantile(tail, mean, sd * sd, third)
        # scipy's inverse incomplete gamma is good to about 1e-7 relative at large shapes.
        assert back == pytest.approx(x, abs=1e-6 * (1.0 + abs(x)))


tables = st.integers(min_value=1, max_value=10).flatmap(
    lambda m: st.tuples(
        st.lists(st.integers(1, 300), min_size=m, max_size=m),
        st.lists(st.floats(0.01, 0.99), min_size=m, max_size=m),
        st.lists(st.sampled_from([-1.0, 1.0]), min_size=m, max_size=m),
    )
)


same_sided = st.integers(min_value=1, max_value=10).flatmap(
    lambda m: st.tuples(
        st.lists(st.integers(1, 300), min_size=m, max_size=m),
        st.lists(st.floats(0.01, 0.99), min_size=m, max_size=m),
        st.sampled_from([-1.0, 1.0]),
        st.lists(st.integers(0, 300), min_size=m, max_size=m),
        st.lists(st.integers(0, 300), min_size=m, max_size=m),
    )
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(same_sided)
def test_the_p_value_never_rises_as_the_gaps_grow(table):
    """Successes moved further from the confidences, the same way in every bin (so the ECE and
    the in-the-large gap both grow), can only make the evidence against calibration stronger:
    the p-value is a monotone tail, never the turning Cornish-Fisher inversion it replaced."""
    counts, confidence, side, first, more = (np.array(x, dtype=float) for x in table)
    sums = confidence * counts
    start = np.floor(counts * confidence) if side > 0 else np.ceil(counts * confidence)

    def p_value(moved: np.ndarray) -> float:
        hits = np.clip(start - side * moved, 0, counts)
        return infer_ece(counts, sums, hits).p_value

    assert p_value(first + more) <= p_value(first) + 1e-12


@settings(max_examples=200, deadline=None)
@given(tables, st.floats(0.0, 0.4), st.floats(0.0, 0.2), st.floats(0.001, 0.4))
def test_the_interval_and_the_tests_agree(table, shift, tau, alpha):
    """The 95% interval excludes 0 exactly when the calibration test rejects at 5%; a one-sided
    lower bound exceeds tau exactly when the test of "ECE <= tau" rejects at its level."""
    counts, confidence, direction = (np.array(x, dtype=float) for x in table)
    hits = np.clip(np.round(counts * (confidence - direction * shift)), 0, counts)
    got = infer_ece(counts, confidence * counts, hits)
    assert (got.lower > 0.0) == (got.p_value < 0.05)
    p = got.exceedance_p_value(tau)
    bound = got.lower_bound(alpha)
    assume(abs(p - alpha) > 1e-9 and abs(bound - tau) > 1e-9)
    assert (p < alpha) == (bound > tau)
    assert 0.0 <= got.lower <= got.debiased <= got.upper <= 1.0 and got.lower <= got.ece


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


#: Cells where an interval is easiest to get wrong: imbalanced binary on fine low bins at
#: truth 0 (a skewed, discrete noise), confidences massed near 1 with a large error, all the
#: error in one bin, and signed gaps that cancel across bins.
HARD_CELLS = [
    ("imbalanced", "constant", 0.0, 1000),
    ("imbalanced", "constant", 0.0, 3000),
    ("imbalanced", "constant", 2.0, 300),
    ("confident_binary", "overconfident", 2.0, 10_000),
    ("beta25", "one_bin", 1.0, 300),
    ("beta25", "alternating", 2.0, 3000),
    ("k10", "overconfident", 2.0, 3000),
    ("few_bins_uneven", "one_bin", 2.0, 1000),
]
DRAWS = 2000


@pytest.mark.parametrize(("population", "shape", "level", "N"), HARD_CELLS)
def test_each_tail_of_the_interval_holds_in_hard_cells(population, shape, level, N):
    """A seeded version of the bench's interval table: each one-sided tail at most 2.5% plus
    three Monte Carlo standard errors."""
    s = scenario(population, shape, level)
    rng = np.random.default_rng([20261201, N, round(level * 10)])
    pool = RowPool(s, rng, 400_000)
    got = infer_ece_many(*pool.tables(rng, DRAWS, N))
    slack = 3.0 * math.sqrt(0.025 * 0.975 / DRAWS)
    assert np.mean(got.upper < s.true_ece) <= 0.025 + slack
    assert np.mean(got.lower > s.true_ece) <= 0.025 + slack
    assert np.all((got.lower > 0) == (got.p_value < 0.05))


@pytest.mark.parametrize(("shape", "level"), [("constant", 0.0), ("constant", 1.0)])
def test_the_debiased_estimate_removes_most_of_the_plug_in_bias(shape, level):
    s = scenario("beta25", shape, level)
    rng = np.random.default_rng(8)
    got = infer_ece_many(*RowPool(s, rng, 200_000).tables(rng, 500, 1000))
    plug_in = np.median(got.ece - s.true_ece)
    debiased = np.median(got.debiased - s.true_ece)
    assert plug_in > 0.0 and abs(debiased) < 0.5 * plug_in
