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

Vector and matrix fits minimise the mean NLL (natural log) plus an L2 penalty whose strength
is chosen by cross-validation inside the fit set (``odir``): Dirichlet calibration's
off-diagonal and intercept regularisation, and a term shrinking the diagonal towards its mean.
Parameters: ``|W_ij| <= MAX_SCALE`` = 100 and ``|bias_k| <= MAX_BIAS`` = 1e4.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.calibration._checks import FloatArray, IntArray, class_labels, logit_matrix
from service.calibration._params import matrix, vector
from service.calibration.binary_families import IsotonicCalibrator
from service.calibration.errors import CalibrationInputError, FitError
from service.calibration.odir import MAX_BIAS, MAX_SCALE, fit_odir
from service.calibration.probabilities import log_softmax

ISOTONIC_FLOOR = 1e-6


def _fit_data(logits: Any, labels: Any) -> tuple[FloatArray, IntArray]:
    z = logit_matrix(logits)
    y = class_labels(labels, z.shape[0], z.shape[1])
    if z.shape[0] == 0:
        raise FitError("labels", "cannot fit a calibrator on zero rows")
    return z, y


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
        fit = fit_odir(log_softmax(z), y, full=False)
        return cls(tuple(fit.weights.tolist()), tuple(fit.bias.tolist()))


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
        fit = fit_odir(log_softmax(z), y, full=True)
        return cls(tuple(tuple(row) for row in fit.weights.tolist()), tuple(fit.bias.tolist()))


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
