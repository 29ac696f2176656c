"""Simulated error rates of calmon's statistics, written as Markdown tables.

    .venv/bin/python bench/bench_statistics.py [--reps 1000] [--peer-reps 100]
                                         [--out docs/statistics-tables.md] [--processes 2]

Five tables, every one on data whose true calibration is known (``SCENARIOS`` of
``service/calibration/simulation.py``, 15 equal-width bins):

1. coverage of the true binned ECE by ``infer_ece``'s 95% interval, with the bias and RMSE of
   the plug-in and debiased estimates;
2. the same for two peers on the same draws (``uncertainty-calibration``, ``relplot``), when
   they are installed (they are not calmon dependencies: a missing one is skipped);
3. the error rates of the drift status rule (``assess_drift``);
4. the error rates of the review gate (``evaluate_gate`` on contracts fitted by
   ``fit_contract_spec``);
5. the confidence-shift statistic (PSI and its chi-square test) when nothing shifted.

Each cell draws from its own generator, ``numpy.random.default_rng([SEED, table, *cell])``, so
its numbers do not depend on which other cells run or on the order the worker processes finish
them. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import math
import multiprocessing
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import scipy.stats

from service.calibration.binning import default_edges
from service.calibration.drift import ALERT, INSUFFICIENT_DATA, OK, WARN, DriftPolicy, assess_drift
from service.calibration.drift import confidence_shift as shift_of
from service.calibration.ece_inference import infer_ece
from service.calibration.readings import reading_from_stats
from service.calibration.simulation import SCENARIOS
from service.calibration.stats import CalibrationStats, binary_stats, multiclass_stats
from service.common.errors import ErrorCollector, ValidationFailed
from service.contracts.fitting import fit_contract_spec
from service.contracts.labeled_sets import LabeledSet
from service.contracts.model import Contract
from service.contracts.requests import FitRequest, parse_spec_fields
from service.gate.checks import evaluate_gate
from service.gate.requests import GateRequest, parse_gate_request

SEED = 20260301
BINS = 15
EDGES = default_edges(BINS)
TASKS = ("binary", "multiclass")
TARGETS = (0.0, 0.02, 0.05, 0.10)
ECE_SIZES = (300, 1000, 3000, 10000)
DRIFT_SIZES = (200, 300, 500, 1000, 3000, 10000)
DRIFT_LEVELS = (0.0, 0.05, 0.10)
DRIFT_BASELINE_ROWS = 2000
POLICY = DriftPolicy(max_ece=0.05, max_ece_increase=0.02, min_labeled=200)
GATE_SIZES = ((500, 500), (1000, 1000), (3000, 3000), (500, 10000))
GATE_DRIFTED = (3000, 3000, 0.10)
GATE_MODELS = (("multiclass", "temperature"), ("binary", "temperature"), ("binary", "platt"))
PSI_BASELINES = (500, 3000)
PSI_WINDOWS = (50, 200, 1000, 10000)
PSI_THRESHOLD = 0.1
STATUSES = (OK, WARN, ALERT, INSUFFICIENT_DATA)
#: Generator streams: ``default_rng([SEED, stream, *cell])``.
STREAMS = {"ece": 1, "peers": 2, "drift": 3, "gate": 4, "psi": 5}
COVERAGE_TARGET = 0.93
UPPER_BELOW_TARGET = 0.035
CALIBRATED_FLAG_TARGET = 0.10
CALIBRATED_ALERT_TARGET = 0.025
TWICE_FLAG_TARGET = 0.90
GATE_FALSE_FAIL_TARGET = 0.05
GATE_MISS_TARGET = 0.95
GATE_CHECKS = ("eval_ece", "nll_improvement")
PEER_BOOTSTRAP = 100
PEER_PACKAGES = {"uncertainty-calibration": "calibration.utils", "relplot": "relplot"}
_NAN = float("nan")

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Job:
    """One cell of one table: ``reps`` repetitions of ``table``'s experiment at ``key``."""

    table: str
    key: tuple[Any, ...]
    reps: int
    peer_reps: int = 0

    @property
    def cost(self) -> float:
        """A rough relative cost, so the slowest cells start first."""
        if self.table == "ece":
            return self.reps * 0.005 + self.peer_reps * 0.6 + self.key[2] * 1e-6 * self.reps
        if self.table == "drift":
            return self.reps * 0.04
        if self.table == "gate":
            return self.reps * 0.03
        return self.reps * 0.002


# --- helpers shared by the experiments --------------------------------------------------------


