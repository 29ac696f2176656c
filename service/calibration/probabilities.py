"""Stable probability maps: softmax and log-softmax over logits, sigmoid and logit for scores.

All logs are natural logs. Multiclass inputs are (N, K) float64 logits; binary inputs are (N,)
float64 scores (probabilities of the positive class) or log-odds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from service.calibration._checks import FloatArray, float_array, logit_matrix, positive_number

SCORE_CLIP = 1e-6


def log_softmax(logits: Any, temperature: float = 1.0) -> FloatArray:
    """Return (N, K) ``log softmax(z / T)``, computed as ``(z - max z) / T - log sum exp``."""
    z = logit_matrix(logits)
    T = positive_number(temperature, "temperature")
    out = z - z.max(axis=1, keepdims=True)
    if T != 1.0:
        out /= T
    out -= np.log(np.exp(out).sum(axis=1, keepdims=True))
    return out


def softmax(logits: Any, temperature: float = 1.0) -> FloatArray:
    """Return (N, K) ``softmax(z / T)``: rows sum to 1; the row max is subtracted before exp."""
    z = logit_matrix(logits)
    T = positive_number(temperature, "temperature")
    out = z - z.max(axis=1, keepdims=True)
    if T != 1.0:
        out /= T
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out


def sigmoid(x: Any) -> FloatArray:
    """Return ``1 / (1 + exp(-x))`` elementwise without overflow for large ``|x|``."""
    u = float_array(x, "x", np.ndim(x))
    return sigmoid_unchecked(u)


def sigmoid_unchecked(u: FloatArray) -> FloatArray:
    """Return the sigmoid of a finite float64 array, never exponentiating a positive number."""
    t = np.exp(-np.abs(u))
    return np.where(u >= 0.0, 1.0 / (1.0 + t), t / (1.0 + t))


def log_sigmoid(x: Any) -> FloatArray:
    """Return ``log sigmoid(x) = -log(1 + exp(-x))`` elementwise, stable for any finite x."""
    u = float_array(x, "x", np.ndim(x))
    return log_sigmoid_unchecked(u)


def log_sigmoid_unchecked(u: FloatArray) -> FloatArray:
    """Return ``log sigmoid(u)`` of a finite float64 array as ``min(u, 0) - log1p(exp(-|u|))``."""
    return np.minimum(u, 0.0) - np.log1p(np.exp(-np.abs(u)))


def logit(scores: Any) -> FloatArray:
    """Return ``log(s / (1 - s))`` with ``s`` first clipped to [1e-6, 1 - 1e-6]."""
    s = float_array(scores, "scores", np.ndim(scores))
    return logit_unchecked(s)


def logit_unchecked(s: FloatArray) -> FloatArray:
    """Return the clipped logit of a finite float64 array (see ``logit``)."""
    c = np.clip(s, SCORE_CLIP, 1.0 - SCORE_CLIP)
    return np.log(c) - np.log1p(-c)
