"""Labeled data whose true calibration is known: the yardstick for calmon's decision rules.

A scenario is a **population** (what the model's confidences look like, on which reliability
bins), a **shape** of miscalibration and an **amplitude**. Every row carries its confidence ``c``
(binary: the score, P(positive); multiclass: the top-label softmax probability) and its true
probability of success ``q`` (binary: of a positive; multiclass: that the top label is right);
the true binned ECE of the population is ``sum_m |E[(c - q) 1{c in bin m}]|``, measured on 4
million rows with ``q`` in place of the labels (so bin gaps are exact means, known to about 1e-4).

Shapes (the gap ``delta(c) = c - q`` they put into the population, clipped so ``q`` stays in
[0, 1]; ``sign`` is the population's direction of room, ``+1`` over-prediction):

* ``constant``: ``delta = sign * A`` everywhere;
* ``overconfident`` / ``underconfident``: a temperature misfit, ``q = sigmoid(logit(c) / T)``
  (binary) or labels drawn from ``softmax(z / T)`` (multiclass), with ``T = 1 + A`` (the model is
  over-confident) or ``T = 1 / (1 + A)`` (under-confident);
* ``one_bin``: ``delta = sign_m * A`` inside one bin only (the one with the most room,
  ``pi_m * max(c_m, 1 - c_m)``), calibrated elsewhere;
* ``alternating``: ``delta = (-1)^m * A`` in bin m, so signed gaps cancel across bins;
* ``prevalence`` (two-class multiclass only): the true log-odds of class 1 are shifted by ``A``,
  an error the positive-class reliability diagram shows and the top-label one folds away.

The ``prevalence`` scenarios' true ECE is that of the positive-class view (class 1's
probability against ``1{y = 1}``), the one their error shows in.

``SCENARIOS`` maps ``(population, shape, target ECE)`` to the amplitude that gives it, found once
by root finding on the 4-million-row measure (``solve_amplitude``) and re-measured by the tests.
Multiclass labels other than the top one are drawn in proportion to the model's own
probabilities of the other classes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from service.calibration._checks import FloatArray, IntArray
from service.calibration.binning import bin_index, default_edges, is_equal_width
from service.calibration.vocabulary import Task

#: The default policy's max_ece; scenario targets are multiples of it.
MAX_ECE = 0.05
#: Target true ECEs as multiples of ``MAX_ECE``.
LEVELS = (0.0, 0.5, 0.9, 1.0, 2.0)
SHAPES = ("constant", "overconfident", "underconfident", "one_bin", "alternating")
TRUTH_ROWS = 4_000_000
_TRUTH_SEED = 20261201
_CLIP = 1e-9


@dataclass(frozen=True)
class Population:
    """The confidences a model produces and the reliability bins they are read on.

    Binary: scores from a mixture of Beta distributions ``components`` of ``(weight, a, b)``.
    Multiclass: ``classes`` logits i.i.d. ``N(0, logit_scale^2)`` per row. ``sign`` is the
    direction of the ``constant`` shape (+1: the model over-predicts).
    """

    name: str
    task: str
    edges: tuple[float, ...]
    classes: int = 2
    components: tuple[tuple[float, float, float], ...] = ()
    logit_scale: float = 0.0
    sign: float = 1.0

    @property
    def edge_array(self) -> FloatArray:
        return np.asarray(self.edges, dtype=np.float64)

    def draw_inputs(self, rng: np.random.Generator, n: int) -> tuple[FloatArray, FloatArray]:
        """``n`` rows of model inputs ((N,) scores or (N, K) logits) and their confidences."""
        if self.task == Task.BINARY:
            weights = np.array([w for w, _, _ in self.components])
            pick = rng.choice(len(self.components), size=n, p=weights / weights.sum())
            a = np.array([c[1] for c in self.components])[pick]
            b = np.array([c[2] for c in self.components])[pick]
            s = np.clip(rng.beta(a, b), _CLIP, 1.0 - _CLIP)
            return s, s
        z = rng.normal(size=(n, self.classes)) * self.logit_scale
        shifted = z - z.max(axis=1, keepdims=True)
        return z, 1.0 / np.exp(shifted).sum(axis=1)


def _beta(*parts: tuple[float, float, float]) -> tuple[tuple[float, float, float], ...]:
    return tuple(parts)


_FINE_LOW = (0.0, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 1.0)
_UNEVEN = (0.0, 0.1, 0.45, 0.6, 0.8, 0.95, 1.0)
_EQUAL = tuple(float(e) for e in default_edges(15))
#: Three narrow modes centred in equal-width bins 3, 8 and 12 of 15: three occupied bins.
_FEW = _beta((0.4, 350.0, 1150.0), (0.35, 850.0, 650.0), (0.25, 1250.0, 250.0))

POPULATIONS: dict[str, Population] = {
    p.name: p
    for p in (
        Population("beta25", "binary", _EQUAL, components=_beta((1.0, 2.0, 5.0))),
        Population("confident_binary", "binary", _EQUAL, components=_beta((1.0, 14.0, 1.2))),
        Population(
            "bimodal", "binary", _EQUAL, components=_beta((0.5, 2.0, 10.0), (0.5, 10.0, 2.0))
        ),
        Population(
            "few_bins",
            "binary",
            _EQUAL,
            components=_FEW,
        ),
        Population(
            "few_bins_uneven",
            "binary",
            _UNEVEN,
            components=_FEW,
        ),
        Population(
            "imbalanced", "binary", _FINE_LOW, components=_beta((1.0, 0.6, 29.4)), sign=-1.0
        ),
        Population("k10", "multiclass", _EQUAL, classes=10, logit_scale=2.5),
        Population("confident_k10", "multiclass", _EQUAL, classes=10, logit_scale=6.0),
        Population("k100", "multiclass", _EQUAL, classes=100, logit_scale=3.0),
        Population("two_class", "multiclass", _EQUAL, classes=2, logit_scale=1.5),
    )
}


def _bins_of(values: FloatArray, edges: FloatArray) -> IntArray:
    return bin_index(values, edges, is_equal_width(edges))


def _logit(p: FloatArray) -> FloatArray:
    p = np.clip(p, _CLIP, 1.0 - _CLIP)
    return np.log(p) - np.log1p(-p)


def _sigmoid(u: FloatArray) -> FloatArray:
    return 0.5 * (1.0 + np.tanh(0.5 * u))


def _softmax(z: FloatArray, temperature: float) -> FloatArray:
    shifted = (z - z.max(axis=1, keepdims=True)) / temperature
    e = np.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class Scenario:
    """A population with one shape of miscalibration at amplitude ``amplitude`` (0: calibrated).

    ``true_ece`` is the population's binned ECE on its own edges (``SCENARIOS`` holds it as
    measured on ``TRUTH_ROWS`` rows; 0 exactly for amplitude 0).
    """

    population: Population
    shape: str
    amplitude: float
    true_ece: float = float("nan")

    @property
    def task(self) -> str:
        return self.population.task

    @property
    def edges(self) -> FloatArray:
        return self.population.edge_array

    def draw(self, rng: np.random.Generator, n: int) -> tuple[FloatArray, IntArray]:
        """``n`` labeled rows: (N,) scores or (N, K) logits, and (N,) labels."""
        inputs, confidence = self.population.draw_inputs(rng, n)
        return inputs, self._labels(rng, inputs, confidence)

    def draw_with_truth(self, rng: np.random.Generator, n: int) -> tuple[FloatArray, FloatArray]:
        """``n`` rows' confidences and each row's true probability of success."""
        inputs, confidence = self.population.draw_inputs(rng, n)
        return confidence, self._success(inputs, confidence)

    def positive_class_truth(
        self, rng: np.random.Generator, n: int
    ) -> tuple[FloatArray, FloatArray]:
        """Two-class rows' P(class 1) by the model and in truth (the positive-class view)."""
        z, _ = self.population.draw_inputs(rng, n)
        shift = self.amplitude if self.shape == "prevalence" else 0.0
        return _sigmoid(z[:, 1] - z[:, 0]), _sigmoid(z[:, 1] - z[:, 0] + shift)

    def _success(self, inputs: FloatArray, confidence: FloatArray) -> FloatArray:
        """P(success) per row: of a positive (binary), of the top label being right."""
        A, shape = self.amplitude, self.shape
        if A == 0.0:
            return confidence.copy()
        if shape in ("overconfident", "underconfident"):
            T = 1.0 + A if shape == "overconfident" else 1.0 / (1.0 + A)
            if self.task == Task.BINARY:
                return _sigmoid(_logit(confidence) / T)
            truth = _softmax(inputs, T)
            return truth[np.arange(len(truth)), inputs.argmax(axis=1)]
        if shape == "prevalence":
            truth_positive = _sigmoid(inputs[:, 1] - inputs[:, 0] + A)
            top = inputs.argmax(axis=1)
            return np.where(top == 1, truth_positive, 1.0 - truth_positive)
        gap = _shape_gaps(self.population, shape)[_bins_of(confidence, self.edges)]
        return np.clip(confidence - A * gap, 0.0, 1.0)

    def _labels(
        self, rng: np.random.Generator, inputs: FloatArray, confidence: FloatArray
    ) -> IntArray:
        success = self._success(inputs, confidence)
        hit = rng.random(len(success)) < success
        if self.task == Task.BINARY:
            return hit.astype(np.int64)
        top = inputs.argmax(axis=1)
        others = _softmax(inputs, 1.0)
        others[np.arange(len(top)), top] = 0.0
        cumulative = np.cumsum(others, axis=1)
        total = cumulative[:, -1:]
        draw = rng.random(len(top))[:, None] * np.where(total > 0.0, total, 1.0)
        other = np.minimum((draw > cumulative).sum(axis=1), self.population.classes - 1)
        other = np.where(other == top, (top + 1) % self.population.classes, other)
        return np.where(hit, top, other).astype(np.int64)


