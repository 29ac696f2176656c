"""Refit temperature from additive knot sums: grid, derivatives, additivity, accuracy, errors."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.calibration.calibrators import (
    PlattCalibrator,
    TemperatureCalibrator,
    binary_log_odds,
)
from service.calibration.errors import CalibrationInputError
from service.calibration.fitting import (
    T_MAX,
    T_MIN,
    TemperatureFit,
    fit_log_odds_temperature,
    fit_temperature,
    refit_temperature,
)
from service.calibration.intervals import Z_95
from service.calibration.probabilities import log_sigmoid, log_softmax
from service.calibration.refit import (
    N_KNOTS,
    REFIT_KNOTS,
    ZERO_KNOT,
    RefitEstimate,
    binary_knot_sums,
    grouped_knot_sums,
    multiclass_knot_sums,
    refit_from_knot_sums,
    refit_many,
)

SETTINGS = settings(max_examples=40, deadline=None)
U_TOL = 1e-3
LO, HI = math.log(T_MIN), math.log(T_MAX)
FLOAT_COUNT: Any = 2.0


def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def multiclass_data(rng, N, K, scale, t_true, shape="normal"):
    """Logits of size ``scale`` and labels drawn from ``softmax(z / t_true)`` (Gumbel-max)."""
    if shape == "normal":
        z = scale * rng.normal(size=(N, K))
    elif shape == "heavy":
        z = scale * rng.standard_t(2, size=(N, K))
    else:
        z = scale * (rng.normal(size=(N, K)) + 3.0 * np.eye(K)[rng.integers(K, size=N)])
    return z, (z / t_true + rng.gumbel(size=(N, K))).argmax(axis=1)


def binary_data(rng, N, scale, t_true, shape="normal"):
    """Log-odds of size ``scale`` and labels drawn from ``sigmoid(v / t_true)``."""
    if shape == "normal":
        v = scale * rng.normal(size=N)
    elif shape == "heavy":
        v = scale * rng.standard_t(2, size=N)
    else:
        v = scale * (rng.normal(size=N) + rng.normal())
    return v, (rng.random(N) < sigmoid(v / t_true)).astype(np.int64)


def u_hat(est: RefitEstimate) -> float:
    return math.log(est.temperature)


def assert_matches_exact(est: RefitEstimate | None, exact: TemperatureFit) -> bool:
    """Assert the knot refit agrees with the exact bounded optimum; True for an interior one.

    Separated rows whose mean NLL underflows to 0 leave the exact search on a flat zero, so
    only an answer on the bound (or None) is checked there. None is accepted only when the
    exact optimum is on a bound (the curvature there may be negative).
    """
    if exact.nll_after == 0.0:
        assert est is None or est.at_bound
        return False
    if est is None:
        assert exact.at_bound
        return False
    assert abs(u_hat(est) - math.log(exact.temperature)) <= U_TOL
    return not exact.at_bound


def plain_nll_sum(z, y, T):
    return float(-log_softmax(z, T)[np.arange(len(y)), y].sum())


def row_magnitude(task, inputs, labels, temperature=1.0):
    """Sum over rows of |each row's knot values|: the scale of the rounding in any sum."""
    N = len(labels)
    rows = grouped_knot_sums(task, inputs, labels, np.arange(N), max(N, 1), temperature=temperature)
    return np.abs(rows).sum(axis=0)


def test_knot_grid_is_uniform_and_ends_on_the_fitting_bounds():
    assert REFIT_KNOTS.shape == (N_KNOTS,) == (37,) and REFIT_KNOTS.dtype == np.float64
    assert REFIT_KNOTS[0] == LO and REFIT_KNOTS[-1] == HI and REFIT_KNOTS[ZERO_KNOT] == 0.0
    np.testing.assert_allclose(np.diff(REFIT_KNOTS), math.log(20.0) / 18, rtol=1e-12)
    with pytest.raises(ValueError):
        REFIT_KNOTS[0] = 0.0


