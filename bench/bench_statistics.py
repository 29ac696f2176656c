"""Simulated error rates of calmon's statistics and decision rules, written as Markdown tables.

    .venv/bin/python bench/bench_statistics.py [--reps 1000] [--tail-reps 4000]
        [--weeks 1000] [--out bench/results/statistics-tables.md] [--processes 2] [--quick]

Every table runs on data whose true calibration is known: the scenarios of
``tests/support/simulation.py`` (populations x shapes of miscalibration x true ECE at
0, 0.5, 0.9, 1 and 2 x max_ece 0.05). Batches are resampled from a pool of a million rows of
each scenario, every outcome drawn afresh (``RowPool``).

1. the ECE interval: coverage of the true ECE, each one-sided tail, the test's agreement with the
   interval, and the plug-in's and debiased estimate's errors (``--tail-reps`` per cell);
2. the status rule per evaluation: a window of N labeled rows (blocks of 25, 5-minute buckets
   at 300 labels an hour, with 600 rows before it) from a steady cohort, against a baseline of
   500 or 2,000 rows;
3. the review gate: a registered identity contract judged on a fresh evaluation set of each
   scenario; contracts fitted on calibrated rows judged on their stored baseline; a
   degenerate calibrator;
4. the statuses over time: cohorts streamed at 300 labels an hour through 5-minute buckets,
   the three default windows re-decided every 5 minutes as the service tiles them
   (``rule_simulation.ServiceStream``; ``--weeks`` cohort-weeks per cell): false alerts and
   warns per year, the fleet's false warn episodes per day, and status onsets per week at
   constant true ECEs;
5. a step to 2 x max_ece: labels of the changed cohort until its first alert, against an
   oracle CUSUM that knows both populations (``rule_simulation.Oracle``);
6. two-class models with a prevalence error, read in both views;
7. the most any test can do with N = 300 rows (Neyman-Pearson);
8. the confidence-shift statistic with no shift.

Each cell draws from ``numpy.random.default_rng([SEED, table, *cell])``, so a cell's numbers do
not depend on which other cells run. ``--quick`` runs a small subset (for trying changes).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import norm

# The simulations live with the tests (tests/support/), imported from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.calibration import IdentityCalibrator
from service.calibration.drift import DriftPolicy, StatusLevels
from service.calibration.ece_inference import infer_ece_many
from service.calibration.shift import confidence_shift
from service.calibration.vocabulary import Status
from service.common.errors import ValidationFailed
from service.contracts.fitting import fit_contract_spec
from service.contracts.labeled_sets import LabeledSet
from service.contracts.model import Contract
from service.contracts.requests import FitRequest
from service.gate.checks import evaluate_gate
from service.gate.ece_rule import EceRule, judge_ece
from service.gate.requests import GateRequest, parse_gate_request
from tests.support.gate_simulation import nll_trial
from tests.support.gate_simulation import spec_fields as _spec_fields
from tests.support.rule_simulation import (
    WINDOWS,
    Oracle,
    baseline_levels,
    labels_to_alert,
    steady_onsets,
    window_statuses,
)
from tests.support.simulation import (
    MAX_ECE,
    POPULATIONS,
    SHAPES,
    RowPool,
    Scenario,
    cells,
    scenario,
)

SEED = 20261201
POLICY = DriftPolicy(max_ece=MAX_ECE, max_ece_increase=0.02, min_labeled=200)
SIZES = (300, 1000, 3000, 10000)
BASELINES = (500, 2000)
FLEET_COHORTS = 50
GATE_EVAL_SIZES = (500, 3000)
GATE_FITTED = (("k10", "temperature"), ("beta25", "temperature"), ("beta25", "platt"))
STREAMS = {"interval": 1, "status": 2, "gate": 3, "time": 4, "step": 5, "two": 6, "psi": 8}
STATUSES = (Status.OK, Status.WARN, Status.ALERT, Status.INSUFFICIENT_DATA)
# Targets.
TAIL_TARGET = 0.025
WARN_TARGET = 0.05
ALERT_TARGET = 0.01
POWER_TARGET = 0.90
GATE_FALSE_FAIL_TARGET = 0.05
GATE_POWER_TARGET = 0.95
MTTFA_TARGET_YEARS = 1.0
FLEET_WARN_TARGET = 1.0
STEP_MEDIAN_TARGET = 1000
STEP_P95_TARGET = 3000
#: The detectors' median and 95th-percentile delay against the oracle's, at most.
ORACLE_RATIO_TARGET = 1.5
#: Status onsets per cohort, window and week at a constant true ECE, at most.
ONSETS_PER_WEEK_TARGET = 1.0
#: Constant true ECEs (x max_ece) whose status onsets are counted over time.
TIME_LEVELS = (0.0, 0.5, 0.9, 1.0, 2.0)
#: Rows of each oracle delay: a calm day at 300 labels an hour, then up to 30,000 changed.
ORACLE_CALM_ROWS = 7200
ORACLE_HORIZON_ROWS = 30000
_NAN = float("nan")

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Job:
    """One cell of one table: ``reps`` repetitions of ``table``'s experiment at ``key``."""

    table: str
    key: tuple[Any, ...]
    reps: int

    @property
    def cost(self) -> float:
        """A rough relative cost, so the slowest cells start first."""
        scale = {"interval": 1e-6, "status": 2e-6, "gate": 5e-3, "time": 0.02, "step": 0.01}
        if self.table == "nll":
            return self.reps * 1.0
        scale["step_oracle"] = 0.002
        rows = next((k for k in self.key if isinstance(k, int)), 1000)
        return self.reps * scale.get(self.table, 1e-3) * (rows if self.table != "time" else 1)


def _rng(table: str, key: Sequence[Any]) -> np.random.Generator:
    """The generator of one cell: ``default_rng([SEED, table number, *cell integers])``."""
    table = table.split("_")[0]
    names = [*POPULATIONS, *SHAPES, "calibrated", "prevalence", "temperature", "platt"]
    ints = []
    for part in key:
        if isinstance(part, str):
            ints.append(names.index(part))
        elif isinstance(part, float):
            ints.append(round(part * 1000))
        else:
            ints.append(int(part))
    return np.random.default_rng([SEED, STREAMS[table], *ints])


_POOLS: dict[tuple[str, str, float], RowPool] = {}


def _scenario(population: str, shape: str, level: float) -> Scenario:
    return scenario(population, "constant" if level == 0.0 else shape, level)


def _pool(population: str, shape: str, level: float) -> RowPool:
    """The row pool of a scenario (one per worker, built on first use, fixed seed)."""
    key = (population, shape if level else "calibrated", level)
    if key not in _POOLS:
        rng = np.random.default_rng([SEED, 99, *_rng_key(key)])
        _POOLS[key] = RowPool(_scenario(population, shape, level), rng)
    return _POOLS[key]


