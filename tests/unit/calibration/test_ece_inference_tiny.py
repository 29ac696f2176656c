"""Tiny samples: the ECE tests are exact or conservative where the cumulant tails are not."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from service.calibration import infer_ece
from service.calibration.ece_inference import EXACT_TOTAL


def exact_calibrated_tail(n: list[int], c: list[float], k: list[int]) -> float:
    """``P(ECE >= observed)`` when every bin is calibrated, by brute force over all outcomes."""
    total = sum(n)
    observed = sum(m / total * abs(p - s / m) for m, p, s in zip(n, c, k, strict=True))
    tail = 0.0
    for outcome in itertools.product(*(range(m + 1) for m in n)):
        ece = sum(m / total * abs(p - s / m) for m, p, s in zip(n, c, outcome, strict=True))
        if ece >= observed - 1e-9:
            pmfs = [binom.pmf(s, m, p) for m, p, s in zip(n, c, outcome, strict=True)]
            tail += float(np.prod(pmfs))
    return tail


def test_one_wrong_prediction_at_090_is_no_evidence_at_5_percent() -> None:
    got = infer_ece([1], [0.9], [0])
    assert got.ece == pytest.approx(0.9)
    assert got.calibrated_tail == pytest.approx(0.1)
    assert got.exceedance_p_value(0.0) == pytest.approx(0.1)
    assert got.p_value >= 0.1
    assert got.lower == 0.0 and got.lower_bound(0.05) == 0.0
    assert got.upper == 1.0


def test_larger_tables_keep_the_cumulant_tails() -> None:
    n = [EXACT_TOTAL + 1]
    got = infer_ece(n, [0.9 * n[0]], [n[0] - 3])
    assert got.calibrated_tail == 0.0


@st.composite
def tiny_tables(draw: st.DrawFn) -> tuple[list[int], list[float], list[int]]:
    bins = draw(st.integers(1, 4))
    n = draw(st.lists(st.integers(1, 4), min_size=bins, max_size=bins))
    if sum(n) > EXACT_TOTAL:
        n = n[:1]
    c = draw(
        st.lists(
            st.sampled_from([0.05, 0.3, 0.5, 0.62, 0.8, 0.9, 0.97]),
            min_size=len(n),
            max_size=len(n),
        )
    )
    k = [draw(st.integers(0, m)) for m in n]
    return n, c, k


@settings(max_examples=150, deadline=None)
@given(tiny_tables())
def test_small_samples_never_get_a_p_value_below_the_exact_one(
    table: tuple[list[int], list[float], list[int]],
) -> None:
    n, c, k = table
    exact = exact_calibrated_tail(n, c, k)
    got = infer_ece(n, [m * p for m, p in zip(n, c, strict=True)], k)
    assert got.calibrated_tail == pytest.approx(exact, abs=1e-9)
    assert got.p_value >= exact - 1e-9
    for tau in (0.0, 0.05, 0.2):
        assert got.exceedance_p_value(tau) >= exact - 1e-9
    # The interval stays dual to the test: it excludes 0 only when p < 0.05.
    assert (got.lower > 0.0) == (got.p_value < 0.05)