def _shape_gaps(population: Population, shape: str) -> FloatArray:
    """Per-bin unit gaps (M,) of the bin-defined shapes; multiplied by the amplitude."""
    M = len(population.edges) - 1
    if shape == "constant":
        return np.full(M, population.sign)
    if shape == "alternating":
        return np.where(np.arange(M) % 2 == 0, 1.0, -1.0) * population.sign
    if shape == "one_bin":
        share, mean = _bin_occupancy(population)
        room = share * np.maximum(mean, 1.0 - mean)
        gaps = np.zeros(M)
        chosen = int(np.argmax(room))
        gaps[chosen] = 1.0 if mean[chosen] >= 0.5 else -1.0
        return gaps
    raise ValueError(f"unknown shape {shape!r}")


_OCCUPANCY: dict[str, tuple[FloatArray, FloatArray]] = {}


def _bin_occupancy(population: Population) -> tuple[FloatArray, FloatArray]:
    """Each bin's share of rows and mean confidence (400,000 rows, fixed seed; cached)."""
    if population.name not in _OCCUPANCY:
        rng = np.random.default_rng([_TRUTH_SEED, 0])
        _, c = population.draw_inputs(rng, 400_000)
        bins = _bins_of(c, population.edge_array)
        M = len(population.edges) - 1
        count = np.bincount(bins, minlength=M).astype(np.float64)
        total = np.bincount(bins, weights=c, minlength=M)
        mean = np.divide(total, count, out=np.full(M, 0.5), where=count > 0)
        _OCCUPANCY[population.name] = (count / count.sum(), mean)
    return _OCCUPANCY[population.name]


