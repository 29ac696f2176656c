"""Multiclass calibrator families beyond temperature: vector, matrix and one-vs-rest isotonic.

Each maps (N, K) logits ``z`` to (N, K) calibrated logits ``z'`` with ``p = softmax(z')``.
Vector and matrix scaling act on the log-probabilities ``l = log softmax(z)``, so a per-row
shift of the logits changes nothing (as everywhere in calmon) and the matrix map is Dirichlet
calibration (Kull et al. 2019):

* ``VectorCalibrator(scale, bias)``: ``z'_k = scale_k l_k + bias_k`` (2K parameters);
* ``MatrixCalibrator(weights, bias)``: ``z' = W l + bias`` (K x K + K parameters);
* ``IsotonicOvRCalibrator(per_class)``: class k's probability ``softmax(z)_k`` through its own
  binary isotonic map, floored at ``ISOTONIC_FLOOR`` = 1e-6 (so every row's NLL stays finite)
  and the K values renormalised to sum to 1; ``z' = log p``.

Vector and matrix fits minimise the mean NLL (natural log) plus the off-diagonal and intercept
L2 penalty of Dirichlet calibration (ODIR): ``lambda sum_{i != j} W_ij^2 / (K (K - 1)) +
mu sum_k bias_k^2 / K`` with ``lambda = mu = ODIR_L2`` = 1e-3 (vector scaling has no
off-diagonal terms). Diagonal entries are unpenalised and bounded to ``|W_kk| <= MAX_SCALE``
= 100, which is where a fit on classes its inputs separate stops; off-diagonal entries are
bounded by the same value, biases by ``MAX_BIAS`` = 1e4. The fit is Newton's method with the
exact Hessian from the identity map (``W = I``, ``bias = 0``) to a largest gradient component
of 1e-10, finished by L-BFGS-B inside the bounds when the optimum lies beyond them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize

from service.calibration._checks import FloatArray, IntArray, class_labels, logit_matrix
from service.calibration._params import matrix, vector
from service.calibration.binary_families import IsotonicCalibrator
from service.calibration.errors import CalibrationInputError, FitError
from service.calibration.probabilities import log_softmax

MAX_SCALE = 100.0
MAX_BIAS = 1e4
ODIR_L2 = 1e-3
ISOTONIC_FLOOR = 1e-6
GTOL = 1e-10
NEWTON_STEPS = 100


def _fit_data(logits: Any, labels: Any) -> tuple[FloatArray, IntArray]:
    z = logit_matrix(logits)
    y = class_labels(labels, z.shape[0], z.shape[1])
    if z.shape[0] == 0:
        raise FitError("labels", "cannot fit a calibrator on zero rows")
    return z, y


def _nll_and_residual(scores: FloatArray, y: IntArray) -> tuple[float, FloatArray]:
    """Mean NLL of ``softmax(scores)`` and ``(p - onehot(y)) / N``."""
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


def odir_objective(
    weights: FloatArray, bias: FloatArray, features: FloatArray, y: IntArray
) -> float:
    """The regularised objective the fits minimise (module docstring): ``weights`` (K, K) or
    the (K,) diagonal of vector scaling, ``features`` the (N, K) log-probabilities."""
    K = bias.size
    if weights.ndim == 1:
        scores, off = features * weights + bias, 0.0
    else:
        scores = features @ weights.T + bias
        off = float((weights**2).sum() - (np.diag(weights) ** 2).sum()) / (K * (K - 1))
    nll, _ = _nll_and_residual(scores, y)
    return nll + ODIR_L2 * off + ODIR_L2 * float((bias**2).sum()) / K


def _penalty_weights(K: int, full: bool) -> FloatArray:
    """Per parameter ``r`` of the penalty ``0.5 sum r theta^2`` on the (K, d) parameter rows
    ``[W_k0 .. W_k(K-1), bias_k]`` (matrix) or ``[scale_k, bias_k]`` (vector)."""
    if full:
        r = np.full((K, K + 1), 2.0 * ODIR_L2 / (K * (K - 1)))
        r[np.arange(K), np.arange(K)] = 0.0
    else:
        r = np.zeros((K, 2))
    r[:, -1] = 2.0 * ODIR_L2 / K
    return r.ravel()


def _fit_odir(features: FloatArray, y: IntArray, full: bool) -> tuple[FloatArray, FloatArray]:
    """Minimise the regularised objective by Newton's method with the exact Hessian and a
    backtracking line search, to a largest gradient component of ``GTOL``; a solution outside
    the parameter bounds (classes the inputs separate) is finished by L-BFGS-B inside them."""
    N, K = features.shape
    d = K + 1 if full else 2
    ones = np.ones((N, 1))
    # Per-class features F (N, K, d): matrix shares [l, 1] across classes, vector uses [l_k, 1].
    shared = np.hstack([features, ones]) if full else None
    F = None if full else np.stack([features, np.broadcast_to(ones, (N, K))], axis=2)
    r = _penalty_weights(K, full)
    onehot = np.zeros((N, K))
    onehot[np.arange(N), y] = 1.0

    def scores(theta: FloatArray) -> FloatArray:
        t = theta.reshape(K, d)
        if shared is not None:
            return shared @ t.T
        assert F is not None
        return np.einsum("nkj,kj->nk", F, t)

    def value_grad(theta: FloatArray) -> tuple[float, FloatArray, FloatArray]:
        nll, residual = _nll_and_residual(scores(theta), y)
        if shared is not None:
            g = residual.T @ shared
        else:
            assert F is not None
            g = np.einsum("nk,nkj->kj", residual, F)
        value = nll + 0.5 * float((r * theta * theta).sum())
        return value, g.ravel() + r * theta, residual

    def hessian(theta: FloatArray, residual: FloatArray) -> FloatArray:
        p = residual * N + onehot
        if shared is not None:
            Z = (p[:, :, None] * shared[:, None, :]).reshape(N, K * d)
            blocks = np.stack([(shared * p[:, k, None]).T @ shared for k in range(K)])
        else:
            assert F is not None
            Z = (p[:, :, None] * F).reshape(N, K * d)
            blocks = np.stack([(F[:, k] * p[:, k, None]).T @ F[:, k] for k in range(K)])
        H = -(Z.T @ Z)
        for k in range(K):
            H[k * d : (k + 1) * d, k * d : (k + 1) * d] += blocks[k]
        H /= N
        H[np.diag_indices_from(H)] += r
        return H

    theta = (np.c_[np.eye(K), np.zeros(K)] if full else np.c_[np.ones(K), np.zeros(K)]).ravel()
    f, g, residual = value_grad(theta)
    for _ in range(NEWTON_STEPS):
        if float(np.abs(g).max()) <= GTOL:
            break
        H = hessian(theta, residual)
        step = np.linalg.lstsq(H, -g, rcond=None)[0]
        t = 1.0
        while True:
            f_new, g_new, res_new = value_grad(theta + t * step)
            if f_new <= f or t < 2.0**-30:
                break
            t *= 0.5
        if f_new > f:
            break
        theta, f, g, residual = theta + t * step, f_new, g_new, res_new
    limits = np.tile(np.r_[np.full(d - 1, MAX_SCALE), MAX_BIAS], K)
    if not np.isfinite(theta).all() or (np.abs(theta) > limits).any():
        res = minimize(
            lambda th: value_grad(th)[:2],
            np.clip(np.nan_to_num(theta), -limits, limits),
            jac=True,
            method="L-BFGS-B",
            bounds=list(zip(-limits, limits, strict=True)),
            options={"gtol": GTOL, "maxiter": 5000},
        )
        theta = np.asarray(res.x, dtype=np.float64)
    t = theta.reshape(K, d)
    return (t[:, :K] if full else t[:, 0]), t[:, -1]


@dataclass(frozen=True)
class VectorCalibrator:
    """``z'_k = scale_k log softmax(z)_k + bias_k`` (module docstring)."""

    scale: tuple[float, ...]
    bias: tuple[float, ...]

    @functools.cached_property
    def _arrays(self) -> tuple[FloatArray, FloatArray]:
        return np.asarray(self.scale, dtype=np.float64), np.asarray(self.bias, dtype=np.float64)

    def logits(self, z: FloatArray) -> FloatArray:
        a, b = self._arrays
        _check_width(z, a.size)
        out = log_softmax(z)
        out *= a
        out += b
        return out

    @property
    def parameters(self) -> int:
        return 2 * len(self.scale)

    def to_dict(self) -> dict[str, Any]:
        return {"method": "vector", "scale": list(self.scale), "bias": list(self.bias)}

    @classmethod
    def from_dict(cls, d: Any, field: str, K: int | None) -> VectorCalibrator:
        scale = vector(d["scale"], f"{field}.scale", -MAX_SCALE, MAX_SCALE, size=K, min_size=2)
        bias = vector(d["bias"], f"{field}.bias", -MAX_BIAS, MAX_BIAS, size=len(scale))
        return cls(scale, bias)

    @classmethod
    def fit(cls, logits: Any, labels: Any) -> VectorCalibrator:
        z, y = _fit_data(logits, labels)
        a, b = _fit_odir(log_softmax(z), y, full=False)
        return cls(tuple(a.tolist()), tuple(b.tolist()))


