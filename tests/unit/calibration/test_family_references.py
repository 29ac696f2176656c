"""The calibrator families agree with their reference implementations on scikit-learn's
breast_cancer, digits and wine sets (scores of a Gaussian naive Bayes model, badly calibrated)
and on seeded simulations: isotonic with ``IsotonicRegression(out_of_bounds="clip")`` to 1e-9,
beta with the ``betacal`` package to 1e-5 in probability, vector and matrix scaling with the
regularised objective minimised by an independent scipy optimiser to 1e-6."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import log_softmax as scipy_log_softmax
from scipy.special import logsumexp
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB

from service.calibration.binary_families import BetaCalibrator, IsotonicCalibrator
from service.calibration.multiclass_families import (
    IsotonicOvRCalibrator,
    MatrixCalibrator,
    VectorCalibrator,
)
from service.calibration.odir import MAX_BIAS, MAX_SCALE, STRENGTHS, fit_odir, objective
from service.calibration.probabilities import log_softmax


def _model_outputs(loader) -> tuple[np.ndarray, np.ndarray]:
    """Log-probabilities of a naive Bayes model fitted on one half, for the other half."""
    X, y = loader(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    half = len(y) // 2
    model = GaussianNB(var_smoothing=1e-3).fit(X[:half], y[:half])
    return model.predict_log_proba(X[half:]), y[half:]


def _binary_sets():
    logp, y = _model_outputs(load_breast_cancer)
    yield "breast_cancer", np.exp(logp[:, 1]), y
    rng = np.random.default_rng(3)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        s = rng.beta(0.6, 0.9, size=2000)
        truth = s**3 / (s**3 + (1 - s) ** 0.5)
        yield f"simulated-{seed}", s, (rng.random(2000) < truth).astype(int)
    s = np.round(rng.random(1500), 2)  # many ties
    yield "ties", s, (rng.random(1500) < s).astype(int)


BINARY = list(_binary_sets())


@pytest.mark.parametrize(("name", "scores", "labels"), BINARY, ids=[b[0] for b in BINARY])
def test_isotonic_equals_scikit_learn(name, scores, labels):
    ours = IsotonicCalibrator.fit(scores, labels)
    ref = IsotonicRegression(out_of_bounds="clip").fit(scores, labels)
    grid = np.r_[scores, np.linspace(0, 1, 1001)]
    assert np.abs(ours.apply(grid) - ref.predict(grid)).max() <= 1e-9
    assert np.allclose(ours.x, ref.X_thresholds_, rtol=0, atol=1e-15)


@pytest.mark.parametrize("loader", [load_digits, load_wine], ids=["digits", "wine"])
def test_one_vs_rest_isotonic_maps_equal_scikit_learn_per_class(loader):
    logp, y = _model_outputs(loader)
    ours = IsotonicOvRCalibrator.fit(logp, y)
    q = np.exp(scipy_log_softmax(logp, axis=1))
    for k, iso in enumerate(ours.per_class):
        ref = IsotonicRegression(out_of_bounds="clip").fit(q[:, k], y == k)
        assert np.abs(iso.apply(q[:, k]) - ref.predict(q[:, k])).max() <= 1e-9
    p = np.exp(ours.logits(logp))
    assert np.allclose(p.sum(axis=1), 1.0, atol=1e-12)


def _log_loss(p, labels):
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(np.where(labels == 1, np.log(p), np.log1p(-p))))


def _precise_betacal(scores, labels):
    """betacal's procedure (features ``ln s`` and ``-ln(1 - s)``, a negative coefficient's
    feature dropped and the rest refitted) with an unpenalised logistic regression solved to
    1e-12 instead of betacal's nearly unpenalised L-BFGS at tolerance 1e-4."""
    c = np.clip(scores, np.finfo(float).eps, 1 - np.finfo(float).eps)
    X = np.column_stack([np.log(c), -np.log1p(-c)])

    def fit(cols):
        lr = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12, max_iter=500)
        return lr.fit(X[:, cols], labels)

    lr, cols = fit([0, 1]), [0, 1]
    if lr.coef_[0][0] < 0:
        lr, cols = fit([1]), [1]
    elif lr.coef_[0][1] < 0:
        lr, cols = fit([0]), [0]
    return lambda s: lr.predict_proba(
        np.column_stack([np.log(np.clip(s, 2e-16, 1)), -np.log1p(-np.clip(s, 0, 1 - 2e-16))])[
            :, cols
        ]
    )[:, 1]