def test_knot_sums_at_zero_are_the_plain_nll_sums():
    rng = np.random.default_rng(1)
    z, y = multiclass_data(rng, 300, 5, 4.0, 1.0)
    sums = multiclass_knot_sums(z, y, 1.7)
    assert sums.shape == (3, N_KNOTS)
    assert sums[0, ZERO_KNOT] == pytest.approx(plain_nll_sum(z, y, 1.7), rel=1e-12)
    v, b = binary_data(rng, 300, 3.0, 1.0)
    nll = -log_sigmoid(np.where(b == 1, v, -v)).sum()
    assert binary_knot_sums(v, b)[0, ZERO_KNOT] == pytest.approx(nll, rel=1e-12)


@pytest.mark.parametrize("K", [2, 3, 10])
def test_multiclass_derivatives_match_finite_differences(K):
    """Shifting T0 by exp(+-h) moves every knot by +-h: central differences in u."""
    rng = np.random.default_rng(K)
    z, y = multiclass_data(rng, 200, K, 3.0, 1.5)
    T0, h = 0.8, 1e-4
    plus, minus = (multiclass_knot_sums(z, y, T0 * math.exp(d)) for d in (h, -h))
    sums = multiclass_knot_sums(z, y, T0)
    for j in (0, 7, ZERO_KNOT, 30, N_KNOTS - 1):
        shifted = plain_nll_sum(z, y, T0 * math.exp(REFIT_KNOTS[j]))
        assert sums[0, j] == pytest.approx(shifted, rel=1e-10)
    np.testing.assert_allclose(sums[1], (plus[0] - minus[0]) / (2 * h), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sums[2], (plus[1] - minus[1]) / (2 * h), rtol=1e-6, atol=1e-6)


def test_binary_derivatives_match_finite_differences():
    rng = np.random.default_rng(5)
    v, y = binary_data(rng, 200, 4.0, 2.0)
    h = 1e-4
    plus, minus = (binary_knot_sums(v * math.exp(-d), y) for d in (h, -h))
    sums = binary_knot_sums(v, y)
    np.testing.assert_allclose(sums[1], (plus[0] - minus[0]) / (2 * h), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sums[2], (plus[1] - minus[1]) / (2 * h), rtol=1e-6, atol=1e-6)


def direct_multiclass_knot_values(z, y, T0):
    """Per row, the (N, 3, J) loss, slope and curvature at every knot, each knot on its own
    (``p = softmax(s z / T0)`` from ``log_softmax``, no shared exponentials), and the (N, J)
    scale ``(1 + s gap)^2`` of their rounding, ``gap`` the row's widest scaled logit gap."""
    x = z / T0
    rows = np.arange(len(y))
    gap = x.max(axis=1) - x.min(axis=1)
    out = np.empty((len(y), 3, N_KNOTS))
    scale = np.empty((len(y), N_KNOTS))
    for j, u in enumerate(REFIT_KNOTS):
        s = math.exp(-u)
        log_p = log_softmax(z, T0 * math.exp(u))
        p = np.exp(log_p)
        mean = (p * x).sum(axis=1)
        var = (p * (x - mean[:, None]) ** 2).sum(axis=1)
        slope = -s * (mean - x[rows, y])
        out[:, 0, j] = -log_p[rows, y]
        out[:, 1, j] = slope
        out[:, 2, j] = s * s * var - slope
        scale[:, j] = (1.0 + s * gap) ** 2
    return out, scale


@SETTINGS
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 60),
    st.integers(2, 12),
    st.floats(math.log(1e-3), math.log(1e3)),
    st.floats(-2.0, 2.0),
)
def test_multiclass_knot_sums_match_each_knot_evaluated_on_its_own(seed, N, K, log_scale, log_t0):
    """Knots below u = 0 reuse the weights of the knot 18 places up (their 20th power) unless
    a scaled gap reaches the exponent floor; logits up to 1e3 cover both ways."""
    rng = np.random.default_rng(seed)
    z, y = multiclass_data(rng, N, K, math.exp(log_scale), 1.0)
    T0 = math.exp(log_t0)
    direct, scale = direct_multiclass_knot_values(z, y, T0)
    sums = multiclass_knot_sums(z, y, T0)
    tol = 1e-12 * scale.sum(axis=0)
    assert (np.abs(sums - direct.sum(axis=0)) <= tol).all()