@dataclass(frozen=True)
class MatrixCalibrator:
    """``z' = W log softmax(z) + bias`` (module docstring); ``weights`` row-major K x K."""

    weights: tuple[tuple[float, ...], ...]
    bias: tuple[float, ...]

    @functools.cached_property
    def _arrays(self) -> tuple[FloatArray, FloatArray]:
        return np.asarray(self.weights, dtype=np.float64), np.asarray(self.bias, dtype=np.float64)

    def logits(self, z: FloatArray) -> FloatArray:
        w, b = self._arrays
        _check_width(z, b.size)
        # einsum, not a BLAS product: its thread start-up costs more than the product here.
        out = np.einsum("nk,jk->nj", log_softmax(z), w)
        out += b
        return out

    @property
    def parameters(self) -> int:
        K = len(self.bias)
        return K * K + K

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": "matrix",
            "weights": [list(row) for row in self.weights],
            "bias": list(self.bias),
        }

    @classmethod
    def from_dict(cls, d: Any, field: str, K: int | None) -> MatrixCalibrator:
        bias = vector(d["bias"], f"{field}.bias", -MAX_BIAS, MAX_BIAS, size=K, min_size=2)
        weights = matrix(d["weights"], f"{field}.weights", len(bias), -MAX_SCALE, MAX_SCALE)
        return cls(weights, bias)

    @classmethod
    def fit(cls, logits: Any, labels: Any) -> MatrixCalibrator:
        z, y = _fit_data(logits, labels)
        w, b = _fit_odir(log_softmax(z), y, full=True)
        return cls(tuple(tuple(row) for row in w.tolist()), tuple(b.tolist()))


