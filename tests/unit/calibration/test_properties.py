"""Hypothesis properties of the calibration core."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from service.calibration import (
    PlattCalibrator,
    TemperatureCalibrator,
    assign_bins,
    binary_auc,
    binary_probabilities,
    binary_reading,
    binary_stats,
    default_edges,
    fit_temperature,
    multiclass_reading,
    multiclass_stats,
    reading_from_stats,
    softmax,
    validate_edges,
    wilson_interval,
)
from service.calibration.packing import (
    CLASSWISE_MAX_CELLS,
    StatsLayout,
    keeps_classwise,
    pack,
    pack_groups,
    unpack,
)
from service.calibration.probabilities import log_softmax
from service.calibration.readings import MCE_MIN_ROWS
from service.calibration.stats import grouped_stats
from tests.unit.conftest import assert_close_tree

SETTINGS = settings(max_examples=60, deadline=None)

logit_values = st.floats(-30, 30, allow_nan=False, allow_infinity=False)


@st.composite
def multiclass_rows(draw, min_rows=1, max_rows=40):
    N = draw(st.integers(min_rows, max_rows))
    K = draw(st.integers(2, 6))
    logits = draw(hnp.arrays(np.float64, (N, K), elements=logit_values))
    labels = draw(hnp.arrays(np.int64, (N,), elements=st.integers(0, K - 1)))
    return logits, labels


@st.composite
def binary_rows(draw, min_rows=1, max_rows=40):
    N = draw(st.integers(min_rows, max_rows))
    scores = draw(hnp.arrays(np.float64, (N,), elements=st.floats(0, 1)))
    labels = draw(hnp.arrays(np.int64, (N,), elements=st.integers(0, 1)))
    return scores, labels


@st.composite
def edge_sets(draw):
    if draw(st.booleans()):
        return default_edges(draw(st.integers(1, 40)))
    inner = draw(st.lists(st.floats(0, 1, exclude_min=True, exclude_max=True), max_size=12))
    return validate_edges(sorted({0.0, 1.0, *inner}))


temperatures = st.floats(0.05, 20)


@SETTINGS
@given(multiclass_rows(), temperatures)
def test_argmax_and_accuracy_do_not_depend_on_temperature(rows, T):
    logits, labels = rows
    base = multiclass_reading(logits, labels, default_edges(), classwise=False)
    scaled = multiclass_reading(logits, labels, default_edges(), TemperatureCalibrator(T))
    assert scaled.accuracy == base.accuracy
    first_max = np.array([int(np.flatnonzero(row == row.max())[0]) for row in logits])
    assert scaled.accuracy == np.mean(first_max == labels)
    p = softmax(logits, T)
    top_two = np.sort(p, axis=1)[:, -2:]
    clear = top_two[:, 1] > top_two[:, 0]
    assert (p.argmax(axis=1)[clear] == first_max[clear]).all()


@SETTINGS
@given(multiclass_rows())
def test_huge_temperature_gives_uniform_probabilities(rows):
    logits, labels = rows
    K = logits.shape[1]
    p = softmax(logits, 1e9)
    assert np.allclose(p, 1.0 / K, atol=1e-6)
    reading = multiclass_reading(logits, labels, default_edges(), TemperatureCalibrator(1e9))
    assert math.isclose(reading.mean_confidence, 1.0 / K, abs_tol=1e-6)


def assert_mce_consistent(r):
    """MCE is the largest gap over every non-empty bin; the supported MCE the largest among
    bins of >= MCE_MIN_ROWS rows, NaN when there is none."""
    gaps = [abs(b.mean_confidence - b.accuracy) for b in r.bins]
    assert r.mce == pytest.approx(max(gaps), abs=1e-12) and 1 <= r.mce_n <= r.n
    assert r.mce_min_rows == MCE_MIN_ROWS
    trusted = [abs(b.mean_confidence - b.accuracy) for b in r.bins if b.n >= MCE_MIN_ROWS]
    if not trusted:
        assert math.isnan(r.mce_supported) and r.mce_supported_n is None
    else:
        assert r.mce_supported == pytest.approx(max(trusted), abs=1e-12)
        assert r.mce_supported_n >= MCE_MIN_ROWS and r.mce_supported <= r.mce
    lo, hi = r.ece_ci
    # The inference works on mean confidences rounded to 1e-10.
    assert 0.0 <= lo <= r.ece_debiased <= r.ece + 1e-9 and r.ece_debiased <= hi <= 1.0


@SETTINGS
@given(multiclass_rows(), temperatures, edge_sets())
def test_multiclass_ranges(rows, T, edges):
    logits, labels = rows
    r = multiclass_reading(logits, labels, edges, TemperatureCalibrator(T))
    assert 0.0 <= r.ece <= 1.0
    assert_mce_consistent(r)
    assert 0.0 <= r.brier <= 2.0
    assert r.classwise_ece is not None and 0.0 <= r.classwise_ece <= 1.0
    assert r.nll >= 0.0
    assert sum(b.n for b in r.bins) == r.n == logits.shape[0]
    lo, hi = r.ece_ci
    assert 0.0 <= lo <= hi <= 1.0


@SETTINGS
@given(binary_rows(), edge_sets())
def test_binary_ranges(rows, edges):
    scores, labels = rows
    r = binary_reading(scores, labels, edges)
    assert 0.0 <= r.ece <= 1.0
    assert_mce_consistent(r)
    assert 0.0 <= r.brier <= 1.0
    assert r.prevalence == labels.mean()


@SETTINGS
@given(multiclass_rows(min_rows=2), st.randoms(use_true_random=False))
def test_row_order_is_irrelevant(rows, rnd):
    logits, labels = rows
    order = list(range(len(labels)))
    rnd.shuffle(order)
    a = multiclass_reading(logits, labels, default_edges(7), TemperatureCalibrator(1.3))
    b = multiclass_reading(
        logits[order], labels[order], default_edges(7), TemperatureCalibrator(1.3)
    )
    assert_close_tree(a.to_dict(), b.to_dict())


def _stats_close(a, b):
    assert_close_tree(a.to_dict(), b.to_dict())


@SETTINGS
@given(multiclass_rows(max_rows=60), st.data(), temperatures, edge_sets())
def test_multiclass_stats_are_additive(rows, data, T, edges):
    logits, labels = rows
    cut = data.draw(st.integers(0, len(labels)))
    cal = TemperatureCalibrator(T)
    whole = multiclass_stats(logits, labels, edges, calibrator=cal)
    parts = multiclass_stats(logits[:cut], labels[:cut], edges, calibrator=cal) + multiclass_stats(
        logits[cut:], labels[cut:], edges, calibrator=cal
    )
    _stats_close(whole, parts)
    rows_reading = multiclass_reading(logits, labels, edges, cal)
    assert_close_tree(rows_reading.to_dict(), reading_from_stats(parts).to_dict())


@st.composite
def large_k_rows(draw, max_rows=30):
    """Rows of a contract whose K classes times M bins pass the class-wise limit of bucket
    statistics (``packing.keeps_classwise`` is False), with bucket vectors laid out so."""
    M = draw(st.sampled_from([2, 15, 100]))
    K = draw(st.integers(CLASSWISE_MAX_CELLS // M + 1, CLASSWISE_MAX_CELLS // M + 40))
    N = draw(st.integers(1, max_rows))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(N, K)) * draw(st.sampled_from([0.1, 2.0, 30.0]))
    return logits, rng.integers(0, K, N), default_edges(M)


@SETTINGS
@given(large_k_rows(), st.data(), temperatures)
def test_statistics_without_classwise_tables_are_additive_in_their_packed_layout(rows, data, T):
    """Above the class-wise limit the bucket layout has no class-wise tables; its packed
    vectors still add up to the packed statistics of the concatenated rows, every reading of
    the sum is that of the rows, and the class-wise ECE is None (not a wrong number)."""
    logits, labels, edges = rows
    N, K = logits.shape
    assert not keeps_classwise("multiclass", K, edges.size - 1)
    layout = StatsLayout("multiclass", tuple(edges.tolist()), K, classwise=False)
    cal = TemperatureCalibrator(T)
    cut = data.draw(st.integers(0, N))

    def stats(z, y):
        return multiclass_stats(z, y, edges, calibrator=cal, classwise=False)

    a, b = stats(logits[:cut], labels[:cut]), stats(logits[cut:], labels[cut:])
    summed = unpack(pack(a) + pack(b), layout)
    assert summed.to_dict() == (a + b).to_dict()
    _stats_close(stats(logits, labels), summed)
    group = (np.arange(N) >= cut).astype(np.int64)
    grouped = pack_groups(
        grouped_stats(
            "multiclass", logits, labels, edges, group, 2, calibrator=cal, classwise=False
        )
    )
    assert grouped.shape == (2, layout.size)
    np.testing.assert_allclose(grouped.sum(axis=0), pack(a + b), rtol=1e-12, atol=1e-9)
    from_rows = multiclass_reading(logits, labels, edges, cal, classwise=False).to_dict()
    from_stats = reading_from_stats(summed).to_dict()
    assert from_stats["classwise_ece"] is None
    assert_close_tree(from_rows, from_stats)


@SETTINGS
@given(binary_rows(max_rows=60), st.data(), edge_sets())
def test_binary_stats_are_additive(rows, data, edges):
    scores, labels = rows
    cut = data.draw(st.integers(0, len(labels)))
    cal = PlattCalibrator(data.draw(st.floats(0.1, 5)), data.draw(st.floats(-2, 2)))
    costs = (data.draw(st.floats(0.1, 10)), data.draw(st.floats(0.1, 10)))
    tau = costs[0] / (costs[0] + costs[1])

    def stats(s, y):
        return binary_stats(s, y, edges, calibrator=cal, threshold=tau)

    whole = stats(scores, labels)
    parts = stats(scores[:cut], labels[:cut]) + stats(scores[cut:], labels[cut:])
    _stats_close(whole, parts)
    from_rows = binary_reading(scores, labels, edges, cal, c_fp=costs[0], c_fn=costs[1]).to_dict()
    from_stats = reading_from_stats(parts, costs=costs).to_dict()
    exact_auc, histogram_auc = from_rows.pop("auc"), from_stats.pop("auc")
    assert_close_tree(from_rows, from_stats)
    if exact_auc is None:
        assert histogram_auc is None
    else:
        pos = whole.positive_hist.astype(float)
        neg = whole.negative_hist.astype(float)
        same_cell_share = float(pos @ neg) / (pos.sum() * neg.sum())
        assert abs(exact_auc - histogram_auc) <= 0.5 * same_cell_share + 1e-12


@SETTINGS
@given(st.integers(0, 10_000), st.data())
def test_wilson_interval_contains_estimate(n, data):
    k = data.draw(st.integers(0, n))
    lo, hi = wilson_interval(k, n)
    assert 0.0 <= lo <= hi <= 1.0
    if n:
        assert lo <= k / n <= hi


def _near_edges(edges):
    points = [0.0, 1.0]
    for e in edges:
        points += [e, np.nextafter(e, 0.0), np.nextafter(e, 1.0)]
    return st.sampled_from(sorted(p for p in points if 0.0 <= p <= 1.0))


@settings(max_examples=200, deadline=None)
@given(edge_sets(), st.data())
def test_assign_bins_agrees_with_searchsorted(edges, data):
    values = np.array(
        data.draw(st.lists(st.one_of(st.floats(0, 1), _near_edges(edges)), min_size=1))
    )
    want = np.minimum(np.searchsorted(edges, values, side="right") - 1, len(edges) - 2)
    assert (assign_bins(values, edges) == want).all()


@settings(max_examples=40, deadline=None)
@given(multiclass_rows(min_rows=1, max_rows=40), st.floats(0.1, 10))
def test_fitted_temperature_is_a_minimiser(rows, scale):
    logits, labels = rows
    logits = logits * (scale / 30.0)
    fit = fit_temperature(logits, labels)

    def nll(T):
        return -log_softmax(logits, T)[np.arange(len(labels)), labels].mean()

    best = nll(fit.temperature)
    assert math.isclose(best, fit.nll_after, rel_tol=1e-12, abs_tol=1e-12)
    assert best <= fit.nll_before + 1e-12
    for factor in (1 - 1e-3, 1 + 1e-3):
        if 0.05 <= fit.temperature * factor <= 20.0:
            assert nll(fit.temperature * factor) >= best - 1e-12


@SETTINGS
@given(
    hnp.arrays(np.int64, st.integers(2, 60), elements=st.integers(1, 999)),
    st.data(),
    st.floats(0.1, 3),
    st.floats(-3, 3),
)
def test_platt_with_positive_slope_keeps_auc(grid, data, slope, intercept):
    """Scores on a 1/1000 grid and |a logit(s) + b| <= 24 keep distinct scores distinct in p.

    (Beyond |u| ~ 37 the float64 sigmoid rounds to exactly 1 and would merge scores into ties.)
    """
    scores = grid / 1000.0
    labels = np.array(
        data.draw(st.lists(st.integers(0, 1), min_size=len(grid), max_size=len(grid)))
    )
    assume(0 < labels.sum() < len(labels))
    p = binary_probabilities(PlattCalibrator(slope, intercept), scores)
    assert binary_auc(p, labels) == binary_auc(scores, labels)