@st.composite
def labeled_batches(draw):
    """A seeded multiclass or binary batch: (task, inputs, labels, T0)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    N = draw(st.integers(0, 40))
    scale = math.exp(draw(st.floats(math.log(1e-3), math.log(100.0))))
    t_true = math.exp(draw(st.floats(math.log(0.1), math.log(10.0))))
    if draw(st.booleans()):
        v, y = binary_data(rng, N, scale, t_true)
        return "binary", v, y, 1.0
    z, y = multiclass_data(rng, N, draw(st.integers(2, 6)), scale, t_true)
    return "multiclass", z, y, math.exp(draw(st.floats(-2.0, 2.0)))


@SETTINGS
@given(labeled_batches(), st.data())
def test_knot_sums_add_up_over_any_split(batch, data):
    task, inputs, labels, T0 = batch
    N = len(labels)
    cut = data.draw(st.integers(0, N))
    whole, first, second = (
        grouped_knot_sums(
            task, inputs[part], labels[part], np.zeros(len(labels[part]), int), 1, temperature=T0
        )[0]
        for part in (slice(None), slice(0, cut), slice(cut, None))
    )
    tol = 1e-9 * row_magnitude(task, inputs, labels, T0) + 1e-300
    assert (np.abs(whole - (first + second)) <= tol).all()


@SETTINGS
@given(labeled_batches(), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_grouped_sums_are_the_sums_of_each_group(batch, G, seed):
    task, inputs, labels, T0 = batch
    group = np.random.default_rng(seed).integers(G, size=len(labels))
    grouped = grouped_knot_sums(task, inputs, labels, group, G, temperature=T0)
    assert grouped.shape == (G, 3, N_KNOTS)
    tol = 1e-9 * row_magnitude(task, inputs, labels, T0) + 1e-300
    for g in range(G):
        rows = group == g
        alone = grouped_knot_sums(
            task, inputs[rows], labels[rows], group[rows] * 0, 1, temperature=T0
        )[0]
        assert (np.abs(grouped[g] - alone) <= tol).all()


@SETTINGS
@given(labeled_batches())
def test_outputs_are_finite_and_ordered(batch):
    task, inputs, labels, T0 = batch
    zeros = np.zeros(len(labels), dtype=np.int64)
    sums = grouped_knot_sums(task, inputs, labels, zeros, 1, temperature=T0)[0]
    assert np.isfinite(sums).all() and (sums[0] >= 0.0).all()
    if task == "multiclass":
        assert sums[0, ZERO_KNOT] == pytest.approx(plain_nll_sum(inputs, labels, T0), rel=1e-9)
    est = refit_from_knot_sums(sums, len(labels))
    if len(labels) < 2:
        assert est is None
    if est is not None:
        lo_ci, hi_ci = est.temperature_ci
        assert T_MIN * (1 - 1e-12) <= est.temperature <= T_MAX * (1 + 1e-12)
        assert T_MIN * (1 - 1e-12) <= lo_ci <= est.temperature <= hi_ci <= T_MAX * (1 + 1e-12)
        assert est.n == len(labels) and isinstance(est.at_bound, bool)
        if math.isinf(est.log_temperature_se):
            assert est.at_bound and lo_ci == hi_ci == est.temperature
        else:
            assert est.log_temperature_se > 0.0 and (lo_ci < est.temperature or est.at_bound)


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.floats(1.05, 3.0), st.integers(2, 5))
def test_scaling_the_logits_scales_the_refit_temperature(seed, c, K):
    """T'(c z) = c T'(z): the refit is equivariant, hence monotone, in the logit scale."""
    rng = np.random.default_rng(seed)
    z, y = multiclass_data(rng, 150, K, 2.0, math.exp(rng.uniform(-1.0, 1.0)))
    base = refit_from_knot_sums(multiclass_knot_sums(z, y, 1.0), 150)
    assert base is not None
    if base.at_bound or u_hat(base) + math.log(c) > HI - 0.01:
        return
    scaled = refit_from_knot_sums(multiclass_knot_sums(c * z, y, 1.0), 150)
    cooled = refit_from_knot_sums(multiclass_knot_sums(z, y, 1.0 / c), 150)
    assert scaled is not None and cooled is not None
    assert u_hat(scaled) - u_hat(base) == pytest.approx(math.log(c), abs=2 * U_TOL)
    assert u_hat(cooled) == pytest.approx(u_hat(scaled), abs=2 * U_TOL)
    assert scaled.temperature > base.temperature


@pytest.mark.parametrize("kind", ["binary", 2, 3, 10, pytest.param(100, marks=pytest.mark.slow)])
def test_refit_matches_the_exact_optimum_over_random_data(kind):
    """N from 2 to 100,000, T' from 0.2 to 5, logit scale from 0.01 to 50, three shapes."""
    rng = np.random.default_rng([11, 0 if kind == "binary" else kind])
    sizes = (2, 7, 40, 300, 2_000, 20_000, 100_000 if kind != 100 else 20_000)
    interior = 0
    for N in sizes:
        for shape in ("normal", "heavy", "peaked"):
            scale = math.exp(rng.uniform(math.log(0.01), math.log(50.0)))
            t_true = math.exp(rng.uniform(math.log(0.2), math.log(5.0)))
            if kind == "binary":
                v, y = binary_data(rng, N, scale, t_true, shape)
                est = refit_from_knot_sums(binary_knot_sums(v, y), N)
                exact = fit_log_odds_temperature(v, y)
            else:
                z, y = multiclass_data(rng, N, kind, scale, t_true, shape)
                T0 = math.exp(rng.uniform(-1.0, 1.0))
                est = refit_from_knot_sums(multiclass_knot_sums(T0 * z, y, T0), N)
                exact = fit_temperature(z, y)
            interior += assert_matches_exact(est, exact)
    assert interior >= 8


