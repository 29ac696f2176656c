"""Labeled data whose true calibration is known: the yardstick for calmon's decision rules.

Two families, both with a true binned ECE (15 equal-width bins) known to about 1e-4:

* binary: scores ``p ~ Beta(2, 5)``, outcomes ``y ~ Bernoulli(sigmoid(a * logit(p)))``; a = 1
  is perfectly calibrated, a < 1 over-confident;
* multiclass: K = 10 logits ``z ~ N(0, 2.5^2)`` per class, labels ``y ~ softmax(z / t)``; t = 1
  is perfectly calibrated, t > 1 over-confident.

``SCENARIOS`` holds the distortion giving each target ECE and the true ECE it gives, measured
once on 4 million rows without label noise (each row's probability of success is known, so the
bin gaps are exact means): ``tests/unit/test_simulation.py`` re-measures them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from service.calibration._checks import FloatArray, IntArray
from service.calibration.binning import bin_index, default_edges

BINS = 15
CLASSES = 10
LOGIT_SCALE = 2.5


@dataclass(frozen=True)
class Scenario:
    """A data-generating process: ``task``, its ``distortion`` (a or t above), the true ECE."""

    task: str
    distortion: float
    true_ece: float

    def draw(self, rng: np.random.Generator, n: int) -> tuple[FloatArray, IntArray]:
        """``n`` rows: (N,) scores or (N, K) logits, and (N,) labels."""
        inputs, success = self.draw_with_truth(rng, n)
        if self.task == "binary":
            return inputs, (rng.random(n) < success).astype(np.int64)
        cumulative = np.cumsum(success, axis=1)
        labels = (rng.random(n)[:, None] > cumulative).sum(axis=1)
        return inputs, np.minimum(labels, CLASSES - 1).astype(np.int64)

    def draw_with_truth(self, rng: np.random.Generator, n: int) -> tuple[FloatArray, FloatArray]:
        """``n`` rows and each row's true probabilities: P(y = 1) (binary), P(y = k) (N, K)."""
        if self.task == "binary":
            p = np.clip(rng.beta(2.0, 5.0, n), 1e-9, 1.0 - 1e-9)
            log_odds = np.log(p) - np.log1p(-p)
            return p, 1.0 / (1.0 + np.exp(-self.distortion * log_odds))
        z = rng.normal(size=(n, CLASSES)) * LOGIT_SCALE
        shifted = (z - z.max(axis=1, keepdims=True)) / self.distortion
        truth = np.exp(shifted)
        truth /= truth.sum(axis=1, keepdims=True)
        return z, truth


def measured_ece(scenario: Scenario, rng: np.random.Generator, n: int) -> float:
    """The binned ECE of ``n`` rows with each row's success probability in place of labels."""
    inputs, truth = scenario.draw_with_truth(rng, n)
    if scenario.task == "binary":
        confidence, success = inputs, truth
    else:
        shifted = inputs - inputs.max(axis=1, keepdims=True)
        confidence = 1.0 / np.exp(shifted).sum(axis=1)
        success = truth[np.arange(n), inputs.argmax(axis=1)]
    edges = default_edges(BINS)
    bins = bin_index(confidence, edges, True)
    return float(np.abs(np.bincount(bins, weights=confidence - success, minlength=BINS)).sum() / n)


SCENARIOS: dict[tuple[str, float], Scenario] = {
    ("binary", 0.0): Scenario("binary", 1.0, 0.0),
    ("binary", 0.02): Scenario("binary", 0.8794850237639632, 0.019994),
    ("binary", 0.05): Scenario("binary", 0.7192637533788566, 0.049983),
    ("binary", 0.10): Scenario("binary", 0.49124362432248564, 0.099966),
    ("multiclass", 0.0): Scenario("multiclass", 1.0, 0.0),
    ("multiclass", 0.02): Scenario("multiclass", 1.0642503476510823, 0.019994),
    ("multiclass", 0.05): Scenario("multiclass", 1.1662997090622143, 0.049985),
    ("multiclass", 0.10): Scenario("multiclass", 1.3553751269925955, 0.099967),
}