def truth_rows(population: Population) -> int:
    """Rows the true ECE is measured on: ``TRUTH_ROWS``, fewer for many classes (K = 100:
    400,000)."""
    return TRUTH_ROWS // max(1, population.classes // 10)


def true_ece(scenario: Scenario, rows: int | None = None) -> float:
    """The population's binned ECE, measured on ``rows`` rows (``truth_rows``) with each row's
    true probability in place of its label (fixed seed; the rows are drawn once per
    population and size and kept, so root finding over amplitudes compares like with like)."""
    if scenario.amplitude == 0.0:
        return 0.0
    rows = rows or truth_rows(scenario.population)
    M = len(scenario.population.edges) - 1
    gap_sums = np.zeros(M)
    for inputs, confidence in _truth_rows(scenario.population, rows):
        if scenario.shape == "prevalence":
            shift = scenario.amplitude
            c = _sigmoid(inputs[:, 1] - inputs[:, 0])
            q = _sigmoid(inputs[:, 1] - inputs[:, 0] + shift)
        else:
            c, q = confidence, scenario._success(inputs, confidence)
        gap_sums += np.bincount(_bins_of(c, scenario.edges), weights=c - q, minlength=M)
    return float(np.abs(gap_sums).sum() / rows)


_TRUTH: dict[tuple[str, int], list[tuple[FloatArray, FloatArray]]] = {}


