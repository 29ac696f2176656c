"""``nll_improvement`` against its own truth: the population log loss of the fitted calibrator
against the uncalibrated model's (``tests/support/gate_simulation.py``), at 3,000 eval rows.

A seeded, small version of the targets measured in ``bench/bench_statistics.py`` (table 9):
for every family, contracts whose calibrator is truly worse by 5% or more fail, and those whose
calibrator is truly no worse pass.
"""

from __future__ import annotations

import numpy as np
import pytest

from service.common.errors import ValidationFailed
from tests.support.gate_simulation import NllTrial, nll_trial
from tests.support.simulation import POPULATIONS, Scenario

EVAL_ROWS = 3000
REPS = 4
TRUTH_ROWS = 50_000
#: A cell: (population, family, fitted on, judged on, fit rows), the scenarios given by the
#: amplitude of an over-confident shape (0: calibrated; 2: a temperature of 3 would fix it).
Cell = tuple[str, str, float, float, int]

#: Calibrators truly worse by >= 5% in most draws: step maps fitted to few rows of a calibrated
#: model, and maps fitted to an over-confident population and judged on the calibrated one the
#: model now serves (regularised vector and matrix scaling fitted to a calibrated model are not
#: worse).
WORSE: list[Cell] = [
    ("beta25", "isotonic", 0.0, 0.0, 150),
    ("beta25", "histogram", 0.0, 0.0, 100),
    ("k10", "vector", 2.0, 0.0, 150),
    ("k10", "matrix", 2.0, 0.0, 600),
    ("k10", "isotonic", 0.0, 0.0, 150),
    ("beta25", "temperature", 2.0, 0.0, 150),
    ("beta25", "platt", 2.0, 0.0, 150),
    ("beta25", "beta", 2.0, 0.0, 150),
]
#: Every family fitted on an over-confident model and judged on it: truly better.
NO_WORSE: list[Cell] = [(p, f, 2.0, 2.0, 1000 if f == "matrix" else 2000) for p, f, *_ in WORSE]


def _scenario(population: str, amplitude: float) -> Scenario:
    return Scenario(POPULATIONS[population], "overconfident", amplitude)


def _trials(cell: Cell) -> list[NllTrial]:
    population, family, fitted_on, judged_on, fit_rows = cell
    rng = np.random.default_rng([20261203, fit_rows, len(family), len(population)])
    out = []
    for _ in range(REPS):
        try:
            trial = nll_trial(
                population,
                family,
                _scenario(population, fitted_on),
                _scenario(population, judged_on),
                fit_rows,
                EVAL_ROWS,
                rng,
                TRUTH_ROWS,
            )
        except ValidationFailed:
            continue
        out.append(trial)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("cell", WORSE, ids=lambda c: f"{c[0]}-{c[1]}")
def test_a_calibrator_truly_worse_by_5_percent_fails(cell: Cell) -> None:
    worse = [t for t in _trials(cell) if t.truth.relative >= 0.05]
    assert len(worse) >= 3, "the cell no longer draws calibrators truly worse by 5%"
    failed = [not t.check.passed for t in worse]
    assert sum(failed) >= 0.9 * len(worse), [
        (round(t.truth.relative, 3), t.check.message) for t in worse if t.check.passed
    ]


@pytest.mark.slow
@pytest.mark.parametrize("cell", NO_WORSE, ids=lambda c: f"{c[0]}-{c[1]}")
def test_a_calibrator_truly_no_worse_passes(cell: Cell) -> None:
    trials = _trials(cell)
    no_worse = [t for t in trials if t.truth.delta <= 0.0]
    assert len(no_worse) >= 3
    assert all(t.check.passed for t in no_worse), [t.check.message for t in no_worse]


def test_a_step_shaped_calibrator_that_loses_names_the_family_that_would_not() -> None:
    rng = np.random.default_rng(7)
    cal, over = _scenario("beta25", 0.0), _scenario("beta25", 1.0)
    on_calibrated = nll_trial("beta25", "isotonic", cal, cal, 150, EVAL_ROWS, rng, TRUTH_ROWS)
    assert on_calibrated.truth.delta > 0.0 and not on_calibrated.check.passed
    assert "the isotonic map is a step function" in on_calibrated.check.message
    assert "already calibrated" in on_calibrated.check.message
    assert on_calibrated.check.message.endswith("the identity would not be worse")
    on_miscalibrated = nll_trial("beta25", "histogram", over, over, 60, EVAL_ROWS, rng, TRUTH_ROWS)
    assert on_miscalibrated.truth.delta > 0.0 and not on_miscalibrated.check.passed
    assert "temperature scaling would not be worse" in on_miscalibrated.check.message