def _rng_key(key: tuple[str, str, float]) -> list[int]:
    names = [*POPULATIONS, *SHAPES, "calibrated", "prevalence"]
    return [names.index(key[0]), names.index(key[1]), round(key[2] * 1000)]


# --- 1. the interval ------------------------------------------------------------------------


def _interval_job(job: Job) -> Arrays:
    population, shape, level, N = job.key
    truth = _scenario(population, shape, level).true_ece
    n, c, k = _pool(population, shape, level).tables(_rng("interval", job.key), job.reps, N)
    got = infer_ece_many(n, c, k)
    excludes = got.lower > 0.0
    return {
        "covered": (got.lower <= truth) & (truth <= got.upper),
        "upper_below": got.upper < truth,
        "lower_above": got.lower > truth,
        "agree": excludes == (got.p_value < 0.05),
        "width": got.upper - got.lower,
        "plug_in_error": got.ece - truth,
        "debiased_error": got.debiased - truth,
        "truth": np.full(job.reps, truth),
    }


# --- 2. statuses per evaluation ---------------------------------------------------------------


def _status_job(job: Job) -> Arrays:
    population, shape, level, N, baseline_n = job.key
    rng = _rng("status", job.key)
    base_pool = _pool(population, shape, level if level <= 1.0 else 0.0)
    levels = baseline_levels(base_pool, rng, baseline_n, job.reps, POLICY)
    status = window_statuses(_pool(population, shape, level), levels, rng, N, POLICY)
    return {f"status:{s}": status == s for s in STATUSES}


# --- 3. the gate ------------------------------------------------------------------------------


_REQUEST = parse_gate_request({"contract_id": "simulated", "policy": {"max_ece": MAX_ECE}})
_CREATED = datetime(2026, 2, 1, tzinfo=UTC)


def _gate_outcomes(contract: Contract, requests: Iterable[GateRequest]) -> Arrays:
    """Per request: the default policy's decision and failed checks, and whether ``eval_ece``
    fails under each ``ece_rule`` (the same evidence judged by every rule)."""
    failed, ece, nll, bound, other = [], [], [], [], []
    by_rule: dict[str, list[bool]] = {rule.value: [] for rule in EceRule}
    for request in requests:
        outcome = evaluate_gate(contract, request, "measured")
        names = {c.name for c in outcome.checks if not c.passed}
        failed.append(outcome.decision == "fail")
        ece.append("eval_ece" in names)
        nll.append("nll_improvement" in names)
        bound.append("calibrator_bound" in names)
        other.append(bool(names - {"eval_ece", "nll_improvement", "calibrator_bound"}))
        for rule in EceRule:
            verdict = judge_ece(rule, outcome.ece_views, outcome.policy["max_ece"])
            by_rule[rule.value].append(not verdict.passed)
    return {
        "failed": np.array(failed),
        "check:eval_ece": np.array(ece),
        "check:nll_improvement": np.array(nll),
        "check:calibrator_bound": np.array(bound),
        "check:other": np.array(other),
    } | {f"rule:{rule}": np.array(v) for rule, v in by_rule.items()}


def _identity_contract(population: str, rng: np.random.Generator) -> Contract:
    """A contract with the identity calibrator and a calibrated 2,000-row baseline."""
    s = _scenario(population, "constant", 0.0)
    data = LabeledSet(*s.draw(rng, 2000))
    other = LabeledSet(*s.draw(rng, 2000))
    spec = fit_contract_spec(FitRequest(_spec_fields(population), "temperature", data, other))
    identity = replace(spec, calibrator=IdentityCalibrator())
    return Contract("simulated", 1, identity, _CREATED, "bench", "0" * 64)


def _gate_fresh_job(job: Job) -> Arrays:
    """A registered identity contract judged on fresh evaluation sets of the scenario."""
    population, shape, level, eval_n = job.key
    rng = _rng("gate", job.key)
    contract = _identity_contract(population, rng)
    s = _scenario(population, shape, level)
    key = "logits" if s.task == "multiclass" else "scores"

    def requests() -> Iterable[GateRequest]:
        for _ in range(job.reps):
            inputs, labels = s.draw(rng, eval_n)
            yield replace(_REQUEST, evaluation={key: inputs.tolist(), "labels": labels.tolist()})

    return _gate_outcomes(contract, requests())


def _gate_fitted_job(job: Job) -> Arrays:
    """Contracts fitted on calibrated rows, judged on their stored eval baseline."""
    population, method, fit_n, eval_n = job.key
    rng = _rng("gate", job.key)
    s = _scenario(population, "constant", 0.0)
    fields = _spec_fields(population)
    out: dict[str, list[bool]] = {}
    for _ in range(job.reps):
        fit, held_out = LabeledSet(*s.draw(rng, fit_n)), LabeledSet(*s.draw(rng, eval_n))
        try:
            spec = fit_contract_spec(FitRequest(fields, method, fit, held_out))
        except ValidationFailed:
            arrays = {"failed": [True], "check:other": [True]}
        else:
            contract = Contract("simulated", 1, spec, _CREATED, "bench", "0" * 64)
            arrays = {k: list(v) for k, v in _gate_outcomes(contract, [_REQUEST]).items()}
        for name, value in arrays.items():
            out.setdefault(name, []).extend(value)
    return {k: np.array(v) for k, v in out.items()}


def _gate_degenerate_job(job: Job) -> Arrays:
    """A temperature fitted on a separable fit set (it stops on its bound), judged on its
    stored baseline of real (non-separable) eval rows."""
    population, fit_n, eval_n = job.key
    rng = _rng("gate", job.key)
    s = _scenario(population, "constant", 0.0)
    fields = _spec_fields(population)
    out: dict[str, list[bool]] = {}
    for _ in range(job.reps):
        z, _y = s.draw(rng, fit_n)
        separable = LabeledSet(z, np.argmax(z, axis=1)) if s.task == "multiclass" else None
        if separable is None:
            separable = LabeledSet(z, (z >= 0.5).astype(np.int64))
        held_out = LabeledSet(*s.draw(rng, eval_n))
        spec = fit_contract_spec(FitRequest(fields, "temperature", separable, held_out))
        contract = Contract("simulated", 1, spec, _CREATED, "bench", "0" * 64)
        for name, value in _gate_outcomes(contract, [_REQUEST]).items():
            out.setdefault(name, []).extend(value)
    return {k: np.array(v) for k, v in out.items()}


# --- 9. the NLL check against its population truth ----------------------------------------