def one_error_rows(K, N, margin):
    """(N, K) one-hot logits of equal ``margin`` and labels that are right on all rows but one."""
    top = np.arange(N) % K
    labels = top.copy()
    labels[0] = (top[0] + 1) % K
    return margin * np.eye(K)[top], labels


@pytest.mark.parametrize(("K", "N"), [(2, 100_000), (10, 100_000), (100, 20_000)])
def test_refit_is_accurate_on_equally_confident_rows(K, N):
    """The hardest data for the knots: rows share one margin and a single row is wrong.

    The optimum puts every row at ``s * margin = a = log((K - 1)(N - 1))`` (up to 14.5 here),
    where each loss bends like ``exp(-a e^{-u})``; the margin places u* a quarter of the way
    into a knot interval, the worst phase. 25 knots miss by 1.1e-3 at K = 100, 21 knots by
    1.9e-3 at K = 10.
    """
    a_star = math.log((K - 1) * (N - 1))
    u_star = REFIT_KNOTS[ZERO_KNOT + 6] + 0.25 * (REFIT_KNOTS[1] - REFIT_KNOTS[0])
    z, y = one_error_rows(K, N, a_star * math.exp(u_star))
    exact = fit_temperature(z, y)
    assert math.log(exact.temperature) == pytest.approx(u_star, abs=1e-6)
    est = refit_from_knot_sums(multiclass_knot_sums(z, y, 1.0), N)
    assert est is not None and assert_matches_exact(est, exact)


def test_binary_refit_from_a_platt_calibrator_matches_refit_temperature():
    N = 100_000
    u_star = 0.5
    v = math.log(N - 1) * math.exp(u_star) * np.where(np.arange(N) % 2 == 0, 1.0, -1.0)
    y = (v > 0).astype(np.int64)
    y[0] = 1 - y[0]
    cal = PlattCalibrator(2.0, 0.0)
    scores = sigmoid(v / 2.0)
    est = refit_from_knot_sums(binary_knot_sums(binary_log_odds(cal, scores), y), N)
    exact = refit_temperature(cal, scores, y, task="binary")
    assert math.log(exact.temperature) == pytest.approx(u_star, abs=1e-6)
    assert est is not None and assert_matches_exact(est, exact)


