"""The detectors' patterns: weights that keep every pattern's mean at most the ECE, variance
bounds that cover each pattern's rows, and the learned weights' place among them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from service.calibration.binning import default_edges
from service.calibration.sequential import (
    LEARNED,
    LEARNED_WEIGHTS,
    MIN_VARIANCE,
    PatternSums,
)

M = 6
EDGES = np.asarray(default_edges(M), dtype=np.float64)


@st.composite
def tables(draw: st.DrawFn, blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(blocks, M) counts, confidence sums and successes of any shape a stream can have."""
    n = draw(arrays(np.int64, (blocks, M), elements=st.integers(0, 60))).astype(np.float64)
    mean = draw(arrays(np.float64, (blocks, M), elements=st.floats(0.0, 1.0)))
    rate = draw(arrays(np.float64, (blocks, M), elements=st.floats(0.0, 1.0)))
    return n, n * mean, np.round(n * rate)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), blocks=st.integers(1, 6), confidence_view=st.booleans())
def test_every_pattern_weighs_a_row_by_at_most_one_and_covers_its_variance(
    data: st.DataObject, blocks: int, confidence_view: bool
) -> None:
    """|X| <= sum_m |gap_m| per block (so a pattern's mean never exceeds the ECE), and each
    pattern's variance bound is at least the variance of its rows under the lookback's success
    probabilities (and ``MIN_VARIANCE``)."""
    block = data.draw(tables(blocks))
    before = data.draw(tables(blocks))
    sums = PatternSums.of_blocks(block, before, EDGES, confidence_view)
    gaps = np.abs(block[1] - block[2]).sum(axis=1)
    assert (np.abs(sums.X) <= gaps[None, :] * (1 + 1e-12) + 1e-9).all()
    assert sums.v.shape == sums.X.shape
    assert (sums.v >= MIN_VARIANCE).all()
    ln, lc, lk = before
    seen = ln.sum(axis=1)
    safe = np.where(ln > 0, ln, 1.0)
    p = np.clip(0.5, np.minimum(lc, lk) / safe, np.maximum(lc, lk) / safe)
    widest = (ln * p * (1 - p)).sum(axis=1) / np.where(seen > 0, seen, 1.0)
    signs_only = [i for i, name in enumerate(sums.names) if name != LEARNED_WEIGHTS]
    for i in signs_only:
        assert np.allclose(sums.v[i], np.maximum(np.where(seen > 0, widest, sums.v[i]), 0.01))
    assert (sums.v[sums.names.index(LEARNED_WEIGHTS)] <= sums.v[signs_only[0]] + 1e-12).all()


def test_the_learned_weights_follow_the_gaps_over_their_variance() -> None:
    """An error confined to one bin gives that bin weight 1 and the calibrated bins little; the
    learned signs give every bin +-1."""
    rng = np.random.default_rng(5)
    ln = np.full((1, M), 400.0)
    lc = ln * np.linspace(0.1, 0.9, M)
    lk = np.round(rng.binomial(400, np.linspace(0.1, 0.9, M))).astype(np.float64)[None, :]
    lk[0, 4] = lc[0, 4] - 120.0
    one = (np.eye(M)[None, 4] * 1.0, np.eye(M)[None, 4] * 0.7, np.zeros((1, M)))
    sums = PatternSums.of_blocks(one, (ln, lc, lk), EDGES, confidence_view=False)
    weights = sums.X[:, 0] / 0.7
    assert weights[sums.names.index(LEARNED_WEIGHTS)] == 1.0
    assert weights[sums.names.index(LEARNED)] == 1.0
    others = (np.eye(M)[None, 0] * 1.0, np.eye(M)[None, 0] * 0.1, np.zeros((1, M)))
    other = PatternSums.of_blocks(others, (ln, lc, lk), EDGES, confidence_view=False)
    assert abs(other.X[other.names.index(LEARNED_WEIGHTS), 0] / 0.1) < 0.2
    assert abs(other.X[other.names.index(LEARNED), 0] / 0.1) == 1.0