def _truth_rows(population: Population, rows: int) -> list[tuple[FloatArray, FloatArray]]:
    """The population's truth rows in chunks of (inputs, confidences); drawn once, kept."""
    key = (population.name, rows)
    if key not in _TRUTH:
        rng = np.random.default_rng([_TRUTH_SEED, 1])
        chunks, left = [], rows
        while left > 0:
            n = min(left, 10_000_000 // population.classes)
            chunks.append(population.draw_inputs(rng, n))
            left -= n
        _TRUTH.clear()
        _TRUTH[key] = chunks
    return _TRUTH[key]


def solve_amplitude(
    population: Population, shape: str, target: float, rows: int | None = None
) -> Scenario:
    """The scenario of ``shape`` whose true ECE is ``target`` (root finding on ``true_ece``)."""
    if target == 0.0:
        return Scenario(population, shape, 0.0, 0.0)

    def excess(a: float) -> float:
        return true_ece(Scenario(population, shape, a), rows) - target

    high = 0.05
    while excess(high) < 0.0:
        high *= 2.0
        if high > 1e3:
            raise ValueError(f"{population.name}/{shape} cannot reach ECE {target}")
    amplitude = brentq(excess, 0.0, high, xtol=1e-7, rtol=1e-7)
    found = Scenario(population, shape, amplitude)
    return Scenario(population, shape, amplitude, true_ece(found, rows))


def scenario(population: str, shape: str, level: float) -> Scenario:
    """The scenario of ``SCENARIOS`` at ``level`` x ``MAX_ECE`` (a level of 0 is calibrated)."""
    if level == 0.0:
        return Scenario(POPULATIONS[population], shape, 0.0, 0.0)
    amplitude, truth = SCENARIOS[(population, shape, level)]
    return Scenario(POPULATIONS[population], shape, amplitude, truth)


def cells(
    populations: tuple[str, ...] | None = None, shapes: tuple[str, ...] = SHAPES
) -> list[tuple[str, str, float]]:
    """Every ``(population, shape, level)`` with a scenario; calibrated cells once each."""
    names = populations or tuple(p for p in POPULATIONS if p != "two_class")
    out = []
    for name in names:
        out.append((name, "calibrated", 0.0))
        out.extend((name, shape, level) for shape in shapes for level in LEVELS if level > 0.0)
    return [c for c in out if c[2] == 0.0 or (c[0], c[1], c[2]) in SCENARIOS]


#: ``(population, shape, level) -> (amplitude, true ECE)``; regenerate with
#: ``python -m tests.support.simulation`` (minutes).
SCENARIOS: dict[tuple[str, str, float], tuple[float, float]] = {
    ("beta25", "constant", 0.5): (0.025075696899766107, 0.025000),
    ("beta25", "constant", 0.9): (0.04542803580703601, 0.045000),
    ("beta25", "constant", 1.0): (0.05058416806323002, 0.050000),
    ("beta25", "constant", 2.0): (0.10464014564392714, 0.100000),
    ("beta25", "overconfident", 0.5): (0.17479249716452366, 0.025000),
    ("beta25", "overconfident", 0.9): (0.3431718009586599, 0.045000),
    ("beta25", "overconfident", 1.0): (0.39032052491500385, 0.050000),
    ("beta25", "overconfident", 2.0): (1.0355553601511014, 0.100000),
    ("beta25", "underconfident", 0.5): (0.17100563760012788, 0.025000),
    ("beta25", "underconfident", 0.9): (0.3289346599035708, 0.045000),
    ("beta25", "underconfident", 1.0): (0.37203401190603674, 0.050000),
    ("beta25", "underconfident", 2.0): (0.9189197638007954, 0.100000),
    ("beta25", "one_bin", 0.5): (0.1569462035514022, 0.025000),
    ("beta25", "one_bin", 0.9): (0.28250316639252393, 0.045000),
    ("beta25", "one_bin", 1.0): (0.3138924071028044, 0.050000),
    ("beta25", "one_bin", 2.0): (0.6277848142056088, 0.100000),
    ("beta25", "alternating", 0.5): (0.025075696899766107, 0.025000),
    ("beta25", "alternating", 0.9): (0.04542803580703601, 0.045000),
    ("beta25", "alternating", 1.0): (0.05058415154504824, 0.050000),
    ("beta25", "alternating", 2.0): (0.10333529185267877, 0.100000),
    ("confident_binary", "constant", 0.5): (0.024999999999390572, 0.025000),
    ("confident_binary", "constant", 0.9): (0.04499999999890303, 0.045000),
    ("confident_binary", "constant", 1.0): (0.05, 0.050000),
    ("confident_binary", "constant", 2.0): (0.1, 0.100000),
    ("confident_binary", "overconfident", 0.5): (0.1727729963853417, 0.025000),
    ("confident_binary", "overconfident", 0.9): (0.31527286479131605, 0.045000),
    ("confident_binary", "overconfident", 1.0): (0.3519063074688913, 0.050000),
    ("confident_binary", "overconfident", 2.0): (0.7530072182053341, 0.100000),
    ("confident_binary", "underconfident", 0.5): (0.211411632084082, 0.025000),
    ("confident_binary", "underconfident", 0.9): (0.4833676975271332, 0.045000),
    ("confident_binary", "underconfident", 1.0): (0.5813187100778335, 0.050000),
    ("confident_binary", "one_bin", 0.5): (0.046697854605424145, 0.025000),
    ("confident_binary", "one_bin", 0.9): (0.08405613828976347, 0.045000),
    ("confident_binary", "one_bin", 1.0): (0.09339570921084829, 0.050000),
    ("confident_binary", "one_bin", 2.0): (0.18679141842169658, 0.100000),
    ("confident_binary", "alternating", 0.5): (0.024999999999390572, 0.025000),
    ("confident_binary", "alternating", 0.9): (0.04499999999890303, 0.045000),
    ("confident_binary", "alternating", 1.0): (0.05, 0.050000),
    ("confident_binary", "alternating", 2.0): (0.10370687435735099, 0.100000),
    ("bimodal", "constant", 0.5): (0.025129653437725857, 0.025000),
    ("bimodal", "constant", 0.9): (0.0457138614096934, 0.045000),
    ("bimodal", "constant", 1.0): (0.05096654309795445, 0.050000),
    ("bimodal", "constant", 2.0): (0.10699322727382383, 0.100000),
    ("bimodal", "overconfident", 0.5): (0.1434296761292536, 0.025000),
    ("bimodal", "overconfident", 0.9): (0.27077516488591474, 0.045000),
    ("bimodal", "overconfident", 1.0): (0.3047336810995141, 0.050000),
    ("bimodal", "overconfident", 2.0): (0.7077758894044544, 0.100000),
    ("bimodal", "underconfident", 0.5): (0.1498109219311388, 0.025000),
    ("bimodal", "underconfident", 0.9): (0.2949467559989161, 0.045000),
    ("bimodal", "underconfident", 1.0): (0.3359201011024798, 0.050000),
    ("bimodal", "underconfident", 2.0): (0.9340439381952242, 0.100000),
    ("bimodal", "one_bin", 0.5): (0.17994382154062585, 0.025000),
    ("bimodal", "one_bin", 0.9): (0.32389887877312656, 0.045000),
    ("bimodal", "one_bin", 1.0): (0.3598876430812517, 0.050000),
    ("bimodal", "one_bin", 2.0): (0.7197752861625034, 0.100000),
    ("bimodal", "alternating", 0.5): (0.025129653437725857, 0.025000),
    ("bimodal", "alternating", 0.9): (0.0457138614096934, 0.045000),
    ("bimodal", "alternating", 1.0): (0.0509665430980405, 0.050000),
    ("bimodal", "alternating", 2.0): (0.10699804110717179, 0.100000),
    ("few_bins", "constant", 0.5): (0.024999999999392435, 0.025000),
    ("few_bins", "constant", 0.9): (0.04499999999890638, 0.045000),
    ("few_bins", "constant", 1.0): (0.05, 0.050000),
    ("few_bins", "constant", 2.0): (0.1, 0.100000),
    ("few_bins", "overconfident", 0.5): (0.16981444585511776, 0.025000),
    ("few_bins", "overconfident", 0.9): (0.33738829464446174, 0.045000),
    ("few_bins", "overconfident", 1.0): (0.38507607086758794, 0.050000),
    ("few_bins", "overconfident", 2.0): (1.07520137485593, 0.100000),
    ("few_bins", "underconfident", 0.5): (0.1616720278947551, 0.025000),
    ("few_bins", "underconfident", 0.9): (0.3069131711102082, 0.045000),
    ("few_bins", "underconfident", 1.0): (0.3459709769984834, 0.050000),
    ("few_bins", "underconfident", 2.0): (0.8259463593910035, 0.100000),
    ("few_bins", "one_bin", 0.5): (0.06258977720980294, 0.025000),
    ("few_bins", "one_bin", 0.9): (0.1126615989776453, 0.045000),
    ("few_bins", "one_bin", 1.0): (0.12517955441960588, 0.050000),
    ("few_bins", "one_bin", 2.0): (0.25035910883921175, 0.100000),
    ("few_bins", "alternating", 0.5): (0.024999999999392435, 0.025000),
    ("few_bins", "alternating", 0.9): (0.04499999999890638, 0.045000),
    ("few_bins", "alternating", 1.0): (0.05, 0.050000),
    ("few_bins", "alternating", 2.0): (0.1, 0.100000),
    ("few_bins_uneven", "constant", 0.5): (0.024999999999388643, 0.025000),
    ("few_bins_uneven", "constant", 0.9): (0.04499999999889955, 0.045000),
    ("few_bins_uneven", "constant", 1.0): (0.05, 0.050000),
    ("few_bins_uneven", "constant", 2.0): (0.1, 0.100000),
    ("few_bins_uneven", "overconfident", 0.5): (0.16981444585511787, 0.025000),
    ("few_bins_uneven", "overconfident", 0.9): (0.33738829464446024, 0.045000),
    ("few_bins_uneven", "overconfident", 1.0): (0.38507607086758844, 0.050000),
    ("few_bins_uneven", "overconfident", 2.0): (1.0752013748559253, 0.100000),
    ("few_bins_uneven", "underconfident", 0.5): (0.1616720278947551, 0.025000),
    ("few_bins_uneven", "underconfident", 0.9): (0.30691317111020905, 0.045000),
    ("few_bins_uneven", "underconfident", 1.0): (0.3459709769984835, 0.050000),
    ("few_bins_uneven", "underconfident", 2.0): (0.8259463593910047, 0.100000),
    ("few_bins_uneven", "one_bin", 0.5): (0.06244532131363833, 0.025000),
    ("few_bins_uneven", "one_bin", 0.9): (0.11240157836454899, 0.045000),
    ("few_bins_uneven", "one_bin", 1.0): (0.12489064262727666, 0.050000),
    ("few_bins_uneven", "one_bin", 2.0): (0.24978128525455331, 0.100000),
    ("few_bins_uneven", "alternating", 0.5): (0.024999999999388643, 0.025000),
    ("few_bins_uneven", "alternating", 0.9): (0.04499999999889955, 0.045000),
    ("few_bins_uneven", "alternating", 1.0): (0.05, 0.050000),
    ("few_bins_uneven", "alternating", 2.0): (0.1, 0.100000),
    ("imbalanced", "constant", 0.5): (0.025000000000066056, 0.025000),
    ("imbalanced", "constant", 0.9): (0.0450000000001189, 0.045000),
    ("imbalanced", "constant", 1.0): (0.05000000000013211, 0.050000),
    ("imbalanced", "constant", 2.0): (0.10000000000026422, 0.100000),
    ("imbalanced", "overconfident", 0.5): (0.3412625303507351, 0.025000),
    ("imbalanced", "overconfident", 0.9): (0.5769951868605225, 0.045000),
    ("imbalanced", "overconfident", 1.0): (0.6342559768445649, 0.050000),
    ("imbalanced", "overconfident", 2.0): (1.2121502982504082, 0.100000),
    ("imbalanced", "one_bin", 0.5): (0.11027400885624704, 0.025000),
    ("imbalanced", "one_bin", 0.9): (0.1984932159412447, 0.045000),
    ("imbalanced", "one_bin", 1.0): (0.22054801771249408, 0.050000),
    ("imbalanced", "one_bin", 2.0): (0.44109603542498815, 0.100000),
    ("imbalanced", "alternating", 0.5): (0.030902974842690542, 0.025000),
    ("imbalanced", "alternating", 0.9): (0.0603536102757446, 0.045000),
    ("imbalanced", "alternating", 1.0): (0.068426049153596, 0.050000),
    ("imbalanced", "alternating", 2.0): (0.15276655187400018, 0.100000),
    ("k10", "constant", 0.5): (0.02499999999995904, 0.025000),
    ("k10", "constant", 0.9): (0.04499999999992627, 0.045000),
    ("k10", "constant", 1.0): (0.05, 0.050000),
    ("k10", "constant", 2.0): (0.1, 0.100000),
    ("k10", "overconfident", 0.5): (0.08079789687049949, 0.025000),
    ("k10", "overconfident", 0.9): (0.14884471245665953, 0.045000),
    ("k10", "overconfident", 1.0): (0.16638411843922685, 0.050000),
    ("k10", "overconfident", 2.0): (0.35557964244408125, 0.100000),
    ("k10", "underconfident", 0.5): (0.08310307148509481, 0.025000),
    ("k10", "underconfident", 0.9): (0.1568516580897204, 0.045000),
    ("k10", "underconfident", 1.0): (0.17644943660304546, 0.050000),
    ("k10", "underconfident", 2.0): (0.4046321692877898, 0.100000),
    ("k10", "one_bin", 0.5): (0.209369713414282, 0.025000),
    ("k10", "one_bin", 0.9): (0.37686548414570764, 0.045000),
    ("k10", "one_bin", 1.0): (0.4187394268288124, 0.050000),
    ("k10", "alternating", 0.5): (0.02499999999995904, 0.025000),
    ("k10", "alternating", 0.9): (0.04499999999992627, 0.045000),
    ("k10", "alternating", 1.0): (0.05, 0.050000),
    ("k10", "alternating", 2.0): (0.10062018608912147, 0.100000),
    ("confident_k10", "constant", 0.5): (0.025000000000070723, 0.025000),
    ("confident_k10", "constant", 0.9): (0.04500000000012731, 0.045000),
    ("confident_k10", "constant", 1.0): (0.050000000000141445, 0.050000),
    ("confident_k10", "constant", 2.0): (0.09999997882633975, 0.100000),
    ("confident_k10", "overconfident", 0.5): (0.14502269436944645, 0.025000),
    ("confident_k10", "overconfident", 0.9): (0.26282815782641983, 0.045000),
    ("confident_k10", "overconfident", 1.0): (0.2925668593814143, 0.050000),
    ("confident_k10", "overconfident", 2.0): (0.5977009788728797, 0.100000),
    ("confident_k10", "underconfident", 0.5): (0.16693083928869473, 0.025000),
    ("confident_k10", "underconfident", 0.9): (0.34483054630974064, 0.045000),
    ("confident_k10", "underconfident", 1.0): (0.3978848597331016, 0.050000),
    ("confident_k10", "underconfident", 2.0): (1.299832053872463, 0.100000),
    ("confident_k10", "one_bin", 0.5): (0.058013322179771856, 0.025000),
    ("confident_k10", "one_bin", 0.9): (0.10442397992358934, 0.045000),
    ("confident_k10", "one_bin", 1.0): (0.11602664435954371, 0.050000),
    ("confident_k10", "one_bin", 2.0): (0.23205328871908742, 0.100000),
    ("confident_k10", "alternating", 0.5): (0.025000000000070723, 0.025000),
    ("confident_k10", "alternating", 0.9): (0.04500000000012731, 0.045000),
    ("confident_k10", "alternating", 1.0): (0.05000000000001194, 0.050000),
    ("confident_k10", "alternating", 2.0): (0.1011781603973547, 0.100000),
    ("k100", "constant", 0.5): (0.024999999999999998, 0.025000),
    ("k100", "constant", 0.9): (0.04499999999999999, 0.045000),
    ("k100", "constant", 1.0): (0.05, 0.050000),
    ("k100", "constant", 2.0): (0.10000406273062284, 0.100000),
    ("k100", "overconfident", 0.5): (0.056540124909637, 0.025000),
    ("k100", "overconfident", 0.9): (0.10391576123224278, 0.045000),
    ("k100", "overconfident", 1.0): (0.11609390236829742, 0.050000),
    ("k100", "overconfident", 2.0): (0.24673921473826238, 0.100000),
    ("k100", "underconfident", 0.5): (0.05708461628122142, 0.025000),
    ("k100", "underconfident", 0.9): (0.10575578070405187, 0.045000),
    ("k100", "underconfident", 1.0): (0.11838917841855612, 0.050000),
    ("k100", "underconfident", 2.0): (0.2568816779558879, 0.100000),
    ("k100", "one_bin", 0.5): (0.17562654770897626, 0.025000),
    ("k100", "one_bin", 0.9): (0.3161277858761573, 0.045000),
    ("k100", "one_bin", 1.0): (0.3512530954179525, 0.050000),
    ("k100", "one_bin", 2.0): (0.7025061905933873, 0.100000),
    ("k100", "alternating", 0.5): (0.024999999999999998, 0.025000),
    ("k100", "alternating", 0.9): (0.04499999999999999, 0.045000),
    ("k100", "alternating", 1.0): (0.05, 0.050000),
    ("k100", "alternating", 2.0): (0.10020778907515934, 0.100000),
    ("two_class", "prevalence", 0.5): (0.17127798807113034, 0.025000),
    ("two_class", "prevalence", 0.9): (0.30877605150310294, 0.045000),
    ("two_class", "prevalence", 1.0): (0.3432641356213233, 0.050000),
    ("two_class", "prevalence", 2.0): (0.6922911608793482, 0.100000),
}


def _solve_all(write: Callable[[str], None]) -> None:
    for name, population in POPULATIONS.items():
        shapes = ("prevalence",) if name == "two_class" else SHAPES
        for shape in shapes:
            for level in LEVELS[1:]:
                try:
                    found = solve_amplitude(population, shape, level * MAX_ECE)
                except ValueError:
                    continue
                key = f"({name!r}, {shape!r}, {level})"
                write(f"    {key}: ({found.amplitude!r}, {found.true_ece:.6f}),")


if __name__ == "__main__":
    _solve_all(print)


class RowPool:
    """A large sample of a scenario's rows (confidence, true success probability, bin), from
    which labeled batches are drawn by resampling rows and drawing each outcome afresh: cheap
    for any K, and as close to the population as the pool is large."""

    def __init__(self, scenario: Scenario, rng: np.random.Generator, rows: int = 1_000_000):
        c, q = scenario.draw_with_truth(rng, rows)
        self.scenario = scenario
        self.confidence, self.success = c, q
        self.bins = _bins_of(c, scenario.edges)
        self.M = len(scenario.population.edges) - 1

    def tables(
        self, rng: np.random.Generator, batches: int, rows: int
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(batches, M) bin counts, confidence sums and success counts of ``batches`` batches
        of ``rows`` labeled rows each."""
        n = np.zeros((batches, self.M))
        c = np.zeros((batches, self.M))
        k = np.zeros((batches, self.M))
        step = max(1, 4_000_000 // max(rows, 1))
        for first in range(0, batches, step):
            count = min(step, batches - first)
            pick = rng.integers(0, len(self.confidence), size=count * rows)
            hit = rng.random(count * rows) < self.success[pick]
            cell = self.bins[pick] + self.M * np.repeat(np.arange(count), rows)
            size = count * self.M
            n[first : first + count] = np.bincount(cell, minlength=size).reshape(count, self.M)
            c[first : first + count] = np.bincount(
                cell, weights=self.confidence[pick], minlength=size
            ).reshape(count, self.M)
            k[first : first + count] = np.bincount(cell, weights=hit, minlength=size).reshape(
                count, self.M
            )
        return n, c, k


def trailing_values(increments: FloatArray, blocks: int) -> FloatArray:
    """(B,) a CUSUM's value at each block when it starts afresh ``blocks`` blocks earlier (a
    trailing window of that many blocks), maximised over the (P, B) patterns' increments.

    The CUSUM started at block j and read to block t is ``max(0, max_i (P_t - P_i))`` over
    ``j <= i <= t`` with ``P`` the prefix sums: ``P_t - min(P_(t-blocks) .. P_t)``.
    """
    from scipy.ndimage import minimum_filter1d

    prefix = np.concatenate(
        [np.zeros((increments.shape[0], 1)), np.cumsum(increments, axis=1)], axis=1
    )
    size = blocks + 1
    lowest = minimum_filter1d(prefix, size=size, axis=1, mode="nearest", origin=(size - 1) // 2)
    return (prefix - lowest)[:, 1:].max(axis=0)