@dataclass(frozen=True)
class IsotonicOvRCalibrator:
    """One binary isotonic map per class on ``softmax(z)_k``, renormalised (module docstring)."""

    per_class: tuple[IsotonicCalibrator, ...]

    def logits(self, z: FloatArray) -> FloatArray:
        _check_width(z, len(self.per_class))
        q = np.exp(log_softmax(z))
        for k, iso in enumerate(self.per_class):
            q[:, k] = iso.apply(q[:, k])
        np.maximum(q, ISOTONIC_FLOOR, out=q)
        q /= q.sum(axis=1, keepdims=True)
        return np.log(q)

    @property
    def parameters(self) -> int:
        return sum(iso.parameters for iso in self.per_class)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": "isotonic",
            "per_class": [{"x": list(i.x), "y": list(i.y)} for i in self.per_class],
        }

    @classmethod
    def from_dict(cls, d: Any, field: str, K: int | None) -> IsotonicOvRCalibrator:
        maps = d["per_class"]
        if not isinstance(maps, list | tuple) or len(maps) < 2 or (K and len(maps) != K):
            raise CalibrationInputError(
                f"{field}.per_class", f"must list one map per class ({K or '>= 2'})"
            )
        out = []
        for k, m in enumerate(maps):
            path = f"{field}.per_class[{k}]"
            if not isinstance(m, dict) or set(m) != {"x", "y"}:
                raise CalibrationInputError(path, "must be an object with x and y")
            out.append(IsotonicCalibrator.from_dict(m, path))
        return cls(tuple(out))

    @classmethod
    def fit(cls, logits: Any, labels: Any) -> IsotonicOvRCalibrator:
        z, y = _fit_data(logits, labels)
        q = np.exp(log_softmax(z))
        return cls(tuple(IsotonicCalibrator.fit(q[:, k], y == k) for k in range(z.shape[1])))


def _check_width(z: FloatArray, K: int) -> None:
    if z.shape[1] != K:
        raise CalibrationInputError("logits", f"the calibrator has K = {K}, got {z.shape[1]}")


MulticlassFamily = VectorCalibrator | MatrixCalibrator | IsotonicOvRCalibrator
