"""Temperature and Platt fits."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.optimize import OptimizeResult, minimize, minimize_scalar
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from service.calibration import (
    FitError,
    IdentityCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
    binary_reading,
    default_edges,
    fit_binary_temperature,
    fit_platt,
    fit_temperature,
    fitting,
    multiclass_reading,
    refit_temperature,
)


def overconfident(seed, N=3000, K=4, T_true=2.5):
    rng = np.random.default_rng(seed)
    z = rng.normal(scale=3.0, size=(N, K))
    p = np.exp(z / T_true)
    p /= p.sum(axis=1, keepdims=True)
    y = np.array([rng.choice(K, p=row) for row in p])
    return z, y


def test_temperature_recovers_overconfidence():
    z, y = overconfident(0)
    fit = fit_temperature(z, y)
    assert 2.0 < fit.temperature < 3.0
    assert fit.nll_after < fit.nll_before
    assert fit.nll_before == pytest.approx(multiclass_reading(z, y, default_edges()).nll, abs=1e-12)
    calibrated = multiclass_reading(z, y, default_edges(), TemperatureCalibrator(fit.temperature))
    assert calibrated.nll == pytest.approx(fit.nll_after, abs=1e-12)


def test_temperature_matches_an_independent_search_to_1e6_in_log_t():
    z, y = overconfident(1, N=500)

    def nll(u):
        s = z / math.exp(u)
        s = s - s.max(axis=1, keepdims=True)
        return float(np.mean(np.log(np.exp(s).sum(axis=1)) - s[np.arange(len(y)), y]))

    ref = minimize_scalar(nll, bracket=(0.0, 1.0), method="brent", tol=1e-12)
    assert math.log(fit_temperature(z, y).temperature) == pytest.approx(ref.x, abs=1e-6)


def test_refit_on_calibrated_logits_is_one():
    z, y = overconfident(2)
    T = fit_temperature(z, y).temperature
    extra = refit_temperature(TemperatureCalibrator(T), z, y, task="multiclass")
    assert extra.temperature == pytest.approx(1.0, abs=1e-6)


def test_separable_data_hits_the_bound():
    fit = fit_temperature([[5.0, 0.0], [0.0, 5.0]], [0, 1])
    assert fit.at_bound and fit.temperature == pytest.approx(0.05, rel=1e-6)


def binary_data(seed, N=4000):
    rng = np.random.default_rng(seed)
    true_logit = rng.normal(scale=1.5, size=N)
    y = (rng.random(N) < 1 / (1 + np.exp(-true_logit))).astype(int)
    scores = 1 / (1 + np.exp(-(2.0 * true_logit + 0.5)))
    return scores, y


def test_platt_recovers_a_known_distortion():
    s, y = binary_data(5)
    fit = fit_platt(s, y)
    assert fit.slope == pytest.approx(0.5, abs=0.05)
    assert fit.intercept == pytest.approx(-0.25, abs=0.1)
    assert fit.nll_after < fit.nll_before
    assert fit.nll_before == pytest.approx(binary_reading(s, y, default_edges()).nll, abs=1e-12)
    after = binary_reading(s, y, default_edges(), PlattCalibrator(fit.slope, fit.intercept))
    assert after.nll == pytest.approx(fit.nll_after, abs=1e-12)
    clipped = np.clip(s, 1e-6, 1 - 1e-6)
    u = fit.slope * np.log(clipped / (1 - clipped)) + fit.intercept
    residual = 1 / (1 + np.exp(-u)) - y
    gradient = [np.mean(residual * np.log(clipped / (1 - clipped))), np.mean(residual)]
    assert np.abs(gradient).max() < 1e-9


def test_binary_temperature():
    s, y = binary_data(6)
    fit = fit_binary_temperature(s, y)
    assert fit.temperature == pytest.approx(2.0, rel=0.1)
    extra = refit_temperature(TemperatureCalibrator(fit.temperature), s, y, task="binary")
    assert extra.temperature == pytest.approx(1.0, abs=1e-6)
    assert refit_temperature(
        IdentityCalibrator(), s, y, task="binary"
    ).temperature == pytest.approx(fit.temperature, rel=1e-9)


@pytest.mark.parametrize(
    ("scores", "labels", "field"),
    [
        ([0.2, 0.4, 0.9], [1, 1, 1], "labels"),
        ([0.2, 0.4, 0.9], [0, 0, 0], "labels"),
        ([0.2, 0.4, 0.9], [0, 1, 1], "scores"),
        ([0.2, 0.4, 0.9], [1, 0, 0], "scores"),
        ([0.2, 0.4, 0.6, 0.9], [1, 1, 0, 0], "scores"),
    ],
    ids=["all-positive", "all-negative", "separated", "reversed", "reversed-4"],
)
def test_platt_fit_errors(scores, labels, field):
    with pytest.raises(FitError) as info:
        fit_platt(scores, labels)
    assert info.value.field == field


def test_platt_negative_slope_is_a_fit_error():
    s = np.array([0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9])
    y = np.array([1, 1, 0, 1, 0, 1, 0, 0])
    with pytest.raises(FitError, match="not positive"):
        fit_platt(s, y)


# --- Platt against an unpenalised logistic regression --------------------------------------
#
# The reference is scikit-learn's LogisticRegression without penalty (C = inf), Newton-CG at
# tol = 1e-14, on the single feature logit(clip(s, 1e-6, 1 - 1e-6)). Each reference point is
# checked on its own: one Newton step from it in extended precision (np.longdouble, plain double
# on some platforms), which estimates its distance to the optimum, must be below 1e-7 in (a, b)
# (the largest on these sets is 5e-8), so the 1e-6 asked of fit_platt is not spent on the
# reference. Data sets without a finite optimum with a > 0 must raise FitError instead.

PLATT_ABS = 1e-6
REFERENCE_ABS = 1e-7


def clipped_logit(s):
    c = np.clip(np.asarray(s, dtype=float), 1e-6, 1 - 1e-6)
    return np.log(c) - np.log1p(-c)


def newton_step_extended(z, y, a, b):
    """The Newton step of the mean log loss from (a, b), in np.longdouble, without fit_platt."""
    z, y = np.asarray(z, dtype=np.longdouble), np.asarray(y)
    u = a * z + b
    with np.errstate(over="ignore"):
        p = 1 / (1 + np.exp(-u))
        r = np.where(y == 1, -1 / (1 + np.exp(u)), p)  # p - y without cancellation
    q = p * (1 - p)
    g = np.array([np.mean(r * z), np.mean(r)])
    H = np.array([[np.mean(q * z * z), np.mean(q * z)], [np.mean(q * z), np.mean(q)]])
    det = H[0, 0] * H[1, 1] - H[0, 1] ** 2
    return -np.array([H[1, 1] * g[0] - H[0, 1] * g[1], H[0, 0] * g[1] - H[0, 1] * g[0]]) / det


def reference_platt(s, y):
    z = clipped_logit(s)
    model = LogisticRegression(C=np.inf, solver="newton-cg", tol=1e-14, max_iter=1000)
    with warnings.catch_warnings():
        # At this tolerance the line search can run into rounding at the optimum and say so;
        # the Newton step below checks the point instead.
        for message in ("The line search algorithm", "Rounding errors", "Line Search failed"):
            warnings.filterwarnings("ignore", message)
        model.fit(z[:, None], y)
    assert model.n_iter_[0] < 1000
    a, b = float(model.coef_[0, 0]), float(model.intercept_[0])
    assert np.abs(newton_step_extended(z, y, a, b)).max() < REFERENCE_ABS
    u = a * z + b
    return a, b, float(np.mean(np.logaddexp(0.0, u) - y * u))


def overlapping(s, y):
    """Whether both classes are present and neither ranks entirely above the other."""
    z, y = clipped_logit(s), np.asarray(y)
    if y.min() == y.max():
        return False
    return z[y == 0].max() > z[y == 1].min() and z[y == 1].max() > z[y == 0].min()


def check_platt(s, y):
    """Check ``fit_platt`` on one data set; return "fitted", "separated" or "negative"."""
    if not overlapping(s, y):
        with pytest.raises(FitError):
            fit_platt(s, y)
        return "separated"
    a, b, nll = reference_platt(s, y)
    if a <= 0.0:
        with pytest.raises(FitError, match="not positive"):
            fit_platt(s, y)
        return "negative"
    fit = fit_platt(s, y)
    assert abs(fit.slope - a) <= PLATT_ABS, (fit.slope, a)
    assert abs(fit.intercept - b) <= PLATT_ABS, (fit.intercept, b)
    assert fit.nll_after <= nll + 1e-12
    return "fitted"


BREAST_CANCER = load_breast_cancer()
BREAST_CANCER_MODELS = {
    "naive-bayes": lambda seed: GaussianNB(),
    "random-forest": lambda seed: RandomForestClassifier(n_estimators=10, random_state=seed),
    "logistic": lambda seed: make_pipeline(
        StandardScaler(), LogisticRegression(solver="newton-cholesky")
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("model", list(BREAST_CANCER_MODELS))
def test_platt_equals_logistic_regression_on_breast_cancer_splits(model):
    X, y = BREAST_CANCER.data, BREAST_CANCER.target
    outcomes = []
    for seed in range(200):
        order = np.random.default_rng(seed).permutation(y.size)
        train, held_out = order[: y.size // 2], order[y.size // 2 :]
        classifier = BREAST_CANCER_MODELS[model](seed).fit(X[train], y[train])
        outcomes.append(check_platt(classifier.predict_proba(X[held_out])[:, 1], y[held_out]))
    # Most splits overlap: the comparison is not vacuous.
    assert outcomes.count("fitted") >= 150, {k: outcomes.count(k) for k in set(outcomes)}


def sigmoid_np(u):
    return 1.0 / (1.0 + np.exp(-u))


def synthetic_platt_data(kind, seed, n):
    """Scores and labels of one synthetic kind; ``t`` is the true log-odds of the label."""
    rng = np.random.default_rng(seed)
    t = rng.normal(scale=1.5, size=n)
    y = rng.random(n) < sigmoid_np(t)
    if kind == "distorted":
        s = sigmoid_np(t * rng.uniform(0.3, 3.0) + rng.uniform(-1.0, 1.0))
    elif kind == "exact-0-and-1":
        s = sigmoid_np(4.0 * t)
        u = rng.random(n)
        s[u < 0.05], s[u > 0.95] = 0.0, 1.0
    elif kind == "only-0-and-1":
        s = (rng.random(n) < sigmoid_np(2.0 * t)).astype(float)
    elif kind == "rounded-ties":
        s = np.round(sigmoid_np(t * rng.uniform(0.5, 2.0)), int(rng.integers(1, 3)))
    elif kind == "few-levels":
        s = rng.choice(np.sort(rng.random(int(rng.integers(2, 6)))), size=n)
        y = rng.random(n) < s
    elif kind == "tiny-slope":
        z = rng.uniform(-13.0, 13.0, size=n)
        s = sigmoid_np(z)
        y = rng.random(n) < sigmoid_np(rng.uniform(0.005, 0.03) * z + rng.uniform(-1.0, 1.0))
    elif kind == "huge-slope":
        s = sigmoid_np(t / rng.uniform(30.0, 300.0))
    elif kind == "nearly-separated":
        s = sigmoid_np(3.0 * t)
        y = t > 0
        flip = rng.choice(np.flatnonzero(np.abs(t) < 1.0), size=int(rng.integers(1, 4)))
        y[flip] = ~y[flip]
    elif kind == "rare-positives":
        y = rng.random(n) < sigmoid_np(t - 6.0)
        s = sigmoid_np(1.5 * (t - 6.0))
    elif kind == "scores-near-one":
        z = rng.uniform(8.0, 13.8, size=n)
        s = sigmoid_np(z)
        y = rng.random(n) < sigmoid_np(2.0 * (z - 11.0))
    else:
        raise AssertionError(kind)
    return s, y.astype(int)


SYNTHETIC_KINDS = [
    "distorted",
    "exact-0-and-1",
    "only-0-and-1",
    "rounded-ties",
    "few-levels",
    "tiny-slope",
    "huge-slope",
    "nearly-separated",
    "rare-positives",
    "scores-near-one",
]


SYNTHETIC_SIZES = [300, 3_000, 30_000, 100_000, 1_000, 10_000, 500, 50_000]


@pytest.mark.parametrize("kind", SYNTHETIC_KINDS)
def test_platt_equals_logistic_regression_on_synthetic_sets(kind):
    outcomes = []
    for seed, n in enumerate(SYNTHETIC_SIZES):
        s, y = synthetic_platt_data(kind, seed, n)
        if kind in ("exact-0-and-1", "only-0-and-1"):
            assert (s == 0.0).any() and (s == 1.0).any()
        if kind == "rounded-ties":
            assert np.unique(s).size <= 101
        outcomes.append(check_platt(s, y))
    assert outcomes.count("fitted") >= len(SYNTHETIC_SIZES) - 2, outcomes


def test_platt_slopes_span_tiny_to_huge():
    slopes = {}
    for kind in ("tiny-slope", "huge-slope"):
        s, y = synthetic_platt_data(kind, 3, 100_000)
        slopes[kind] = fit_platt(s, y).slope
    assert 0.0 < slopes["tiny-slope"] < 0.05
    assert slopes["huge-slope"] > 20.0


def failed_trust_region(at):
    """A stand-in for scipy's minimize that gives up at ``at`` without converging.

    ``at`` is in the fit's own (standardised-logit) coordinates; None gives up at the start.
    """

    def fake_minimize(fun, x0, **kwargs):
        x = np.asarray(x0, dtype=float) if at is None else np.array(at, dtype=float)
        return OptimizeResult(x=x, success=False, nit=0, message="gave up")

    return fake_minimize


@pytest.mark.parametrize("at", [None, [np.nan, np.nan], [50.0, -40.0], [-3.0, 2.0]])
def test_platt_falls_back_to_newton_when_the_trust_region_fails(monkeypatch, at):
    s, y = synthetic_platt_data("distorted", 11, 5_000)
    a, b, _ = reference_platt(s, y)
    monkeypatch.setattr(fitting, "minimize", failed_trust_region(at))
    fit = fit_platt(s, y)
    assert fit.slope == pytest.approx(a, abs=PLATT_ABS)
    assert fit.intercept == pytest.approx(b, abs=PLATT_ABS)
    assert fit.iterations > 0


def test_platt_refuses_a_point_that_is_not_stationary(monkeypatch):
    s, y = synthetic_platt_data("distorted", 12, 2_000)
    monkeypatch.setattr(fitting, "minimize", failed_trust_region(None))
    monkeypatch.setattr(fitting, "_damped_newton", lambda objective, w: (w, 0))
    with pytest.raises(FitError, match="did not converge"):
        fit_platt(s, y)


def test_platt_converges_where_a_fixed_gradient_tolerance_stalls():
    """Score sets on which trust-exact with gtol = 1e-10 stops short and reports failure."""
    X, y = BREAST_CANCER.data, BREAST_CANCER.target
    stalled = 0
    for seed in range(10):
        order = np.random.default_rng(seed).permutation(y.size)
        train, held_out = order[: y.size // 2], order[y.size // 2 :]
        s = GaussianNB().fit(X[train], y[train]).predict_proba(X[held_out])[:, 1]
        labels = y[held_out]
        z, sign = clipped_logit(s), np.where(labels == 1, 1.0, -1.0)

        def loss(w, z=z, sign=sign):
            return float(np.mean(np.logaddexp(0.0, -sign * (w[0] * z + w[1]))))

        def gradient(w, z=z, labels=labels):
            r = sigmoid_np(w[0] * z + w[1]) - labels
            return np.array([np.mean(r * z), np.mean(r)])

        def hessian(w, z=z):
            p = sigmoid_np(w[0] * z + w[1])
            q = p * (1 - p)
            return np.array([[np.mean(q * z * z), np.mean(q * z)], [np.mean(q * z), np.mean(q)]])

        fixed = minimize(
            loss,
            [1.0, 0.0],
            jac=gradient,
            hess=hessian,
            method="trust-exact",
            options={"gtol": 1e-10},
        )
        stalled += not fixed.success
        assert check_platt(s, labels) == "fitted"
    assert stalled > 0