#: Families per task, and the populations the NLL table fits them on.
NLL_FAMILIES = {
    "binary": ("temperature", "platt", "beta", "isotonic", "histogram"),
    "multiclass": ("temperature", "vector", "matrix", "isotonic"),
}
NLL_POPULATIONS = ("beta25", "imbalanced", "k10", "two_class")
#: (fitted on, judged on, fit rows): amplitudes of an over-confident shape (0: calibrated; 2:
#: a temperature of 3 fixes it). Fitted to a calibrated model; fitted to an over-confident one
#: and judged on it; fitted to an over-confident one and judged on the calibrated population
#: the model now serves (a stale calibrator).
NLL_CELLS = (
    (0.0, 0.0, 150),
    (0.0, 0.0, 600),
    (0.0, 0.0, 2000),
    (2.0, 2.0, 600),
    (2.0, 2.0, 2000),
    (0.5, 0.5, 2000),
    (2.0, 0.0, 150),
    (2.0, 0.0, 2000),
)
NLL_EVAL_ROWS = 3000
NLL_TRUTH_ROWS = 100_000
NLL_STREAM = 9
NLL_WORSE = 0.05
NLL_FALSE_FAIL_TARGET = 0.05
NLL_POWER_TARGET = 0.90


def _nll_job(job: Job) -> Arrays:
    """Contracts fitted by calmon with one family, judged by the gate on 3,000 held-out rows;
    each beside the population truth of its log loss (``tests/support/gate_simulation.py``)."""
    population, family, fitted_on, judged_on, fit_n = job.key
    names = [*NLL_POPULATIONS, *NLL_FAMILIES["binary"], *NLL_FAMILIES["multiclass"]]
    cell = [names.index(population), names.index(family), fit_n, round(fitted_on * 10)]
    rng = np.random.default_rng([SEED, NLL_STREAM, *cell, round(judged_on * 10)])
    shape = POPULATIONS[population]
    fit_s, judge_s = (
        Scenario(shape, "overconfident", fitted_on),
        Scenario(shape, "overconfident", judged_on),
    )
    delta, relative, failed = [], [], []
    for _ in range(job.reps):
        try:
            trial = nll_trial(
                population, family, fit_s, judge_s, fit_n, NLL_EVAL_ROWS, rng, NLL_TRUTH_ROWS
            )
        except ValidationFailed:
            continue
        delta.append(trial.truth.delta)
        relative.append(trial.truth.relative)
        failed.append(not trial.check.passed)
    return {"delta": np.array(delta), "relative": np.array(relative), "failed": np.array(failed)}


# --- 4. statuses over time, 5. a step change ---------------------------------------------------


