"""Choosing a calibrator family by cross-validation inside the fit set, with the evidence.

Every candidate family is fitted ``FOLDS`` = 5 times, each time on four fifths of the fit set,
and applied to the held-out fifth (folds from a permutation seeded with ``SEED``, so the choice
is reproducible). Over the out-of-fold predictions of all rows each candidate gets its mean NLL
(natural log), Brier score and debiased binned ECE with its 95% interval (the fold statistics
add up: ``combine_stats``). A paired one-sided t-test on the per-row NLL differences asks, for
every pair, whether one candidate has a lower expected NLL than the other; ``p_value`` of a
candidate is the smallest p-value with which another beats it. The choice is the simplest
candidate (the order given: fewest parameters first) that no other beats at level ``ALPHA`` =
0.05. A candidate whose fit fails on some fold (one class only, separated classes) is recorded
with its reason and not chosen. The caller then refits the choice on the whole fit set; the
eval set is never seen here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import t as student_t

from service.calibration.calibration_stats import combine_stats
from service.calibration.calibrators import Calibrator
from service.calibration.errors import CalibrationInputError, FitError
from service.calibration.readings import reading_from_stats
from service.calibration.stats import binary_stats, multiclass_stats, row_nll
from service.calibration.vocabulary import Task

FOLDS = 5
SEED = 0
ALPHA = 0.05

Fitter = Callable[[str, Any, Any], Calibrator]


@dataclass(frozen=True)
class Candidate:
    """One family's out-of-fold evidence (``None`` values when its fit failed: ``error``)."""

    method: str
    nll: float | None
    brier: float | None
    ece_debiased: float | None
    ece_ci: tuple[float, float] | None
    p_value: float | None
    beaten_by: str | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "nll": self.nll,
            "brier": self.brier,
            "ece_debiased": self.ece_debiased,
            "ece_ci": None if self.ece_ci is None else list(self.ece_ci),
            "p_value": self.p_value,
            "beaten_by": self.beaten_by,
            "error": self.error,
        }


@dataclass(frozen=True)
class Selection:
    """The chosen method and every candidate's evidence, in the order of simplicity."""

    chosen: str
    folds: int
    alpha: float
    candidates: tuple[Candidate, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen,
            "folds": self.folds,
            "alpha": self.alpha,
            "criterion": "out-of-fold NLL, paired one-sided t-test",
            "candidates": [c.to_dict() for c in self.candidates],
        }


def fold_of_rows(n: int, folds: int = FOLDS, seed: int = SEED) -> np.ndarray:
    """The (n,) fold index of each row: a seeded permutation dealt round-robin."""
    fold = np.empty(n, dtype=np.int64)
    fold[np.random.default_rng(seed).permutation(n)] = np.arange(n) % folds
    return fold


def beats_p_value(better: np.ndarray, worse: np.ndarray) -> float:
    """One-sided paired t-test p-value that ``better`` has the lower mean (per-row NLLs)."""
    d = worse - better
    n = d.size
    mean = float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    if sd == 0.0 or not math.isfinite(sd):
        return 0.0 if mean > 0.0 else 1.0
    return float(student_t.sf(mean / (sd / math.sqrt(n)), n - 1))


def choose(
    task: str,
    inputs: Any,
    labels: Any,
    methods: Sequence[str],
    fit: Fitter,
    edges: Any,
) -> Selection:
    """Cross-validate ``methods`` (simplest first) on the fit rows and choose (module
    docstring). ``inputs``: (N, K) logits or (N,) scores; ``fit(method, inputs, labels)``
    returns a calibrator or raises ``CalibrationInputError``; ``edges`` the ECE bins."""
    x, y = np.asarray(inputs, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    n = y.size
    if n < 2 * FOLDS:
        raise FitError("fit", f"auto needs at least {2 * FOLDS} rows to cross-validate")
    fold = fold_of_rows(n)
    losses: dict[str, np.ndarray] = {}
    summaries: dict[str, tuple[float, float, float, tuple[float, float]]] = {}
    errors: dict[str, str] = {}
    for method in methods:
        nll = np.empty(n)
        parts = []
        try:
            for f in range(FOLDS):
                train, held = fold != f, fold == f
                calibrator = fit(method, x[train], y[train])
                nll[held] = row_nll(task, x[held], y[held], calibrator)
                if task == Task.MULTICLASS:
                    parts.append(
                        multiclass_stats(
                            x[held], y[held], edges, calibrator=calibrator, classwise=False
                        )
                    )
                else:
                    parts.append(binary_stats(x[held], y[held], edges, calibrator=calibrator))
        except CalibrationInputError as exc:
            errors[method] = str(exc)
            continue
        reading = reading_from_stats(combine_stats(parts))
        losses[method] = nll
        summaries[method] = (reading.nll, reading.brier, reading.ece_debiased, reading.ece_ci)
    if not losses:
        raise FitError("fit", "no candidate could be fitted: " + "; ".join(errors.values()))
    candidates, chosen = [], None
    for method in methods:
        if method in errors:
            candidates.append(Candidate(method, None, None, None, None, None, None, errors[method]))
            continue
        rivals = [
            (beats_p_value(losses[other], losses[method]), other)
            for other in losses
            if other != method
        ]
        p_value, beaten_by = min(rivals) if rivals else (1.0, None)
        nll_mean, brier, ece, ci = summaries[method]
        candidates.append(
            Candidate(
                method,
                nll_mean,
                brier,
                ece,
                ci,
                p_value,
                beaten_by if p_value < ALPHA else None,
            )
        )
        if chosen is None and p_value >= ALPHA:
            chosen = method
    if chosen is None:  # every candidate beaten by another: the lowest out-of-fold NLL
        chosen = min(losses, key=lambda m: summaries[m][0])
    return Selection(chosen, FOLDS, ALPHA, tuple(candidates))