def _rng(stream: str, key: Sequence[Any]) -> np.random.Generator:
    """The generator of one cell: ``default_rng([SEED, stream number, *cell integers])``."""
    return np.random.default_rng([SEED, STREAMS[stream], *_key_integers(key)])


def _key_integers(key: Sequence[Any]) -> list[int]:
    """A cell key as integers: task 0 binary / 1 multiclass, calibrator 0 temperature /
    1 platt, ECE targets in thousandths, row counts as they are."""
    codes = {"binary": 0, "multiclass": 1, "temperature": 0, "platt": 1}
    out = []
    for part in key:
        if isinstance(part, str):
            out.append(codes[part])
        elif isinstance(part, float):
            out.append(round(part * 1000))
        else:
            out.append(int(part))
    return out


def _stats(task: str, inputs: np.ndarray, labels: np.ndarray) -> CalibrationStats:
    """Calmon's additive statistics of one draw on the 15 equal-width bins."""
    if task == "binary":
        return binary_stats(inputs, labels, EDGES)
    return multiclass_stats(inputs, labels, EDGES, classwise=False)


def _confidence_and_outcome(
    task: str, inputs: np.ndarray, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """What a binned ECE compares: P(positive) and the label (binary), or the top-label
    confidence and whether the top label is right (multiclass)."""
    if task == "binary":
        return inputs, labels
    shifted = inputs - inputs.max(axis=1, keepdims=True)
    confidence = 1.0 / np.exp(shifted).sum(axis=1)
    return confidence, (inputs.argmax(axis=1) == labels).astype(np.int64)


# --- peers --------------------------------------------------------------------------------------

_PEERS: dict[str, Any] = {}


def _load_peers() -> dict[str, str | None]:
    """Import the peers that are installed; return each one's version (None: not installed)."""
    versions: dict[str, str | None] = {}
    for name, module in PEER_PACKAGES.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _PEERS[name] = importlib.import_module(module)
            versions[name] = importlib.metadata.version(name)
        except ImportError:
            versions[name] = None
    return versions


def _equal_width_occupied(probs: Any, num_bins: int = BINS) -> list[float]:
    """uncertainty-calibration binning scheme: the equal-width bins, each of >= 2 rows.

    Its bins are listed by their upper boundaries and hold ``(previous, upper]``. An empty bin
    is merged into the next (the ECE does not change); a bin of one row too (its debiased
    estimator refuses bins of fewer than two rows); rows left after the last closed bin join it.
    """
    uppers = np.arange(1, num_bins + 1, dtype=np.float64) / num_bins
    counts = np.bincount(np.searchsorted(uppers, np.asarray(probs)), minlength=num_bins)
    kept: list[float] = []
    pending = 0
    for m in range(num_bins):
        pending += int(counts[m])
        if pending >= 2:
            kept.append(float(uppers[m]))
            pending = 0
    if not kept:
        return [1.0]
    kept[-1] = 1.0
    return kept


def _uncertainty_calibration(
    confidence: np.ndarray, outcome: np.ndarray, seed: int
) -> tuple[float, float, float]:
    """uncertainty-calibration: its 95% bootstrap interval and debiased L1 estimate.

    The interval is its ``bootstrap_uncertainty`` (100 resamples, the basic interval
    ``2 plug-in - quantiles``) of its plug-in L1 error on the 15 equal-width bins; ``alpha`` is
    given in percent, as that function reads it. The estimate is ``lower_bound_scaling_ce(p=1,
    debias=True)`` on ``_equal_width_occupied`` bins. Both use numpy's global generator, seeded
    here.
    """
    cu = _PEERS["uncertainty-calibration"]
    rows = np.column_stack([confidence, outcome]).astype(np.float64)
    uppers = cu.get_equal_prob_bins(confidence, num_bins=BINS)

    def plug_in(index: list[int]) -> float:
        return float(cu.plugin_ce(cu.fast_bin(rows[np.asarray(index)], uppers), power=1))

    np.random.seed(seed)
    lower, _, upper = cu.bootstrap_uncertainty(
        list(range(rows.shape[0])), plug_in, num_samples=PEER_BOOTSTRAP, alpha=5.0
    )
    try:
        estimate = float(
            cu.lower_bound_scaling_ce(
                confidence,
                outcome.astype(np.int64),
                p=1,
                debias=True,
                num_bins=BINS,
                binning_scheme=_equal_width_occupied,
            )
        )
    except ValueError:
        estimate = _NAN
    return float(lower), float(upper), estimate


def _relplot(confidence: np.ndarray, outcome: np.ndarray, seed: int) -> tuple[float, float, float]:
    """relplot: smooth ECE and the interval ``prepare_rel_diagram`` reports for it.

    That is smECE +- the larger half of the basic bootstrap interval of
    ``scipy.stats.bootstrap(paired=True, n_resamples=100, method="basic")``.
    """
    rp = _PEERS["relplot"]
    f, y = confidence.astype(np.float64), outcome.astype(np.float64)
    estimate = float(rp.smECE(f, y))
    ci = scipy.stats.bootstrap(
        (f, y),
        rp.smECE,
        paired=True,
        n_resamples=PEER_BOOTSTRAP,
        method="basic",
        confidence_level=0.95,
        rng=np.random.default_rng(seed),
    ).confidence_interval
    half = max(estimate - float(ci.low), float(ci.high) - estimate)
    return estimate - half, estimate + half, estimate


PEER_RUNNERS: dict[str, Callable[[np.ndarray, np.ndarray, int], tuple[float, float, float]]] = {
    "uncertainty-calibration": _uncertainty_calibration,
    "relplot": _relplot,
}


# --- the experiments ----------------------------------------------------------------------------


def _ece_job(job: Job) -> Arrays:
    """Table 1 (and 2): calmon's interval on every draw, the peers on the first ones."""
    task, target, N = job.key
    scenario = SCENARIOS[(task, target)]
    rng, peer_rng = _rng("ece", job.key), _rng("peers", job.key)
    out = {k: np.full(job.reps, _NAN) for k in ("lower", "upper", "ece", "debiased")}
    for name in _PEERS:
        for k in ("lower", "upper", "estimate"):
            out[f"{name}:{k}"] = np.full(job.peer_reps, _NAN)
    for r in range(job.reps):
        inputs, labels = scenario.draw(rng, N)
        s = _stats(task, inputs, labels)
        got = infer_ece(s.bin_count, s.bin_confidence_sum, s.bin_correct_sum)
        out["lower"][r], out["upper"][r] = got.lower, got.upper
        out["ece"][r], out["debiased"][r] = got.ece, got.debiased
        if r >= job.peer_reps:
            continue
        confidence, outcome = _confidence_and_outcome(task, inputs, labels)
        seed = int(peer_rng.integers(2**32))
        for name in _PEERS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = PEER_RUNNERS[name](confidence, outcome, seed)
            for k, v in zip(("lower", "upper", "estimate"), values, strict=True):
                out[f"{name}:{k}"][r] = v
    return out


def _drift_job(job: Job) -> Arrays:
    """Table 3: statuses of windows of N rows at each true ECE against a fresh baseline."""
    task, N = job.key
    rng = _rng("drift", job.key)
    status = {level: np.empty(job.reps, dtype=object) for level in DRIFT_LEVELS}
    for r in range(job.reps):
        baseline = reading_from_stats(
            _stats(task, *SCENARIOS[(task, 0.0)].draw(rng, DRIFT_BASELINE_ROWS))
        )
        for level in DRIFT_LEVELS:
            window = reading_from_stats(_stats(task, *SCENARIOS[(task, level)].draw(rng, N)))
            status[level][r] = assess_drift(window, baseline, POLICY, edges=EDGES.tolist()).status
    return {f"status:{level}": v for level, v in status.items()}


def _spec_fields(task: str) -> dict[str, Any]:
    """The client-supplied contract fields of a simulated model (default policy, 15 bins)."""
    body: dict[str, Any] = {
        "model": "simulated",
        "checkpoint": "sha256:" + "ab" * 32,
        "task": task,
        "population": "simulated rows (bench/bench_statistics.py)",
        "outcome": "simulated labels",
        "data_window": {"start": "2026-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z"},
        "split": {"method": "independent draws"},
        "bin_edges": EDGES.tolist(),
        "policy": POLICY.to_dict(),
    }
    if task == "multiclass":
        body["classes"] = [f"class{k}" for k in range(10)]
    errors = ErrorCollector()
    fields = parse_spec_fields(body, errors)
    errors.raise_if_any("the simulated contract fields are invalid")
    return fields


def _gate_job(job: Job) -> Arrays:
    """Table 4: gate decisions on contracts fitted on calibrated rows.

    ``target`` 0: the gate judges the contract's stored eval baseline. ``target`` > 0: the
    contract is fitted and baselined on calibrated rows, and the gate judges a fresh evaluation
    set of ``eval_n`` rows drawn from the miscalibrated scenario (the model drifted).
    """
    task, method, fit_n, eval_n, target = job.key
    rng = _rng("gate", job.key)
    fields = _spec_fields(task)
    request = parse_gate_request({"contract_id": "simulated", "policy": {"max_ece": 0.05}})
    calibrated = SCENARIOS[(task, 0.0)]
    created = datetime(2026, 2, 1, tzinfo=UTC)
    failed = np.zeros(job.reps, dtype=bool)
    checks = {name: np.zeros(job.reps, dtype=bool) for name in (*GATE_CHECKS, "other")}
    for r in range(job.reps):
        fit = LabeledSet(*calibrated.draw(rng, fit_n))
        held_out = LabeledSet(*calibrated.draw(rng, eval_n))
        try:
            spec = fit_contract_spec(FitRequest(fields, method, fit, held_out))
        except ValidationFailed:
            failed[r] = checks["other"][r] = True
            continue
        contract = Contract("simulated", 1, spec, created, "bench", "0" * 64)
        asked: GateRequest = request
        if target > 0:
            inputs, labels = SCENARIOS[(task, target)].draw(rng, eval_n)
            key = "logits" if task == "multiclass" else "scores"
            asked = replace(request, evaluation={key: inputs.tolist(), "labels": labels.tolist()})
        outcome = evaluate_gate(contract, asked, "measured")
        failed[r] = outcome.decision == "fail"
        for check in outcome.checks:
            if not check.passed:
                checks[check.name if check.name in GATE_CHECKS else "other"][r] = True
    return {"failed": failed, **{f"check:{k}": v for k, v in checks.items()}}


def _psi_job(job: Job) -> Arrays:
    """Table 5: confidence shift of a window against a baseline from the same scenario."""
    task, baseline_n, window_n = job.key
    rng = _rng("psi", job.key)
    scenario = SCENARIOS[(task, 0.0)]
    out = {k: np.empty(job.reps) for k in ("psi", "no_shift", "p_value")}
    for r in range(job.reps):
        base = _stats(task, *scenario.draw(rng, baseline_n)).bin_count
        window = _stats(task, *scenario.draw(rng, window_n)).bin_count
        got = shift_of(base, window)
        out["psi"][r], out["no_shift"][r], out["p_value"][r] = got.psi, got.no_shift, got.p_value
    return out


RUNNERS: dict[str, Callable[[Job], Arrays]] = {
    "ece": _ece_job,
    "drift": _drift_job,
    "gate": _gate_job,
    "psi": _psi_job,
}


def _init_worker() -> None:
    """Worker set-up: one BLAS thread per process, the peers imported."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass
    _load_peers()


def _run(job: Job) -> tuple[Job, Arrays, float]:
    start = time.perf_counter()
    return job, RUNNERS[job.table](job), time.perf_counter() - start


def jobs_of(reps: int, peer_reps: int) -> list[Job]:
    """Every cell of every table."""
    jobs = [
        Job("ece", (task, target, N), reps, min(peer_reps, reps))
        for task in TASKS
        for target in TARGETS
        for N in ECE_SIZES
    ]
    jobs += [Job("drift", (task, N), reps) for task in TASKS for N in DRIFT_SIZES]
    for task, method in GATE_MODELS:
        jobs += [Job("gate", (task, method, f, e, 0.0), reps) for f, e in GATE_SIZES]
        jobs.append(Job("gate", (task, method, *GATE_DRIFTED), reps))
    jobs += [
        Job("psi", (task, b, w), reps) for task in TASKS for b in PSI_BASELINES for w in PSI_WINDOWS
    ]
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
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _verdict(misses: list[str]) -> str:
    if not misses:
        return "Every cell meets the targets."
    return "Cells missing a target: " + "; ".join(misses) + "."


def _truth(task: str, target: float) -> float:
    return SCENARIOS[(task, target)].true_ece


def ece_section(results: dict[tuple[str, tuple[Any, ...]], Arrays], reps: int) -> list[str]:
    """Table 1."""
    rows, misses = [], []
    for task in TASKS:
        for target in TARGETS:
            truth = _truth(task, target)
            for N in ECE_SIZES:
                a = results[("ece", (task, target, N))]
                lo, hi = a["lower"], a["upper"]
                coverage = _share((lo <= truth) & (truth <= hi))
                below = _share(hi < truth)
                rmse = math.sqrt(float(np.mean((a["debiased"] - truth) ** 2)))
                rows.append(
                    [
                        task,
                        f"{truth:.4f}",
                        f"{N:,}",
                        _f(coverage),
                        _f(below),
                        _f(_share(lo > truth)),
                        _f(float(np.mean(hi - lo)), 4),
                        _f(float(np.mean(a["ece"])), 4),
                        _f(float(np.mean(a["debiased"])), 4),
                        _f(rmse, 4),
                    ]
                )
                if coverage < COVERAGE_TARGET:
                    misses.append(f"{task} ECE {truth:.2f} N {N:,}: coverage {coverage:.3f}")
                if below > UPPER_BELOW_TARGET:
                    misses.append(f"{task} ECE {truth:.2f} N {N:,}: upper < truth {below:.3f}")
    header = [
        "task",
        "true ECE",
        "N",
        "coverage",
        "upper < truth",
        "lower > truth",
        "mean width",
        "mean plug-in",
        "mean debiased",
        "debiased RMSE",
    ]
    return [
        "## 1. ECE interval coverage",
        "",
        f"Each cell draws N labeled rows {reps:,} times from the scenario with the given true "
        "binned ECE, takes calmon's bin statistics (`binary_stats` / `multiclass_stats(..., "
        "classwise=False)`) and runs `infer_ece` on their counts, confidence sums and success "
        "counts. `coverage` is the share of draws whose 95% interval [lower, upper] contains the "
        "true ECE; `upper < truth` and `lower > truth` split the misses by side; the means are "
        "over draws; the RMSE is the debiased ECE's against the true ECE. Targets: coverage "
        f">= {COVERAGE_TARGET} and upper < truth <= {UPPER_BELOW_TARGET} in every cell. "
        "Generator of a cell: `default_rng([20260301, 1, task, 1000 x target ECE, N])`.",
        "",
        *_table(header, rows),
        "",
        _verdict(misses),
        "",
    ]


def peer_section(
    results: dict[tuple[str, tuple[Any, ...]], Arrays],
    peer_reps: int,
    versions: dict[str, str | None],
) -> list[str]:
    """Table 2: one table per installed peer, with calmon's coverage on the same draws."""
    out = [
        "## 2. Peers on the same draws",
        "",
        f"The first {peer_reps:,} draws of every cell of table 1 also go to two open-source "
        "estimators, as they ship: binary rows as P(positive) with the label, multiclass rows "
        "as the top-label confidence with whether the top label is right. `calmon coverage` is "
        "table 1's coverage on the same draws. `bias` is the mean estimate minus the true "
        "binned ECE. Peer randomness (bootstrap resamples) comes from "
        "`default_rng([20260301, 2, task, 1000 x target ECE, N])`.",
        "",
    ]
    notes = {
        "uncertainty-calibration": (
            "`uncertainty-calibration` {version} (import `calibration`). Its top-level "
            "`get_calibration_error` picks equal-mass bins for continuous scores and takes no "
            "bin edges, and `get_calibration_error_uncertainties` bootstraps that equal-mass "
            "plug-in while passing its `alpha` (a fraction, 0.1 by default) to "
            "`bootstrap_uncertainty`, which reads it as a percentage, so the default interval "
            "is a 99.9% one. The table therefore calls its lower-level functions on the 15 "
            "equal-width bins: the interval is `bootstrap_uncertainty(..., num_samples=100, "
            "alpha=5.0)` of its plug-in L1 error (`plugin_ce` on `fast_bin` with "
            "`get_equal_prob_bins(15)`), the basic bootstrap interval `2 x plug-in - "
            "quantiles`; the estimate is its debiased L1 error `lower_bound_scaling_ce(p=1, "
            "debias=True, num_bins=15)` on the equal-width bins with empty bins dropped (the "
            "binned ECE does not change) and one-row bins merged into the next, because its "
            "debiased estimator refuses any bin of fewer than two rows (the lowest top-label "
            "bin is always empty). Both estimate the same binned ECE as calmon."
        ),
        "relplot": (
            "`relplot` {version}. It estimates the smooth ECE (`relplot.smECE`, kernel "
            "smoothing with its automatic bandwidth), a different quantity from the 15-bin "
            "binned ECE: its coverage of the binned ECE is reported for comparison, not as a "
            "test against its own target, and `bias` is smECE minus the binned ECE. The "
            "interval is the one `relplot.prepare_rel_diagram` reports, smECE +- the larger "
            "half of `scipy.stats.bootstrap((f, y), smECE, paired=True, n_resamples=100, "
            'method="basic", confidence_level=0.95)`.'
        ),
    }
    header = [
        "task",
        "true ECE",
        "N",
        "calmon coverage",
        "coverage",
        "upper < truth",
        "lower > truth",
        "mean width",
        "mean estimate",
        "bias",
    ]
    for number, name in enumerate(PEER_PACKAGES, 1):
        version = versions.get(name)
        out += [f"### 2.{number}. {name}", ""]
        if version is None:
            out += [f"`{name}` is not installed in this environment; its table is skipped.", ""]
            continue
        out += [notes[name].format(version=version), ""]
        rows, failed = [], 0
        for task in TASKS:
            for target in TARGETS:
                truth = _truth(task, target)
                for N in ECE_SIZES:
                    a = results[("ece", (task, target, N))]
                    n = a[f"{name}:lower"].size
                    lo, hi, est = (a[f"{name}:{k}"] for k in ("lower", "upper", "estimate"))
                    ours = (a["lower"][:n] <= truth) & (truth <= a["upper"][:n])
                    failed += int(np.isnan(est).sum())
                    rows.append(
                        [
                            task,
                            f"{truth:.4f}",
                            f"{N:,}",
                            _f(_share(ours)),
                            _f(_share((lo <= truth) & (truth <= hi))),
                            _f(_share(hi < truth)),
                            _f(_share(lo > truth)),
                            _f(float(np.mean(hi - lo)), 4),
                            _f(float(np.nanmean(est)), 4),
                            _f(float(np.nanmean(est)) - truth, 4),
                        ]
                    )
        out += _table(header, rows)
        out.append("")
        if failed:
            out += [f"The estimate failed on {failed} draws (left out of its means).", ""]
    return out


def drift_section(results: dict[tuple[str, tuple[Any, ...]], Arrays], reps: int) -> list[str]:
    """Table 3."""
    rows, misses = [], []
    for task in TASKS:
        for N in DRIFT_SIZES:
            a = results[("drift", (task, N))]
            share = {
                level: {s: _share(a[f"status:{level}"] == s) for s in STATUSES}
                for level in DRIFT_LEVELS
            }
            flagged = {level: share[level][WARN] + share[level][ALERT] for level in DRIFT_LEVELS}
            calm = share[0.0]
            rows.append(
                [
                    task,
                    f"{N:,}",
                    _f(flagged[0.0]),
                    _f(calm[ALERT]),
                    _f(calm[INSUFFICIENT_DATA]),
                    _f(calm[OK]),
                    _f(flagged[0.05]),
                    _f(share[0.05][ALERT]),
                    _f(flagged[0.10]),
                    _f(share[0.10][ALERT]),
                    _f(share[0.10][INSUFFICIENT_DATA]),
                ]
            )
            if flagged[0.0] > CALIBRATED_FLAG_TARGET:
                misses.append(f"{task} N {N:,}: calibrated flagged {flagged[0.0]:.3f}")
            if calm[ALERT] > CALIBRATED_ALERT_TARGET:
                misses.append(f"{task} N {N:,}: calibrated alerted {calm[ALERT]:.3f}")
            if N == 300 and flagged[0.10] < TWICE_FLAG_TARGET:
                misses.append(f"{task} N 300: 2 x max_ece flagged {flagged[0.10]:.3f}")
    header = [
        "task",
        "window N",
        "ECE 0: flagged",
        "ECE 0: alert",
        "ECE 0: insufficient_data",
        "ECE 0: ok",
        "ECE 0.05: flagged",
        "ECE 0.05: alert",
        "ECE 0.10: flagged",
        "ECE 0.10: alert",
        "ECE 0.10: insufficient_data",
    ]
    return [
        "## 3. Drift status error rates",
        "",
        f"Each repetition ({reps:,} per row) draws a perfectly calibrated baseline eval set of "
        f"{DRIFT_BASELINE_ROWS:,} rows and, against it, one window of N labeled rows at each "
        "true ECE (0, 0.05 = max_ece, 0.10 = 2 x max_ece); `reading_from_stats` makes the "
        "readings and `assess_drift` decides the status under the default policy (max_ece "
        "0.05, max_ece_increase 0.02, min_labeled 200) on 15 equal-width bins. `flagged` is the "
        "share of warn or alert. Targets: a calibrated window is flagged in at most "
        f"{CALIBRATED_FLAG_TARGET:.0%} and alerted in at most {CALIBRATED_ALERT_TARGET:.1%} of "
        f"draws at every N >= 200; a window at 2 x max_ece is flagged in at least "
        f"{TWICE_FLAG_TARGET:.0%} at N = 300; true ECE = max_ece is shown for information. "
        "Generator of a row: `default_rng([20260301, 3, task, N])`.",
        "",
        *_table(header, rows),
        "",
        _verdict(misses),
        "",
    ]


def gate_section(results: dict[tuple[str, tuple[Any, ...]], Arrays], reps: int) -> list[str]:
    """Table 4."""
    rows, misses = [], []
    for task, method in GATE_MODELS:
        cells = [(f, e, 0.0) for f, e in GATE_SIZES] + [GATE_DRIFTED]
        for fit_n, eval_n, target in cells:
            a = results[("gate", (task, method, fit_n, eval_n, target))]
            fail = _share(a["failed"])
            rows.append(
                [
                    task,
                    method,
                    f"{_truth(task, target):.4f}",
                    f"{fit_n:,}",
                    f"{eval_n:,}",
                    "fresh evaluation" if target else "stored eval baseline",
                    _f(fail),
                    *(_f(_share(a[f"check:{k}"])) for k in (*GATE_CHECKS, "other")),
                ]
            )
            if target == 0.0 and eval_n >= 500 and fail > GATE_FALSE_FAIL_TARGET:
                misses.append(f"{task} {method} fit {fit_n:,} eval {eval_n:,}: fails {fail:.3f}")
            if target > 0.0 and fail < GATE_MISS_TARGET:
                misses.append(f"{task} {method} true ECE {target:.2f}: fails only {fail:.3f}")
    header = [
        "task",
        "calibrator",
        "true ECE",
        "fit rows",
        "eval rows",
        "gate judges",
        "fail",
        "eval_ece fails",
        "nll_improvement fails",
        "other checks fail",
    ]
    return [
        "## 4. Gate error rates",
        "",
        f"Each repetition ({reps:,} per row) draws a fit set and an eval set from the perfectly "
        "calibrated scenario, fits a contract with calmon's own fit (`fit_contract_spec`: "
        "temperature for multiclass, temperature or Platt for binary; 15 equal-width bins, "
        "default policy) and runs `evaluate_gate` with the default gate policy and max_ece "
        "0.05. Calibrated rows: the gate judges the contract's stored eval baseline. Rows at "
        "true ECE 0.10 (2 x max_ece): the contract is fitted and baselined on calibrated rows, "
        "and the gate judges a fresh `evaluation` set of 3,000 rows drawn from the 0.10 "
        "scenario, so the calibrator (fitted before the model drifted) cannot remove the error. "
        "The check columns are the share of repetitions in which that check fails (a "
        "repetition can fail several). Targets: a calibrated model fails in at most "
        f"{GATE_FALSE_FAIL_TARGET:.0%} of repetitions with >= 500 eval rows; a model at "
        f"2 x max_ece fails in at least {GATE_MISS_TARGET:.0%}. Generator of a row: "
        "`default_rng([20260301, 4, task, calibrator, fit rows, eval rows, 1000 x target "
        "ECE])`, calibrator 0 = temperature, 1 = Platt.",
        "",
        *_table(header, rows),
        "",
        _verdict(misses),
        "",
    ]


def psi_section(results: dict[tuple[str, tuple[Any, ...]], Arrays], reps: int) -> list[str]:
    """Table 5."""
    rows = []
    for task in TASKS:
        for b in PSI_BASELINES:
            for w in PSI_WINDOWS:
                a = results[("psi", (task, b, w))]
                rows.append(
                    [
                        task,
                        f"{b:,}",
                        f"{w:,}",
                        _f(float(np.mean(a["psi"])), 4),
                        _f(float(np.mean(a["no_shift"])), 4),
                        _f(_share(a["p_value"] < 0.05)),
                        _f(_share(a["p_value"] < 0.01)),
                        _f(_share(a["psi"] > PSI_THRESHOLD)),
                    ]
                )
    header = [
        "task",
        "baseline N",
        "window N",
        "mean PSI",
        "mean no_shift",
        "p < 0.05",
        "p < 0.01",
        f"PSI > {PSI_THRESHOLD}",
    ]
    return [
        "## 5. Confidence shift (PSI) with no shift",
        "",
        f"Baseline and window ({reps:,} pairs per row) come from the same perfectly calibrated "
        "scenario; `drift.confidence_shift` compares their confidence-bin counts (15 "
        "equal-width bins). `mean no_shift` is the mean of its no-shift level "
        "`ConfidenceShift.no_shift`; `p < 0.05` and `p < 0.01` are the shares of draws whose "
        "chi-square homogeneity test rejects at that level (the test holds its level when they "
        f"are near 0.05 and 0.01); `PSI > {PSI_THRESHOLD}` is the share above the customary "
        "PSI threshold. Generator of a row: `default_rng([20260301, 5, task, baseline N, "
        "window N])`.",
        "",
        *_table(header, rows),
        "",
    ]


def document(
    results: dict[tuple[str, tuple[Any, ...]], Arrays],
    reps: int,
    peer_reps: int,
    versions: dict[str, str | None],
    kept: dict[str, str],
) -> str:
    """The whole Markdown file; ``kept`` sections (by table name) are copied, not computed."""
    head = [
        "# Simulated error rates of calmon's statistics",
        "",
        "Generated by `.venv/bin/python bench/bench_statistics.py --reps "
        f"{reps} --peer-reps {peer_reps}`; edit the script, not this file. Every table runs on "
        "data whose true calibration is known, the scenarios of "
        "`service/calibration/simulation.py`: binary scores p ~ Beta(2, 5) with outcomes "
        "drawn at sigmoid(a logit p), and multiclass K = 10 logits ~ N(0, 2.5^2) with labels "
        "drawn from softmax(z / t), the distortion set for a true binned ECE (15 equal-width "
        "bins) of 0, 0.02, 0.05 or 0.10. The ECE interval is that of "
        "`service/calibration/ece_inference.py`: deterministic, computed from per-bin counts, "
        "confidence sums and success counts by inverting the distribution of the plug-in ECE "
        "(exact binomial and folded-normal cumulants, Cornish-Fisher quantiles). Table 1 is "
        "that interval's coverage; table 2 the same for two open-source peers on the same "
        "draws; table 3 the error rates of the drift status rule; table 4 those of the review "
        f"gate; table 5 the confidence-shift statistic when nothing shifted. Repetitions: "
        f"{reps:,} per cell, {peer_reps:,} for the peers. Seeds: every cell draws from its own "
        "generator `numpy.random.default_rng([20260301, table, *cell])`, the cell given as "
        "integers (task 0 = binary, 1 = multiclass; target ECEs in thousandths; row counts as "
        "they are), so a cell's numbers do not depend on which other cells run. A share near "
        f"0.95 from {reps:,} repetitions carries a Monte Carlo standard error of about "
        f"{math.sqrt(0.95 * 0.05 / reps):.3f}, a share near 0.025 about "
        f"{math.sqrt(0.025 * 0.975 / reps):.3f}.",
        "",
    ]
    sections: dict[str, Callable[[], list[str]]] = {
        "ece": lambda: ece_section(results, reps),
        "peers": lambda: peer_section(results, peer_reps, versions),
        "drift": lambda: drift_section(results, reps),
        "gate": lambda: gate_section(results, reps),
        "psi": lambda: psi_section(results, reps),
    }
    body: list[str] = []
    for table, section in sections.items():
        body += [kept[table]] if table in kept else section()
    return "\n".join(head + body).rstrip() + "\n"


def kept_sections(path: Path, tables: Sequence[str]) -> dict[str, str]:
    """The sections of an earlier output for the tables not run now (``## N.`` headers)."""
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    parts = text.split("\n## ")[1:]
    names = list(STREAMS)
    out = {}
    for part in parts:
        number = int(part.split(".", 1)[0])
        name = names[number - 1]
        if name not in tables:
            out[name] = ("## " + part).rstrip() + "\n"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1000, help="repetitions per cell")
    parser.add_argument(
        "--peer-reps", type=int, default=100, help="repetitions per cell for the peers"
    )
    parser.add_argument("--out", type=Path, default=Path("docs/statistics-tables.md"))
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--tables",
        default=",".join(STREAMS),
        help=f"comma-separated tables to run ({', '.join(STREAMS)}); the others are kept from "
        "the existing output",
    )
    args = parser.parse_args()
    tables = [t for t in args.tables.split(",") if t]
    unknown = set(tables) - set(STREAMS)
    if unknown:
        parser.error(f"unknown tables: {', '.join(sorted(unknown))}")
    versions = _load_peers()
    for name, version in versions.items():
        if version is None:
            print(f"note: {name} is not installed; its table is skipped", file=sys.stderr)
    peer_reps = min(args.peer_reps, args.reps) if any(versions.values()) else 0
    start = time.perf_counter()
    kept = kept_sections(args.out, tables)
    jobs = [job for job in jobs_of(args.reps, peer_reps) if job.table in tables]
    results = run_all(jobs, args.processes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = document(results, args.reps, peer_reps, versions, kept)
    args.out.write_text(text, encoding="utf-8")
    minutes = (time.perf_counter() - start) / 60.0
    print(f"wrote {args.out} in {minutes:.1f} min", file=sys.stderr)


if __name__ == "__main__":
    main()
