"""Fitting vector and matrix scaling: the regularised objective and its strength, chosen by
cross-validation inside the fit set.

Features are the (N, K) log-probabilities ``l = log softmax(z)``; the scores are
``W l + bias`` (matrix, ``W`` K x K) or ``scale * l + bias`` (vector, ``W = diag(scale)``).
The fits minimise, at strength ``s``,

    J_s = NLL + s (sum_{i != j} W_ij^2 / (K (K - 1)) + sum_k bias_k^2 / K
                   + sum_k (W_kk - mean_j W_jj)^2 / K)

with NLL the mean negative log-likelihood (natural log) of ``softmax(scores)``. The first two
terms are the off-diagonal and intercept regularisation of Dirichlet calibration (ODIR, Kull et
al. 2019); the third shrinks the diagonal towards its own mean, so that a strong penalty leaves
temperature scaling of ``l`` (``W = w I``, ``bias = 0``: one free parameter, the common scale,
which no term penalises). Vector scaling has no off-diagonal term.

The strength is chosen from ``STRENGTHS`` (1e4 down to 1e-2, one per decade) by ``CV_FOLDS`` =
5-fold cross-validation inside the fit set: folds from a permutation seeded with ``CV_SEED`` = 0
(so a fit is deterministic), each fold's path fitted from the strongest penalty to the weakest,
each fit starting from the previous one. The chosen strength is the strongest whose
out-of-fold mean NLL is within one standard error of the lowest one (the one-standard-error
rule, on the paired per-row differences from the lowest: the simplest map the data cannot tell
from the best), and the map is refitted on every row at it. The path stops once ``PATIENCE`` = 2
weaker strengths in a row have not improved on the lowest (the weakest penalties, where a small
fit set is separated, cost the most to fit). A fit set of
fewer than ``2 * CV_FOLDS`` rows takes the strongest penalty. The cross-validation fits stop at a
Newton decrement of ``CV_DECREMENT_TOL`` = 1e-9 relative (their out-of-fold NLL is then within
about 1e-9 of the optimum's); the final fit runs to the tolerances below.

Each fit is Newton's method with the exact Hessian and a backtracking line search from the
identity map (``W = I``, ``bias = 0``) or the warm start, to a largest gradient component of
``GTOL`` = 1e-10 or a Newton decrement ``-g' step`` (twice the predicted decrease) below
``DECREMENT_TOL`` = 1e-15 relative to the loss, where the loss no longer resolves a step. An
optimum beyond the parameter bounds (``|W_ij| <= MAX_SCALE`` = 100, ``|bias_k| <= MAX_BIAS`` =
1e4; a fit set the common scale separates) is finished inside them by scipy's L-BFGS-B.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from service.calibration._checks import FloatArray, IntArray

MAX_SCALE = 100.0
MAX_BIAS = 1e4
STRENGTHS = tuple(10.0**e for e in range(4, -3, -1))
CV_FOLDS = 5
CV_SEED = 0
PATIENCE = 2
GTOL = 1e-10
DECREMENT_TOL = 1e-15
CV_DECREMENT_TOL = 1e-9
NEWTON_STEPS = 100


def fold_of_rows(n: int, folds: int, seed: int) -> IntArray:
    """The (n,) fold index of each row: a seeded permutation dealt round-robin."""
    fold = np.empty(n, dtype=np.int64)
    fold[np.random.default_rng(seed).permutation(n)] = np.arange(n) % folds
    return fold


def nll_and_residual(scores: FloatArray, y: IntArray) -> tuple[float, FloatArray]:
    """Mean NLL of ``softmax(scores)`` for (N, K) scores and (N,) labels, and the (N, K)
    ``(p - onehot(y)) / N``."""
    n = y.size
    shifted = scores - scores.max(axis=1, keepdims=True)
    p = np.exp(shifted)
    total = p.sum(axis=1)
    p /= total[:, None]
    rows = np.arange(n)
    nll = float((np.log(total) - shifted[rows, y]).sum() / n)
    p[rows, y] -= 1.0
    p /= n
    return nll, p


def penalty(weights: FloatArray, bias: FloatArray, strength: float) -> float:
    """The penalty of ``J_s`` (module docstring): ``weights`` (K, K), or the (K,) diagonal of
    vector scaling, and (K,) ``bias``."""
    K = bias.size
    diag = np.diag(weights) if weights.ndim == 2 else weights
    off = 0.0
    if weights.ndim == 2:
        off = float((weights**2).sum() - (diag**2).sum()) / (K * (K - 1))
    spread = float(((diag - diag.mean()) ** 2).sum()) / K
    return strength * (off + float((bias**2).sum()) / K + spread)


def objective(
    weights: FloatArray, bias: FloatArray, features: FloatArray, y: IntArray, strength: float
) -> float:
    """``J_s`` (module docstring) for ``features`` the (N, K) log-probabilities."""
    scores = features * weights + bias if weights.ndim == 1 else features @ weights.T + bias
    return nll_and_residual(scores, y)[0] + penalty(weights, bias, strength)


def _penalty_matrix(K: int, full: bool, strength: float) -> FloatArray:
    """``R`` with ``penalty = 0.5 theta' R theta`` over the parameters ``theta``: the (K, d)
    rows ``[W_k0 .. W_k(K-1), bias_k]`` (matrix, d = K + 1) or ``[scale_k, bias_k]`` (vector,
    d = 2), flattened."""
    d = K + 1 if full else 2
    r = np.zeros((K, d))
    if full:
        r[:, :K] = 2.0 * strength / (K * (K - 1))
        r[np.arange(K), np.arange(K)] = 0.0
    r[:, -1] = 2.0 * strength / K
    R = np.diag(r.ravel())
    diag = np.arange(K) * d + (np.arange(K) if full else 0)
    R[np.ix_(diag, diag)] += 2.0 * strength / K * (np.eye(K) - 1.0 / K)
    return R


class _Problem:
    """The objective of one feature set, with its gradient and exact Hessian in ``theta``."""

    def __init__(self, features: FloatArray, y: IntArray, full: bool) -> None:
        N, K = features.shape
        self.N, self.K, self.full = N, K, full
        self.d = K + 1 if full else 2
        self.y = y
        ones = np.ones((N, 1))
        # Per-class features: matrix shares [l, 1] across classes, vector uses [l_k, 1].
        self.shared = np.hstack([features, ones]) if full else None
        self.F = None if full else np.stack([features, np.broadcast_to(ones, (N, K))], axis=2)
        self.onehot = np.zeros((N, K))
        self.onehot[np.arange(N), y] = 1.0
        self.R = np.zeros((K * self.d, K * self.d))

    def scores(self, theta: FloatArray) -> FloatArray:
        t = theta.reshape(self.K, self.d)
        if self.shared is not None:
            return self.shared @ t.T
        assert self.F is not None
        return np.einsum("nkj,kj->nk", self.F, t)

    def value_grad(self, theta: FloatArray) -> tuple[float, FloatArray, FloatArray]:
        nll, residual = nll_and_residual(self.scores(theta), self.y)
        if self.shared is not None:
            g = residual.T @ self.shared
        else:
            assert self.F is not None
            g = np.einsum("nk,nkj->kj", residual, self.F)
        Rt = self.R @ theta
        return nll + 0.5 * float(theta @ Rt), g.ravel() + Rt, residual

    def hessian(self, residual: FloatArray) -> FloatArray:
        N, K, d = self.N, self.K, self.d
        p = residual * N + self.onehot
        if self.shared is not None:
            X = self.shared
            Z = (p[:, :, None] * X[:, None, :]).reshape(N, K * d)
            blocks = np.stack([(X * p[:, k, None]).T @ X for k in range(K)])
        else:
            assert self.F is not None
            Z = (p[:, :, None] * self.F).reshape(N, K * d)
            blocks = np.stack([(self.F[:, k] * p[:, k, None]).T @ self.F[:, k] for k in range(K)])
        H = -(Z.T @ Z)
        for k in range(K):
            H[k * d : (k + 1) * d, k * d : (k + 1) * d] += blocks[k]
        H /= N
        H += self.R
        return H

    def identity(self) -> FloatArray:
        K = self.K
        return (
            np.c_[np.eye(K), np.zeros(K)] if self.full else np.c_[np.ones(K), np.zeros(K)]
        ).ravel()

    def minimise(
        self, strength: float, start: FloatArray, decrement_tol: float = DECREMENT_TOL
    ) -> FloatArray:
        """``theta`` minimising ``J_s`` from ``start`` (module docstring)."""
        self.R = _penalty_matrix(self.K, self.full, strength)
        theta = start
        f, g, residual = self.value_grad(theta)
        for _ in range(NEWTON_STEPS):
            if float(np.abs(g).max()) <= GTOL:
                break
            H = self.hessian(residual)
            try:
                step = np.linalg.solve(H, -g)
            except np.linalg.LinAlgError:
                step = np.linalg.lstsq(H, -g, rcond=None)[0]
            if 0.0 <= -float(g @ step) <= decrement_tol * max(1.0, abs(f)):
                theta = theta + step  # within rounding of the optimum: the last step
                break
            t = 1.0
            while True:
                f_new, g_new, res_new = self.value_grad(theta + t * step)
                if f_new <= f or t < 2.0**-30:
                    break
                t *= 0.5
            if f_new > f:
                break
            theta, f, g, residual = theta + t * step, f_new, g_new, res_new
        limits = np.tile(np.r_[np.full(self.d - 1, MAX_SCALE), MAX_BIAS], self.K)
        if not np.isfinite(theta).all() or (np.abs(theta) > limits).any():
            res = minimize(
                lambda th: self.value_grad(th)[:2],
                np.clip(np.nan_to_num(theta), -limits, limits),
                jac=True,
                method="L-BFGS-B",
                bounds=list(zip(-limits, limits, strict=True)),
                options={"gtol": GTOL, "maxiter": 5000},
            )
            theta = np.asarray(res.x, dtype=np.float64)
        return theta

    def split(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        t = theta.reshape(self.K, self.d)
        return (t[:, : self.K] if self.full else t[:, 0]), t[:, -1]


@dataclass(frozen=True)
class OdirFit:
    """A fitted map: ``weights`` (K, K) or the (K,) vector scale, (K,) ``bias``, the chosen
    ``strength`` and each strength's out-of-fold mean NLL (empty when the fit set was too small
    to cross-validate)."""

    weights: FloatArray
    bias: FloatArray
    strength: float
    out_of_fold_nll: dict[float, float]


def fit_at(features: FloatArray, y: IntArray, full: bool, strength: float) -> OdirFit:
    """The map minimising ``J_s`` at the given strength on every row, from the identity."""
    problem = _Problem(features, y, full)
    w, b = problem.split(problem.minimise(strength, problem.identity()))
    return OdirFit(w, b, strength, {})


def fit_odir(features: FloatArray, y: IntArray, full: bool) -> OdirFit:
    """The map at the strength chosen by cross-validation (module docstring) for (N, K)
    log-probabilities ``features`` and (N,) labels."""
    n = y.size
    if n < 2 * CV_FOLDS:
        return fit_at(features, y, full, STRENGTHS[0])
    fold = fold_of_rows(n, CV_FOLDS, CV_SEED)
    paths = []
    for f in range(CV_FOLDS):
        train, held = fold != f, fold == f
        problem = _Problem(features[train], y[train], full)
        paths.append((problem, problem.identity(), _Problem(features[held], y[held], full)))
    rows: dict[float, FloatArray] = {}  # each strength's per-row out-of-fold NLL
    best = STRENGTHS[0]
    for strength in STRENGTHS:
        row_nll = np.empty(n)
        for f, (problem, theta, heldout) in enumerate(paths):
            theta = problem.minimise(strength, theta, CV_DECREMENT_TOL)
            paths[f] = (problem, theta, heldout)
            row_nll[fold == f] = _row_nll(heldout.scores(theta), heldout.y)
        rows[strength] = row_nll
        if row_nll.mean() < rows[best].mean():
            best = strength
        if len(rows) - list(rows).index(best) > PATIENCE:
            break
    chosen_strength = next(s for s in rows if _within_one_se(rows[s], rows[best]))
    chosen = fit_at(features, y, full, chosen_strength)
    losses = {s: float(v.mean()) for s, v in rows.items()}
    return OdirFit(chosen.weights, chosen.bias, chosen_strength, losses)


def _row_nll(scores: FloatArray, y: IntArray) -> FloatArray:
    """The (N,) NLL of each row of ``softmax(scores)``."""
    shifted = scores - scores.max(axis=1, keepdims=True)
    return np.log(np.exp(shifted).sum(axis=1)) - shifted[np.arange(y.size), y]


def _within_one_se(candidate: FloatArray, best: FloatArray) -> bool:
    """Whether the mean of the per-row differences ``candidate - best`` is at most one
    standard error (``sd / sqrt(n)``) above 0."""
    d = candidate - best
    return float(d.mean()) <= float(d.std(ddof=1)) / np.sqrt(d.size)
