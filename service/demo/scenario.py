"""The ``calmon demo`` scenario: a seeded stream of predictions and delayed labels (pure numpy).

The scenario (event time, UTC; "now" is when the demo starts):

* A 3-class support-ticket router (``billing``, ``technical``, ``account``) whose raw logits are
  over-confident: the true class is drawn from ``softmax(z / TRUE_TEMPERATURE)``. The demo posts
  a labeled fit set and a disjoint held-out eval set to ``POST /v1/contracts/fit``; the service
  fits the temperature (close to ``TRUE_TEMPERATURE``) and stores the contract.
* ``rate`` predictions per simulated hour over the last ``hours`` hours, in three cohorts
  ``region=eu|us|apac`` (``COHORT_SHARES``). Each label becomes known a uniform 1-4 hours after
  its prediction (``LABEL_DELAY_HOURS``).
* From halfway through the span, a share ``DRIFT_SHARE`` of apac's tickets come from something
  the model never saw: it routes them with its usual confidence, but to a wrong queue (the label
  is drawn uniformly among the classes it did not pick). apac's accuracy drops while its
  confidence does not, so its ECE rises; eu and us stay calibrated.
* A simulated clock walks the span in ``STEP`` steps. Each step sends the predictions whose
  time falls in it, then the labels whose time has come; labels due after "now" are never sent,
  so the newest predictions stay unlabeled, as in production.

With the defaults (12 hours, 1,500 predictions an hour), replaying the scenario through the
calibration core for seeds 0-99 gives ``alert`` for apac's 24h reading and ``ok`` for eu and us
every time; at 8 hours apac is still warn or alert every time, at 6 hours only 87 times in 100 (too
few of its over-confident predictions are labeled by the end), so ``MIN_HOURS`` is 8.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

CLASSES = ("billing", "technical", "account")
COHORT_KEY = "region"
COHORTS = ("eu", "us", "apac")
COHORT_SHARES = (0.40, 0.35, 0.25)
DRIFTING = "apac"
#: The raw logits are this many times too sharp; the service's fitted temperature recovers it.
TRUE_TEMPERATURE = 1.6
#: Share of the drifting cohort's predictions, after the onset, that are confidently wrong.
DRIFT_SHARE = 0.4
LABEL_DELAY_HOURS = (1.0, 4.0)
#: Rows in each of the contract's fit and eval sets.
REFERENCE_ROWS = 3000
BIN_EDGES = [round(k / 10, 1) for k in range(11)]
POLICY = {"max_ece": 0.05, "max_ece_increase": 0.03, "min_labeled": 200}
STEP = timedelta(minutes=15)


@dataclass(frozen=True, eq=False)
class Scenario:
    """The generated stream; row ``i`` is one prediction and its (possibly future) label.

    ``offsets`` are seconds since ``start`` in ascending order, ``label_offsets`` likewise for
    each row's label (always 1-4 hours after its prediction, so possibly after ``end``);
    ``regions`` index ``COHORTS``; ``logits`` is (N, 3) raw logits rounded to 4 decimals;
    ``labels`` index ``CLASSES``; ``drifted`` marks the rows made confidently wrong.
    """

    start: datetime
    end: datetime
    onset: datetime
    offsets: np.ndarray
    label_offsets: np.ndarray
    regions: np.ndarray
    logits: np.ndarray
    labels: np.ndarray
    drifted: np.ndarray

    @property
    def span_seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def labeled_by_end(self) -> np.ndarray:
        """Rows whose label is due before ``end``: the labels the demo sends."""
        return self.label_offsets < self.span_seconds


def _softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Row-wise ``softmax(z / T)`` of (N, K) logits (kept local: the calibration package pulls in
    scipy, a second of start-up for a CLI that needs none of it)."""
    z = (logits - logits.max(axis=1, keepdims=True)) / temperature
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, 3) raw logits with a noisy margin for one class, and labels ~ softmax(z / T_true)."""
    logits = rng.normal(0.0, 1.0, size=(n, len(CLASSES)))
    logits[np.arange(n), rng.integers(0, len(CLASSES), n)] += rng.uniform(1.0, 5.0, n)
    logits = np.round(logits, 4)
    cumulative = np.cumsum(_softmax(logits, TRUE_TEMPERATURE), axis=1)
    labels = (rng.random(n)[:, None] > cumulative[:, :-1]).sum(axis=1)
    return logits, labels


def reference_sets(seed: int) -> dict[str, dict[str, list[Any]]]:
    """The contract's labeled ``fit`` and ``eval`` sets (disjoint draws), as the API takes them."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[0])
    sets = {}
    for name in ("fit", "eval"):
        logits, labels = _draw(rng, REFERENCE_ROWS)
        sets[name] = {"logits": logits.tolist(), "labels": labels.tolist()}
    return sets


def build_scenario(*, seed: int, hours: float, rate: float, end: datetime) -> Scenario:
    """Generate the stream for ``[end - hours, end)``; the same arguments give the same stream."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])
    span = hours * 3600.0
    n = max(1, round(rate * hours))
    offsets = np.sort(rng.uniform(0.0, span, n))
    regions = rng.choice(len(COHORTS), size=n, p=COHORT_SHARES)
    logits, labels = _draw(rng, n)
    low, high = LABEL_DELAY_HOURS
    label_offsets = offsets + rng.uniform(low * 3600.0, high * 3600.0, n)
    drifted = (
        (regions == COHORTS.index(DRIFTING)) & (offsets >= span / 2) & (rng.random(n) < DRIFT_SHARE)
    )
    wrong = (logits.argmax(axis=1) + rng.integers(1, len(CLASSES), n)) % len(CLASSES)
    start = end - timedelta(seconds=span)
    return Scenario(
        start=start,
        end=end,
        onset=start + timedelta(seconds=span / 2),
        offsets=offsets,
        label_offsets=label_offsets,
        regions=regions,
        logits=logits,
        labels=np.where(drifted, wrong, labels),
        drifted=drifted,
    )


@dataclass(frozen=True)
class Tick:
    """One step of the simulated clock: rows whose prediction, and rows whose label, fall in
    ``[clock - STEP, clock)`` (label rows in label-time order)."""

    clock: datetime
    predictions: np.ndarray
    labels: np.ndarray


def ticks(scenario: Scenario, step: timedelta = STEP) -> Iterator[Tick]:
    """Walk the span: every prediction once, each label after its prediction, none after end."""
    span, width = scenario.span_seconds, step.total_seconds()
    bounds = [*np.arange(0.0, span, width)[1:], span]
    by_label_time = np.argsort(scenario.label_offsets, kind="stable")
    label_times = scenario.label_offsets[by_label_time]
    p0 = l0 = 0
    for bound in bounds:
        p1 = int(np.searchsorted(scenario.offsets, bound, side="left"))
        l1 = int(np.searchsorted(label_times, bound, side="left"))
        yield Tick(
            clock=scenario.start + timedelta(seconds=float(bound)),
            predictions=np.arange(p0, p1),
            labels=by_label_time[l0:l1],
        )
        p0, l0 = p1, l1