def _time_job(job: Job) -> Arrays:
    """Cohort-weeks of a steady cohort: onsets of alert and warn detections per window."""
    population, shape, level, weeks = job.key
    rng = _rng("time", job.key)
    pool = _pool(population, shape, level)
    levels = baseline_levels(pool, rng, 2000, 1, POLICY)[0]
    out: dict[str, list[int]] = {}
    cohorts = max(1, weeks // 26)
    for _ in range(cohorts):
        for key, count in steady_onsets(pool, levels, rng, weeks // cohorts, POLICY).items():
            out.setdefault(key, []).append(count)
    return {k: np.array(v) for k, v in out.items()} | {
        "weeks": np.array([weeks // cohorts] * cohorts)
    }


def _step_job(job: Job) -> Arrays:
    """Calibrated for a day, then 2 x max_ece: labels of the changed cohort to the first alert
    (any window), -1 if none within the horizon."""
    population, shape = job.key
    rng = _rng("step", job.key)
    before, after = _pool(population, shape, 0.0), _pool(population, shape, 2.0)
    levels = _step_levels(before, rng)
    return {"labels": labels_to_alert(before, after, levels, rng, job.reps)}


def _step_levels(before: RowPool, rng: np.random.Generator) -> StatusLevels:
    """The status levels of a step cell: from one calibrated baseline of 2,000 rows."""
    return baseline_levels(before, rng, 2000, 1, POLICY)[0]


def _oracle_job(job: Job) -> Arrays:
    """The oracle CUSUMs on the same change, each tuned to a year of labels to a false alarm
    under its null, then their labels from the change to the alarm (-1 if none within the
    horizon): ``labels`` against the calibrated cohort, ``boundary_labels`` against the cohort at
    the step cell's alert level (``Oracle``; the step job's baseline, drawn again)."""
    population, shape = job.key
    levels = _step_levels(_pool(population, shape, 0.0), _rng("step", job.key))
    after = _pool(population, shape, 2.0)
    out: dict[str, np.ndarray] = {"alert_level": np.array([levels.alert])}
    for name, oracle, stream in (
        ("", Oracle(after), 1),
        ("boundary_", Oracle.at_level(after, levels.alert), 2),
    ):
        rng = _rng("step", (*job.key, stream))
        threshold = oracle.tune(rng)
        out[f"{name}labels"] = oracle.delays(rng, job.reps, ORACLE_CALM_ROWS, ORACLE_HORIZON_ROWS)
        out[f"{name}threshold"] = np.array([threshold])
    return out


# --- 6. two-class models, 7. the Neyman-Pearson bound, 8. PSI ----------------------------------


def _two_class_job(job: Job) -> Arrays:
    """Two-class multiclass rows with a prevalence error: each view's ECE and the gate."""
    level, eval_n = job.key
    rng = _rng("two", job.key)
    s = _scenario("two_class", "prevalence", level)
    contract = _identity_contract("two_class", rng)
    out: dict[str, list[float]] = {}
    for _ in range(job.reps):
        z, y = s.draw(rng, eval_n)
        request = replace(_REQUEST, evaluation={"logits": z.tolist(), "labels": y.tolist()})
        outcome = evaluate_gate(contract, request, "measured")
        evidence = outcome.evidence
        out.setdefault("failed", []).append(outcome.decision == "fail")
        out.setdefault("top_ece", []).append(evidence["ece"])
        out.setdefault("positive_ece", []).append(evidence["positive_class"]["ece"])
    return {k: np.array(v) for k, v in out.items()}


def _gaps_toward_half(pool: RowPool, gap: float) -> tuple[np.ndarray, np.ndarray]:
    """The pool's confidences and their success probabilities under a gap of ``gap`` toward
    1/2 (over-confidence: the model is too sure either way), which never needs clipping."""
    c = pool.confidence
    return c, c - np.where(c >= 0.5, gap, -gap)


def neyman_pearson_power(pool: RowPool, n: int, null: float, alternative: float) -> float:
    """The power at level ``ALERT_TARGET`` of the most powerful test of a gap of ``null``
    against one of ``alternative`` (both toward 1/2, the configuration known to the test), with
    ``n`` rows of the pool's confidences: the normal approximation of the likelihood-ratio
    statistic ``sum_i w_i y_i``."""
    _, p0 = _gaps_toward_half(pool, null)
    _, p1 = _gaps_toward_half(pool, alternative)
    weight = np.log(p1 / p0) - np.log((1 - p1) / (1 - p0))
    shift = (weight * (p1 - p0)).mean() * n
    sd0 = math.sqrt((weight**2 * p0 * (1 - p0)).mean() * n)
    sd1 = math.sqrt((weight**2 * p1 * (1 - p1)).mean() * n)
    z = norm.ppf(1.0 - ALERT_TARGET)
    return float(norm.sf((z * sd0 - shift) / sd1))


def _psi_job(job: Job) -> Arrays:
    population, baseline_n, window_n = job.key
    rng = _rng("psi", job.key)
    pool = _pool(population, "constant", 0.0)
    base = pool.tables(rng, job.reps, baseline_n)[0]
    window = pool.tables(rng, job.reps, window_n)[0]
    out = {k: np.empty(job.reps) for k in ("psi", "no_shift", "p_value")}
    for r in range(job.reps):
        got = confidence_shift(base[r], window[r])
        out["psi"][r], out["no_shift"][r], out["p_value"][r] = got.psi, got.no_shift, got.p_value
    return out


RUNNERS: dict[str, Callable[[Job], Arrays]] = {
    "nll": _nll_job,
    "interval": _interval_job,
    "status": _status_job,
    "gate_fresh": _gate_fresh_job,
    "gate_fitted": _gate_fitted_job,
    "gate_degenerate": _gate_degenerate_job,
    "time": _time_job,
    "step": _step_job,
    "step_oracle": _oracle_job,
    "two": _two_class_job,
    "psi": _psi_job,
}


# --- running --------------------------------------------------------------------------------------


def _init_worker() -> None:
    """One BLAS thread per worker process."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass


def _run(job: Job) -> tuple[Job, Arrays, float]:
    start = time.perf_counter()
    return job, RUNNERS[job.table](job), time.perf_counter() - start


def jobs_of(
    reps: int,
    tail_reps: int,
    weeks: int,
    quick: bool,
    nll_reps: int | None = None,
    step_reps: int | None = None,
) -> list[Job]:
    """Every cell of every table (a small subset with ``quick``)."""
    populations = ("beta25", "k10", "imbalanced") if quick else None
    all_cells = cells(populations)
    sizes = (300, 3000) if quick else SIZES
    step_reps = reps if step_reps is None else step_reps
    jobs = [Job("interval", (*cell, N), tail_reps) for cell in all_cells for N in sizes]
    for cell in all_cells:
        for N in sizes:
            for b in BASELINES if cell[2] <= 1.0 else (2000,):
                jobs.append(Job("status", (*cell, N, b), reps))
    for cell in all_cells:
        if cell[2] in (0.0, 0.5):
            jobs += [Job("gate_fresh", (*cell, e), reps) for e in GATE_EVAL_SIZES[:2]]
        if cell[2] == 2.0:
            jobs.append(Job("gate_fresh", (*cell, 3000), reps))
    for population, method in GATE_FITTED:
        jobs += [Job("gate_fitted", (population, method, 500, e), reps) for e in (500, 3000)]
    jobs += [Job("gate_degenerate", (p, 300, 1000), reps) for p in ("k10", "confident_k10")]
    for cell in all_cells:
        if cell[2] in TIME_LEVELS:
            jobs.append(Job("time", (*cell, weeks), 1))
        if cell[2] == 2.0:
            jobs.append(Job("step", cell[:2], step_reps))
            jobs.append(Job("step_oracle", cell[:2], step_reps))
    jobs += [Job("two", (level, e), reps) for level in (0.0, 0.5, 2.0) for e in (1000, 3000)]
    jobs += [
        Job("psi", ("beta25", b, w), reps) for b in (500, 3000) for w in (50, 200, 1000, 10000)
    ]
    return jobs + nll_jobs(nll_reps if nll_reps is not None else reps, quick)


def nll_jobs(reps: int, quick: bool) -> list[Job]:
    """The cells of table 9 (``--quick``: beta25 and k10 only)."""
    jobs = []
    for population in NLL_POPULATIONS[::2] if quick else NLL_POPULATIONS:
        for family in NLL_FAMILIES[POPULATIONS[population].task]:
            jobs += [Job("nll", (population, family, *cell), reps) for cell in NLL_CELLS]
    return jobs


def run_all(jobs: Sequence[Job], processes: int) -> dict[tuple[str, tuple[Any, ...]], Arrays]:
    """Run the jobs, slowest first, on ``processes`` workers; progress to stderr."""
    order = sorted(jobs, key=lambda j: -j.cost)
    results: dict[tuple[str, tuple[Any, ...]], Arrays] = {}
    start = time.perf_counter()

    def note(i: int, job: Job, seconds: float) -> None:
        elapsed = time.perf_counter() - start
        print(
            f"[{i}/{len(order)}] {job.table} {job.key}: {seconds:.1f} s (elapsed {elapsed:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    if processes <= 1:
        _init_worker()
        for i, job in enumerate(order, 1):
            done, arrays, seconds = _run(job)
            results[(done.table, done.key)] = arrays
            note(i, done, seconds)
        return results
    with multiprocessing.Pool(processes, initializer=_init_worker) as pool:
        for i, (done, arrays, seconds) in enumerate(pool.imap_unordered(_run, order), 1):
            results[(done.table, done.key)] = arrays
            note(i, done, seconds)
    return results


# --- the tables ---------------------------------------------------------------------------------


def _share(x: np.ndarray) -> float:
    return float(np.mean(x)) if x.size else _NAN


def _f(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _cell_name(population: str, shape: str, level: float) -> list[str]:
    truth = _scenario(population, shape, level).true_ece
    return [population, shape if level else "calibrated", f"{level:g}", f"{truth:.4f}"]


def _verdict(failures: list[str]) -> list[str]:
    if not failures:
        return ["", "Every cell meets the targets."]
    return ["", "Cells that miss a target: " + "; ".join(failures) + "."]


def interval_section(results: dict[tuple[str, tuple[Any, ...]], Arrays]) -> list[str]:
    rows, misses = [], []
    for (table, key), a in sorted(results.items()):
        if table != "interval":
            continue
        population, shape, level, N = key
        upper, lower = _share(a["upper_below"]), _share(a["lower_above"])
        error = a["debiased_error"]
        rows.append(
            [
                *_cell_name(population, shape, level),
                f"{N:,}",
                _f(_share(a["covered"])),
                _f(upper),
                _f(lower),
                _f(_share(a["agree"])),
                _f(float(np.mean(a["width"])), 4),
                _f(float(np.median(a["plug_in_error"])), 4),
                _f(float(np.median(error)), 4),
                _f(_share(error > 0)),
            ]
        )
        reps = a["covered"].size
        slack = 2.0 * math.sqrt(TAIL_TARGET * (1 - TAIL_TARGET) / reps)
        for name, value in (("upper < truth", upper), ("lower > truth", lower)):
            if value > TAIL_TARGET + slack:
                misses.append(f"{population}/{shape}/{level:g}/N={N} {name} {value:.3f}")
        if _share(a["agree"]) < 1.0:
            misses.append(f"{population}/{shape}/{level:g}/N={N} test and interval disagree")
    header = [
        "population",
        "shape",
        "x max_ece",
        "true ECE",
        "N",
        "coverage",
        "upper < truth",
        "lower > truth",
        "excludes 0 = p < 0.05",
        "mean width",
        "plug-in median error",
        "debiased median error",
        "P(debiased > truth)",
    ]
    return _table(header, rows) + _verdict(misses)


def status_section(results: dict[tuple[str, tuple[Any, ...]], Arrays]) -> list[str]:
    rows, misses = [], []
    for (table, key), a in sorted(results.items()):
        if table != "status":
            continue
        population, shape, level, N, baseline_n = key
        share = {s: _share(a[f"status:{s}"]) for s in STATUSES}
        rows.append(
            [
                *_cell_name(population, shape, level),
                f"{N:,}",
                f"{baseline_n:,}",
                *(_f(share[s]) for s in STATUSES),
            ]
        )
        flagged = share[Status.WARN] + share[Status.ALERT]
        if level <= 0.5 and flagged > WARN_TARGET:
            misses.append(
                f"{population}/{shape}/{level:g}/N={N}/b={baseline_n} warns {flagged:.3f}"
            )
        if level <= 1.0 and share[Status.ALERT] > ALERT_TARGET:
            misses.append(f"{population}/{shape}/{level:g}/N={N} alerts {share[Status.ALERT]:.3f}")
        if level == 2.0 and N == 300 and share[Status.ALERT] < POWER_TARGET:
            misses.append(
                f"{population}/{shape}/N=300 alerts {share[Status.ALERT]:.3f} at 2 x max_ece"
            )
    header = [
        "population",
        "shape",
        "x max_ece",
        "true ECE",
        "window N",
        "baseline N",
        *STATUSES,
    ]
    return _table(header, rows) + _verdict(misses)


def gate_section(results: dict[tuple[str, tuple[Any, ...]], Arrays]) -> list[str]:
    lines: list[str] = []
    rows, misses = [], []
    checks = ("eval_ece", "nll_improvement", "calibrator_bound", "other")
    for (table, key), a in sorted(results.items()):
        if table != "gate_fresh":
            continue
        population, shape, level, eval_n = key
        fail = _share(a["failed"])
        rows.append(
            [
                *_cell_name(population, shape, level),
                f"{eval_n:,}",
                _f(fail),
                *(_f(_share(a[f"check:{c}"])) for c in checks),
            ]
        )
        if level <= 0.5 and fail > GATE_FALSE_FAIL_TARGET:
            misses.append(f"{population}/{shape}/{level:g}/{eval_n} fails {fail:.3f}")
        if level == 2.0 and eval_n >= 3000 and fail < GATE_POWER_TARGET:
            misses.append(f"{population}/{shape}/2/{eval_n} fails only {fail:.3f}")
    header = ["population", "shape", "x max_ece", "true ECE", "eval rows", "fail"]
    lines += _table([*header, *(f"{c} fails" for c in checks)], rows) + _verdict(misses)
    fitted = []
    for (table, key), a in sorted(results.items()):
        if table == "gate_fitted":
            population, method, fit_n, eval_n = key
            row = [population, method, f"{fit_n:,}", f"{eval_n:,}", _f(_share(a["failed"]))]
            fitted.append(row + [_f(_share(a.get(f"check:{c}", np.zeros(1)))) for c in checks])
        if table == "gate_degenerate":
            population, fit_n, eval_n = key
            row = [population, "temperature (separable fit set)", f"{fit_n:,}", f"{eval_n:,}"]
            row.append(_f(_share(a["failed"])))
            fitted.append(row + [_f(_share(a[f"check:{c}"])) for c in checks])
    lines += ["", "Contracts fitted by calmon, judged on their stored eval baseline:", ""]
    header = ["population", "calibrator", "fit rows", "eval rows", "fail"]
    lines += _table([*header, *(f"{c} fails" for c in checks)], fitted)
    return lines + _rule_tables(results)


def _rule_tables(results: dict[tuple[str, tuple[Any, ...]], Arrays]) -> list[str]:
    """``eval_ece`` fail rates under each ``ece_rule``: per cell, and per population."""
    rules = [rule.value for rule in EceRule]
    rows = []
    low: dict[str, dict[str, float]] = {}
    high: dict[str, dict[str, float]] = {}
    for (table, key), a in sorted(results.items()):
        if table != "gate_fresh":
            continue
        population, shape, level, eval_n = key
        rates = {rule: _share(a[f"rule:{rule}"]) for rule in rules}
        rows.append([*_cell_name(population, shape, level), f"{eval_n:,}"])
        rows[-1] += [_f(rates[rule]) for rule in rules]
        for rule in rules:
            if level <= 0.5 and eval_n >= 500:
                worst = low.setdefault(population, {}).get(rule, 0.0)
                low[population][rule] = max(worst, rates[rule])
            if level == 2.0 and eval_n >= 3000:
                least = high.setdefault(population, {}).get(rule, 1.0)
                high[population][rule] = min(least, rates[rule])
    header = ["population", "shape", "x max_ece", "true ECE", "eval rows"]
    lines = [
        "",
        "`eval_ece` under each `ece_rule`, judged on the same evaluation sets (the share of sets"
        " on which the check fails):",
        "",
        *_table([*header, *rules], rows),
        "",
        "Per population, over its shapes: the largest `eval_ece` fail rate at 0.5 x max_ece or"
        " below with 500 or more rows (target for `estimate`: at most 0.05), and the smallest at"
        " 2 x max_ece with 3,000 rows (target for `estimate`: at least 0.95):",
        "",
    ]
    summary = [
        [population]
        + [_f(low.get(population, {}).get(rule, _NAN)) for rule in rules]
        + [_f(high.get(population, {}).get(rule, _NAN)) for rule in rules]
        for population in sorted(set(low) | set(high))
    ]
    header = ["population"]
    header += [f"{rule}: worst at <= 0.5 x" for rule in rules]
    header += [f"{rule}: least at 2 x" for rule in rules]
    misses = [
        f"{population} estimate fails {low[population]['estimate']:.3f} at <= 0.5 x"
        for population in low
        if low[population]["estimate"] > GATE_FALSE_FAIL_TARGET
    ] + [
        f"{population} estimate fails only {high[population]['estimate']:.3f} at 2 x"
        for population in high
        if high[population]["estimate"] < GATE_POWER_TARGET
    ]
    return lines + _table(header, summary) + _verdict(misses)


def time_section(results: dict[tuple[str, tuple[Any, ...]], Arrays]) -> list[str]:
    rows, misses = [], []
    fleet: dict[str, float] = {}
    for (table, key), a in sorted(results.items()):
        if table != "time":
            continue
        population, shape, level, _weeks = key
        years = float(a["weeks"].sum()) / 52.0
        alerts = {w: int(a[f"alert:{w}"].sum()) for w in WINDOWS}
        warns = {w: int(a[f"warn:{w}"].sum()) for w in WINDOWS}
        rows.append(
            [
                *_cell_name(population, shape, level),
                f"{years:.1f}",
                *(f"{alerts[w] / years:.2f}" for w in WINDOWS),
                *(f"{warns[w] / years:.2f}" for w in WINDOWS),
            ]
        )
        for w in WINDOWS:
            if level <= 0.9 and alerts[w] / years > 1.0 / MTTFA_TARGET_YEARS:
                misses.append(
                    f"{population}/{shape}/{level:g} {w} alerts {alerts[w] / years:.2f}/year"
                )
        if level == 0.0:
            per_day = sum(warns.values()) / (years * 365.0) * FLEET_COHORTS
            fleet[population] = per_day
            if per_day > FLEET_WARN_TARGET:
                misses.append(f"{population} calibrated fleet warns {per_day:.2f}/day")
    header = [
        "population",
        "shape",
        "x max_ece",
        "true ECE",
        "cohort-years",
        *(f"alerts/year {w}" for w in WINDOWS),
        *(f"warns/year {w}" for w in WINDOWS),
    ]
    lines = _table(header, rows) + _verdict(misses)
    lines += [
        "",
        "False warn episodes a day of a calibrated fleet of 50 cohorts x 3 windows at 300 labels"
        " an hour (50 x the calibrated row's warns per cohort-day, all windows):",
        "",
    ]
    lines += _table(
        ["population", "warn episodes / day"], [[p, f"{v:.3f}"] for p, v in sorted(fleet.items())]
    )
    return lines


def onset_section(results: dict[tuple[str, tuple[Any, ...]], Arrays]) -> list[str]:
    """Status onsets per cohort, window and week at each constant true ECE."""
    rows, misses = [], []
    for (table, key), a in sorted(results.items()):
        if table != "time" or f"status:{next(iter(WINDOWS))}" not in a:
            continue
        population, shape, level, _weeks = key
        weeks = float(a["weeks"].sum())
        per_week = {w: float(a[f"status:{w}"].sum()) / weeks for w in WINDOWS}
        rows.append(
            [*_cell_name(population, shape, level), f"{weeks:.0f}"]
            + [f"{per_week[w]:.2f}" for w in WINDOWS]
        )
        misses += [
            f"{population}/{shape}/{level:g} {w} {per_week[w]:.2f}/week"
            for w in WINDOWS
            if per_week[w] > ONSETS_PER_WEEK_TARGET
        ]
    header = [
        "population",
        "shape",
        "x max_ece",
        "true ECE",
        "cohort-weeks",
        *(f"onsets/week {w}" for w in WINDOWS),
    ]
    return _table(header, rows) + _verdict(misses)


def step_section(results: dict[tuple[str, tuple[Any, ...]], Arrays]) -> list[str]:
    """Labels to the first alert after a step to 2 x max_ece, against the two oracles."""
    rows, misses, floors = [], [], []
    for (table, key), a in sorted(results.items()):
        if table != "step":
            continue
        population, shape = key
        labels = _delays(a["labels"])
        median, p95 = float(np.median(labels)), float(np.percentile(labels, 95))
        oracle = results.get(("step_oracle", key))
        cells = ["n/a"] * 6
        if oracle is not None:
            best, bound = _delays(oracle["labels"]), _delays(oracle["boundary_labels"])
            o = float(np.median(best)), float(np.percentile(best, 95))
            b = float(np.median(bound)), float(np.percentile(bound, 95))
            versus_oracle = median / o[0], p95 / o[1]
            versus_bound = median / b[0], p95 / b[1]
            floor = min(b[0] / o[0], b[1] / o[1])
            cells = [
                f"{o[0]:,.0f} / {o[1]:,.0f}",
                f"{versus_oracle[0]:.2f} / {versus_oracle[1]:.2f}",
                f"{b[0]:,.0f} / {b[1]:,.0f}",
                f"{versus_bound[0]:.2f} / {versus_bound[1]:.2f}",
                f"{b[0] / o[0]:.2f} / {b[1] / o[1]:.2f}",
                f"{float(oracle['alert_level'][0]):.4f}",
            ]
            if max(versus_oracle) > ORACLE_RATIO_TARGET:
                misses.append(
                    f"{population}/{shape} {versus_oracle[0]:.1f} x / {versus_oracle[1]:.1f} x "
                    "the oracle"
                )
            floors.append(floor)
        rows.append(
            [
                population,
                shape,
                f"{median:,.0f}",
                f"{p95:,.0f}",
                _f(_share(np.isfinite(labels))),
                *cells,
            ]
        )
        if median > STEP_MEDIAN_TARGET or p95 > STEP_P95_TARGET:
            misses.append(f"{population}/{shape} median {median:,.0f} p95 {p95:,.0f}")
    header = [
        "population",
        "shape",
        "median labels",
        "95th percentile",
        "alerted",
        "oracle median / 95th",
        "x oracle",
        "boundary oracle median / 95th",
        "x boundary oracle",
        "boundary oracle / oracle",
        "alert level",
    ]
    lines = _table(header, rows)
    if floors:
        below = sum(f <= ORACLE_RATIO_TARGET for f in floors)
        lines += [
            "",
            f"The boundary oracle is {min(floors):.2f}-{max(floors):.2f} times slower than the "
            f"oracle (the smaller of its median and 95th-percentile ratios), and within "
            f"{ORACLE_RATIO_TARGET:g} x of it in {below} of {len(floors)} cells.",
        ]
    return lines + _verdict(misses)


def _delays(labels: np.ndarray) -> np.ndarray:
    """Delays in labels, a missed change (-1) as infinite."""
    out = labels.astype(float)
    out[out < 0] = np.inf
    return out


def two_class_section(results: dict[tuple[str, tuple[Any, ...]], Arrays]) -> list[str]:
    rows = []
    for (table, key), a in sorted(results.items()):
        if table != "two":
            continue
        level, eval_n = key
        truth = _scenario("two_class", "prevalence", level).true_ece
        rows.append(
            [
                f"{level:g}",
                f"{truth:.4f}",
                f"{eval_n:,}",
                _f(float(np.mean(a["top_ece"])), 4),
                _f(float(np.mean(a["positive_ece"])), 4),
                _f(_share(a["failed"])),
            ]
        )
    header = [
        "x max_ece (positive view)",
        "true positive-class ECE",
        "eval rows",
        "mean top-label ECE",
        "mean positive-class ECE",
        "gate fails",
    ]
    return _table(header, rows)


def bound_section() -> list[str]:
    rows = []
    for population in (p for p in POPULATIONS if p != "two_class"):
        rng = np.random.default_rng([SEED, 7, list(POPULATIONS).index(population)])
        pool = RowPool(_scenario(population, "constant", 0.0), rng, 200_000)
        power = neyman_pearson_power(pool, 300, MAX_ECE, 2 * MAX_ECE)
        rows.append([population, _f(power)])
    return _table(["population", "most powerful test at 1%: power at N = 300"], rows)


def psi_section(results: dict[tuple[str, tuple[Any, ...]], Arrays]) -> list[str]:
    rows = []
    for (table, key), a in sorted(results.items()):
        if table != "psi":
            continue
        population, baseline_n, window_n = key
        rows.append(
            [
                population,
                f"{baseline_n:,}",
                f"{window_n:,}",
                _f(float(np.mean(a["psi"])), 4),
                _f(float(np.mean(a["no_shift"])), 4),
                _f(_share(a["p_value"] < 0.05)),
                _f(_share(a["p_value"] < 0.01)),
                _f(_share(a["psi"] > 0.1)),
            ]
        )
    header = [
        "population",
        "baseline N",
        "window N",
        "mean PSI",
        "mean no_shift",
        "p < 0.05",
        "p < 0.01",
        "PSI > 0.1",
    ]
    return _table(header, rows)


def nll_section(results: dict[tuple[str, tuple[Any, ...]], Arrays]) -> list[str]:
    """Table 9: the ``nll_improvement`` check's fail rate by the truth of its log loss, per
    family (pooled over populations and cells), then per cell."""
    by_family: dict[str, list[Arrays]] = {}
    cells_rows = []
    for (table, key), a in sorted(results.items()):
        if table != "nll":
            continue
        population, family, fitted_on, judged_on, fit_n = key
        by_family.setdefault(family, []).append(a)
        rel = a["relative"]
        cells_rows.append(
            [
                population,
                family,
                f"{fitted_on:g} -> {judged_on:g}",
                f"{fit_n:,}",
                str(rel.size),
                _f(float(np.median(rel)) if rel.size else _NAN),
                _f(_share(a["failed"])),
            ]
        )
    rows, misses = [], []
    for family, parts in sorted(by_family.items()):
        rel = np.concatenate([p["relative"] for p in parts])
        delta = np.concatenate([p["delta"] for p in parts])
        failed = np.concatenate([p["failed"] for p in parts]).astype(bool)
        no_worse, worse = delta <= 0.0, rel >= NLL_WORSE
        between = ~no_worse & ~worse
        row = [family]
        for mask in (no_worse, between, worse):
            row += [str(int(mask.sum())), _f(_share(failed[mask]))]
        rows.append(row)
        if no_worse.any() and _share(failed[no_worse]) > NLL_FALSE_FAIL_TARGET:
            misses.append(f"{family} fails {_share(failed[no_worse]):.3f} when truly no worse")
        if worse.any() and _share(failed[worse]) < NLL_POWER_TARGET:
            misses.append(f"{family} fails only {_share(failed[worse]):.3f} when truly 5% worse")
    header = ["family", "truly no worse", "fail", "worse by < 5%", "fail", "worse by >= 5%", "fail"]
    lines = _table(header, rows) + _verdict(misses)
    lines += ["", "Per cell (amplitudes of the over-confident shape, fitted on -> judged on):", ""]
    header = ["population", "family", "amplitude", "fit rows", "contracts", "median truth"]
    return lines + _table([*header, "fail"], cells_rows)


INTRO = """# Simulated error rates of calmon's statistics

Generated by `.venv/bin/python bench/bench_statistics.py {args}`; edit the script, not this
file. Every table runs on data whose true calibration is known: the scenarios of
`tests/support/simulation.py`, each a population (what the confidences look like, on which
reliability bins) with one shape of miscalibration at a true binned ECE of 0, 0.5, 0.9, 1 or 2 x
max_ece (0.05). Populations: `beta25` binary scores Beta(2, 5); `confident_binary` scores massed
near 1; `bimodal` balanced binary with modes near 0.15 and 0.85; `few_bins` three narrow modes
(three occupied bins of 15) and `few_bins_uneven` the same on six uneven bins; `imbalanced`
prevalence 2% on nine bins fine at the low end; `k10` K = 10 logits N(0, 2.5^2);
`confident_k10` K = 10 logits N(0, 6^2) (confidences massed near 1); `k100` K = 100. Shapes:
`constant` gap, `overconfident` and `underconfident` temperature misfits, `one_bin` (all the
error in one bin), `alternating` (signed gaps alternating across bins). Each cell draws from its
own generator (`default_rng([{seed}, table, *cell])`). Policy: max_ece 0.05,
max_ece_increase 0.02, min_labeled 200. Machine: {machine}; date {date}; commit {commit}.
"""


def current_commit() -> str:
    """The checkout's commit, read when the run starts (the code the run imports)."""
    import subprocess

    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return head or "unknown"


def render(
    results: dict[tuple[str, tuple[Any, ...]], Arrays], args: argparse.Namespace, commit: str
) -> str:
    import platform

    sections: list[tuple[str, str, list[str]]] = [
        (
            "1. The ECE interval",
            f"{args.tail_reps:,} draws of N rows per cell; `infer_ece` on their bin statistics."
            " Targets: each one-sided tail (`upper < truth`, `lower > truth`) at most 0.025"
            " (plus two Monte Carlo standard errors), and the interval excluding 0 exactly when"
            " the calibration test rejects at 5%. The debiased estimate's median error and"
            " P(debiased > truth) say how far it is from median-unbiased in each cell.",
            interval_section(results),
        ),
        (
            "2. Statuses per evaluation",
            f"{args.reps:,} windows per cell. Each window holds N labeled rows of a steady cohort"
            " in 5-minute blocks of 25 (300 labels an hour), after 600 rows of lookback, and is"
            " judged against a baseline of the same scenario (2 x max_ece rows: a calibrated"
            " baseline). Targets: a cohort within tolerance (at most 0.5 x max_ece) warns or"
            " alerts in at most 5% of windows; no cohort at or below max_ece alerts in more than"
            " 1%; a cohort at 2 x max_ece alerts in at least 90% of windows of 300 rows.",
            status_section(results),
        ),
        (
            "3. The review gate",
            f"{args.reps:,} evaluation sets per cell, each judged by `evaluate_gate` with the"
            " default gate policy on a registered contract with the identity calibrator (so the"
            " model's true ECE is the scenario's). Targets: fail at most 5% at 0.5 x max_ece or"
            " below with 500 or more rows; fail at least 95% at 2 x max_ece with 3,000 rows.",
            gate_section(results),
        ),
        (
            "4. Statuses over time",
            f"{args.weeks:,} cohort-weeks per cell of a steady cohort streamed at 300 labels an"
            " hour through 5-minute buckets, its 1h, 24h and 7d windows re-decided every 5"
            " minutes as the service reads them (whole hours as hour blocks, 5-minute buckets at"
            " the ragged ends, the 24 hours before as lookback: `rule_simulation.ServiceStream`,"
            " checked against the service by tests/integration/test_detector_tiling.py) by the"
            " detectors of `service/calibration/sequential.py`. Episodes are onsets of a"
            " detection. Targets: at most one false alert a year per cohort and window for"
            " calibrated cohorts and cohorts at 0.9 x max_ece; at most one false warn episode a"
            " day for a calibrated fleet of 50 cohorts x 3 windows.",
            [
                *time_section(results),
                "",
                "Status onsets at a constant true ECE: refreshes whose status is warn or alert and"
                " more severe than the previous refresh's, per cohort, window and week. Target:"
                f" at most {ONSETS_PER_WEEK_TARGET:g} at any constant true ECE.",
                "",
                *onset_section(results),
            ],
        ),
        (
            "5. A step to 2 x max_ece",
            f"{args.step_reps or args.reps:,} cohorts per cell, calibrated for a day at 300 labels"
            " an hour (after a day of lookback), then at 2 x max_ece: labels of the changed"
            " cohort until its first alert in any window, every window re-decided every 5"
            " minutes as the service reads it (`rule_simulation.ServiceStream`). Two oracles"
            " (`rule_simulation.Oracle`) run on the same calm day and change: CUSUMs of the"
            " per-row log-likelihood ratio of the changed population, both populations known to"
            " them, each with its threshold set for a mean time to a false alarm of one year of"
            " labels under its null (run lengths measured at two lower thresholds, extrapolated"
            " on ln ARL linear in the threshold). The *oracle* tests against the calibrated"
            " cohort. The *boundary oracle* tests against the same rows with every gap scaled to"
            " put the cohort at the cell's alert level (min(max_ece, U_b + max_ece_increase),"
            " U_b the upper bound of the baseline's ECE interval; column `alert level`), where"
            " the status rule must not alert: every rule that keeps a year between false alerts"
            " there detects the change no sooner than the boundary oracle, in worst-case expected"
            " delay (the CUSUM's optimality, Lorden and Moustakides). Ratios are median / 95th"
            " percentile."
            " Targets: median within 1,000 labels, 95th percentile within 3,000; median and 95th"
            f" percentile within {ORACLE_RATIO_TARGET:g} x the oracle's.",
            step_section(results),
        ),
        (
            "6. Two-class models with a prevalence error",
            "Two-class multiclass rows whose class-1 log-odds are shifted; the gate (identity"
            " contract, fresh evaluation set) judges both the top-label and the positive-class"
            " view. The true ECE is the positive-class view's.",
            two_class_section(results),
        ),
        (
            "7. What 300 rows can show",
            "The power, at level 1%, of the most powerful test (Neyman-Pearson, normal"
            " approximation of the likelihood ratio) of a gap of max_ece against one of"
            " 2 x max_ece, both toward 1/2 (over-confidence) and known to the test, on 300 rows"
            " of each population's confidences: an upper bound on any rule's alert rate at"
            " 2 x max_ece from a window of 300 rows that alerts in at most 1% of windows at"
            " max_ece.",
            bound_section(),
        ),
        (
            "8. Confidence shift (PSI) with no shift",
            f"{args.reps:,} pairs per row from the same calibrated scenario.",
            psi_section(results),
        ),
        (
            "9. The NLL check against its population truth",
            f"{args.nll_reps or args.reps:,} contracts per cell (fewer where a fit fails), each"
            " fitted by calmon with one family on `fit rows` rows and judged by the gate"
            " (default policy) on"
            f" {NLL_EVAL_ROWS:,} held-out rows. Truth: the population expected log loss of the"
            " fitted calibrator minus the uncalibrated model's, each row's expectation over its"
            f" true label distribution, averaged over {NLL_TRUTH_ROWS:,} inputs; `median truth`"
            " is that difference as a share of the uncalibrated log loss. Targets, per family:"
            " fail at most 5% when truly no worse, at least 90% when truly worse by 5% or more.",
            nll_section(results),
        ),
    ]
    text = INTRO.format(
        args=" ".join(sys.argv[1:]) or "(defaults)",
        seed=SEED,
        machine=f"{platform.machine()}, {multiprocessing.cpu_count()} cores",
        date=datetime.now(UTC).date().isoformat(),
        commit=commit,
    )
    for title, lead, lines in sections:
        text += f"\n## {title}\n\n{lead}\n\n" + "\n".join(lines) + "\n"
    return text


#: The tables ``--only`` can rerun alone, with their section titles.
SECTION_OF = {
    "status": "2. Statuses per evaluation",
    "gate": "3. The review gate",
    "step": "5. A step to 2 x max_ece",
    "time": "4. Statuses over time",
    "nll": "9. The NLL check against its population truth",
}


def _splice(existing: str, fresh: str, title: str, commit: str) -> str:
    """``existing`` with its section ``title`` replaced by ``fresh``'s, which notes its run."""

    def section(text: str) -> tuple[int, int]:
        start = text.index(f"\n## {title}\n")
        end = text.find("\n## ", start + 1)
        return start, len(text) if end < 0 else end

    start, end = section(fresh)
    body = fresh[start:end]
    head, _, rest = body.partition("\n\n")
    note = (
        f"This section was rerun alone (`{' '.join(sys.argv[1:])}`) at commit {commit} on"
        f" {datetime.now(UTC).date().isoformat()}; the other sections are from the run above."
    )
    if f"\n## {title}\n" not in existing:
        return existing.rstrip("\n") + "\n" + f"{head}\n\n{note} {rest}"
    old_start, old_end = section(existing)
    return existing[:old_start] + f"{head}\n\n{note} {rest}" + existing[old_end:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--tail-reps", type=int, default=4000)
    parser.add_argument("--weeks", type=int, default=1000)
    parser.add_argument(
        "--step-reps",
        type=int,
        default=None,
        help="changed cohorts per step cell (default --reps; the full size is 200 or more)",
    )
    parser.add_argument("--out", default="bench/results/statistics-tables.md")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--nll-reps", type=int, default=None, help="contracts per cell of table 9 (--reps)"
    )
    parser.add_argument(
        "--only",
        choices=sorted(SECTION_OF),
        help="run one table and replace only its section of --out (the rest is kept)",
    )
    args = parser.parse_args(argv)
    commit = current_commit()
    jobs = jobs_of(args.reps, args.tail_reps, args.weeks, args.quick, args.nll_reps, args.step_reps)
    if args.only:
        jobs = [j for j in jobs if j.table.split("_")[0] == args.only]
    results = run_all(jobs, args.processes)
    text = render(results, args, commit)
    if args.only:
        text = _splice(Path(args.out).read_text(), text, SECTION_OF[args.only], commit)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