def test_multiclass_refit_on_top_of_a_temperature_calibrator_matches_refit_temperature():
    rng = np.random.default_rng(4)
    z, y = multiclass_data(rng, 5_000, 4, 3.0, 2.5)
    cal = TemperatureCalibrator(1.4)
    est = refit_from_knot_sums(multiclass_knot_sums(z, y, cal.temperature), 5_000)
    exact = refit_temperature(cal, z, y, task="multiclass")
    assert est is not None and not est.at_bound and assert_matches_exact(est, exact)
    assert 2.5 / 1.4 * 0.8 < est.temperature < 2.5 / 1.4 * 1.25


@pytest.mark.slow
def test_standard_error_matches_the_spread_over_repeated_data_sets():
    rng = np.random.default_rng(2024)
    N, K, t_true, T0 = 2_000, 10, 1.5, 1.3
    estimates = []
    for _ in range(200):
        z, y = multiclass_data(rng, N, K, 2.0, t_true)
        est = refit_from_knot_sums(multiclass_knot_sums(T0 * z, y, T0), N)
        assert est is not None and not est.at_bound
        estimates.append(est)
    u = np.array([u_hat(e) for e in estimates])
    se = np.array([e.log_temperature_se for e in estimates])
    assert u.std(ddof=1) == pytest.approx(se.mean(), rel=0.2)
    assert abs(u.mean() - math.log(t_true)) < 4 * se.mean() / math.sqrt(200) + 2e-3
    covered = np.mean([e.temperature_ci[0] < t_true < e.temperature_ci[1] for e in estimates])
    assert 0.9 <= covered <= 0.99
    ci = estimates[0].temperature_ci
    s = estimates[0].log_temperature_se
    assert ci == pytest.approx((math.exp(u[0] - Z_95 * s), math.exp(u[0] + Z_95 * s)), rel=1e-12)


def test_huge_logits_give_finite_sums_and_estimates():
    rng = np.random.default_rng(6)
    z, y = multiclass_data(rng, 500, 4, 1e4, 5e3)
    sums = multiclass_knot_sums(z, y, 1.0)
    assert np.isfinite(sums).all()
    est = refit_from_knot_sums(sums, 500)
    assert est is not None and math.isfinite(est.temperature)
    assert abs(u_hat(est) - math.log(fit_temperature(z, y).temperature)) <= U_TOL
    v, b = binary_data(rng, 500, 1e4, 5e3)
    assert np.isfinite(binary_knot_sums(v, b)).all()
    noise = rng.integers(4, size=500)
    est = refit_from_knot_sums(multiclass_knot_sums(z, noise, 1e-3), 500)
    assert est is not None and est.at_bound and est.temperature == pytest.approx(T_MAX)


@pytest.mark.parametrize("shift", [0.0, 1.0, 3.0])
def test_one_class_only_in_the_labels(shift):
    """Every label is class 0 (binary: positive); the logits favour it by ``shift``."""
    rng = np.random.default_rng(8)
    z = rng.normal(size=(400, 3)) + shift * np.eye(3)[0]
    y = np.zeros(400, dtype=np.int64)
    est = refit_from_knot_sums(multiclass_knot_sums(z, y, 1.0), 400)
    assert_matches_exact(est, fit_temperature(z, y))
    v = rng.normal(size=400) + shift
    est = refit_from_knot_sums(binary_knot_sums(v, y + 1), 400)
    assert_matches_exact(est, fit_log_odds_temperature(v, y + 1))