@pytest.mark.parametrize(("name", "scores", "labels"), BINARY, ids=[b[0] for b in BINARY])
def test_beta_equals_betacal(name, scores, labels):
    betacal = pytest.importorskip("betacal")
    ours = BetaCalibrator.fit(scores, labels)
    grid = np.r_[scores, np.linspace(0, 1, 1001)]
    precise = _precise_betacal(scores, labels)
    assert np.abs(ours.apply(grid) - precise(grid)).max() <= 1e-5
    ref = betacal.BetaCalibration(parameters="abm").fit(scores, labels)
    # betacal stops its optimiser early (tolerance 1e-4): within 1e-3, at no lower a loss.
    assert np.abs(ours.apply(grid) - ref.predict(grid)).max() <= 1e-3
    assert _log_loss(ours.apply(scores), labels) <= _log_loss(ref.predict(scores), labels) + 1e-12
    assert ours.a >= 0 and ours.b >= 0


def _multiclass_sets():
    for loader in (load_digits, load_wine):
        logp, y = _model_outputs(loader)
        yield loader.__name__.removeprefix("load_"), logp, y
    for seed in range(2):
        rng = np.random.default_rng(10 + seed)
        K, N = 4, 1500
        z = rng.normal(size=(N, K)) * 2.0
        truth = np.exp(0.5 * z + rng.normal(size=K) * 0.5)
        truth /= truth.sum(axis=1, keepdims=True)
        yield f"simulated-{seed}", z, np.array([rng.choice(K, p=row) for row in truth])


MULTICLASS = list(_multiclass_sets())


def _reference_objective(theta, features, y, full, strength):
    """The regularised objective and its gradient written independently: mean NLL by
    logsumexp plus the off-diagonal, intercept and diagonal-spread penalties."""
    N, K = features.shape
    onehot = np.eye(K)[y]
    if full:
        W, b = theta[: K * K].reshape(K, K), theta[K * K :]
        scores = features @ W.T + b
        off_mask = 1.0 - np.eye(K)
        penalty = strength * ((W * off_mask) ** 2).sum() / (K * (K - 1))
        diag = np.diag(W)
    else:
        a, b = theta[:K], theta[K:]
        scores = features * a + b
        penalty = 0.0
        diag = a
    centred = diag - diag.mean()
    penalty += strength * ((b**2).sum() + (centred**2).sum()) / K
    lse = logsumexp(scores, axis=1)
    nll = np.mean(lse - scores[np.arange(N), y])
    delta = (np.exp(scores - lse[:, None]) - onehot) / N
    grad_b = delta.sum(axis=0) + 2 * strength * b / K
    grad_diag = 2 * strength * centred / K
    if full:
        grad_w = delta.T @ features + 2 * strength * W * off_mask / (K * (K - 1))
        grad_w[np.arange(K), np.arange(K)] += grad_diag
    else:
        grad_w = (delta * features).sum(axis=0) + grad_diag
    return nll + penalty, np.r_[grad_w.ravel(), grad_b]


@pytest.mark.parametrize(
    "full", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["vector", "matrix"]
)
@pytest.mark.parametrize(("name", "logits", "labels"), MULTICLASS, ids=[m[0] for m in MULTICLASS])
def test_vector_and_matrix_reach_the_reference_optimum(name, logits, labels, full):
    features = log_softmax(logits)
    K = features.shape[1]
    fitted = (MatrixCalibrator if full else VectorCalibrator).fit(logits, labels)
    weights, bias = (np.asarray(v, dtype=float) for v in fitted._arrays)
    strength = fit_odir(features, labels, full).strength
    assert strength in STRENGTHS
    ours = objective(weights, bias, features, labels, strength)
    theta = np.r_[weights.ravel(), bias]
    reference = _reference_objective(theta, features, labels, full, strength)[0]
    assert ours == pytest.approx(reference, abs=1e-12)
    size = K * K if full else K
    assert np.abs(weights).max() < MAX_SCALE and np.abs(bias).max() < MAX_BIAS  # interior
    start = np.zeros(size + K)  # a different start from the fit's
    ref = minimize(
        _reference_objective,
        start,
        args=(features, labels, full, strength),
        jac=True,
        method="BFGS",
        options={"gtol": 1e-9, "maxiter": 20000},
    )
    assert ours <= ref.fun + 1e-6
    assert ours == pytest.approx(ref.fun, abs=1e-6)


def test_fitted_vector_and_matrix_maps_beat_the_identity_on_their_fit_set():
    _, logits, labels = MULTICLASS[2]
    features = log_softmax(logits)
    K = features.shape[1]
    for cls, full in ((VectorCalibrator, False), (MatrixCalibrator, True)):
        strength = fit_odir(features, labels, full).strength
        identity = objective(
            np.ones(K) if not full else np.eye(K), np.zeros(K), features, labels, strength
        )
        w, b = cls.fit(logits, labels)._arrays
        assert objective(np.asarray(w), np.asarray(b), features, labels, strength) < identity - 0.01