def test_separated_rows_push_the_refit_to_the_lower_bound_or_none():
    z = np.array([[50.0, 0.0], [0.0, 50.0], [0.0, 60.0]])
    y = z.argmax(axis=1)
    sums = multiclass_knot_sums(z, y, 1.0)
    assert sums[1, 0] >= 0.0
    est = refit_from_knot_sums(sums, 3)
    assert est is None or (est.at_bound and est.temperature == pytest.approx(T_MIN))
    z = np.array([[3.0, 0.0], [0.0, 2.0], [0.0, 2.5], [1.0, 0.0]])
    est = refit_from_knot_sums(multiclass_knot_sums(z, z.argmax(axis=1), 1.0), 4)
    assert est is not None and est.at_bound and est.temperature == pytest.approx(T_MIN)


def test_wrong_confident_rows_push_the_refit_to_the_upper_bound():
    z = np.array([[20.0, 0.0], [0.0, 20.0]] * 5)
    est = refit_from_knot_sums(multiclass_knot_sums(z, 1 - z.argmax(axis=1), 1.0), 10)
    assert est is not None and est.at_bound and est.temperature == pytest.approx(T_MAX)


def test_too_few_rows_give_none():
    z, y = np.array([[1.0, 2.0]]), np.array([0])
    assert refit_from_knot_sums(multiclass_knot_sums(z, y, 1.0), 1) is None
    empty = multiclass_knot_sums(np.zeros((0, 3)), np.zeros(0, int), 1.0)
    assert (empty == 0.0).all() and refit_from_knot_sums(empty, 0) is None
    assert (binary_knot_sums(np.zeros(0), np.zeros(0, int)) == 0.0).all()


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: grouped_knot_sums("ranking", np.zeros(2), [0, 1], [0, 0], 1), "task"),
        (lambda: grouped_knot_sums("binary", np.zeros(2), [0, 1], [0, 2], 2), "group"),
        (lambda: grouped_knot_sums("binary", np.zeros(2), [0, 1], [0, 0], 0), "n_groups"),
        (lambda: grouped_knot_sums("binary", np.zeros(2), [0, 1], [0, 0], True), "n_groups"),
        (
            lambda: grouped_knot_sums("binary", np.zeros(2), [0, 1], [0, 0], 1, temperature=2.0),
            "temperature",
        ),
        (lambda: multiclass_knot_sums(np.zeros((2, 2)), [0, 1], 0.0), "temperature"),
        (lambda: multiclass_knot_sums(np.zeros((2, 2)), [0, 2], 1.0), "labels"),
        (lambda: multiclass_knot_sums([[1e300, -1e300], [0.0, 1.0]], [0, 1], 1.0), "logits"),
        (lambda: binary_knot_sums([np.nan, 1.0], [0, 1]), "log_odds"),
        (lambda: binary_knot_sums([1e200, 1.0], [0, 1]), "log_odds"),
        (lambda: refit_from_knot_sums(np.zeros((3, 5)), 4), "sums"),
        (lambda: refit_from_knot_sums(np.full((3, N_KNOTS), np.inf), 4), "sums"),
        (lambda: refit_from_knot_sums(np.zeros((3, N_KNOTS)), -1), "n"),
        (lambda: refit_from_knot_sums(np.zeros((3, N_KNOTS)), FLOAT_COUNT), "n"),
    ],
)
def test_bad_inputs_name_the_field(call, field):
    with pytest.raises(CalibrationInputError) as err:
        call()
    assert err.value.field == field


def test_many_windows_at_once_equal_one_at_a_time():
    rng = np.random.default_rng(21)
    sums, rows = [], []
    for _ in range(30):
        N = int(rng.integers(1, 2000))
        z, y = multiclass_data(
            rng, N, 4, math.exp(rng.uniform(-2.0, 2.0)), math.exp(rng.uniform(-1.5, 1.5))
        )
        sums.append(multiclass_knot_sums(z, y, 1.0))
        rows.append(N)
    sums.append(np.zeros((3, N_KNOTS)))
    rows.append(0)
    many = refit_many(np.array(sums), np.array(rows))
    for i in range(len(rows)):
        assert many[i] == refit_from_knot_sums(sums[i], rows[i])
